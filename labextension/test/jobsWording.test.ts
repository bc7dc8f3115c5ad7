/** The jobs panel's wording: the log header's state and the forms' placeholders. */
import { describe, expect, it } from 'vitest';

import { example } from '../src/common/form/placeholders';
import { logStateLabel } from '../src/jobs/format';

describe('log header', () => {
  it('says live while the log streams', () => {
    expect(logStateLabel('streaming', { state: 'Running' })).toBe('live');
  });

  it('says complete once the replica has finished and its stream ended', () => {
    for (const state of ['Succeeded', 'Failed'] as const) {
      expect(logStateLabel('ended', { state })).toBe('complete');
    }
  });

  it('never says ended while the replica still runs: it reconnects', () => {
    for (const state of ['Pending', 'Running'] as const) {
      expect(logStateLabel('ended', { state })).toBe('reconnecting…');
    }
  });

  it('says nothing before a read, on an error, or for no replica', () => {
    expect(logStateLabel('idle', { state: 'Running' })).toBe('');
    expect(logStateLabel('error', { state: 'Running' })).toBe('');
    expect(logStateLabel('ended', undefined)).toBe('');
  });
});

describe('placeholders', () => {
  it('mark an example as one', () => {
    expect(example('mnist-ddp')).toBe('e.g. mnist-ddp');
  });
});
