/** The cell editor's tag reading and rewriting, in the server's tag vocabulary. */
import { describe, expect, it } from 'vitest';

import {
  ITagVocabulary,
  readRole,
  roleChoices,
  withRole
} from '../src/pipeline/tags';

/** `tags` of `GET /pipelines/config` (cube_jupyter/pipelines/tags.py `vocabulary()`). */
const VOCABULARY: ITagVocabulary = {
  roles: {
    parameters: ['parameters', 'pipeline-parameters'],
    metrics: ['metrics', 'pipeline-metrics'],
    imports: ['imports'],
    functions: ['functions'],
    skip: ['skip']
  },
  step: ['step', 'block'],
  after: ['after', 'prev'],
  options: ['cpu', 'gpu', 'image', 'limit', 'memory', 'retries', 'timeout']
};

describe('readRole', () => {
  it('reads steps and shared roles, Kale aliases included', () => {
    expect(readRole(['step:train'], VOCABULARY)).toEqual({
      role: 'step',
      step: 'train'
    });
    expect(readRole(['block:load_data'], VOCABULARY)).toEqual({
      role: 'step',
      step: 'load_data'
    });
    expect(readRole(['pipeline-parameters'], VOCABULARY).role).toBe(
      'parameters'
    );
    expect(readRole(['pipeline-metrics'], VOCABULARY).role).toBe('metrics');
    expect(readRole(['imports'], VOCABULARY).role).toBe('imports');
    expect(readRole(['skip'], VOCABULARY).role).toBe('skip');
  });

  it('reads keys as the server does: trimmed, any case', () => {
    expect(readRole([' Block : prep '], VOCABULARY)).toEqual({
      role: 'step',
      step: 'prep'
    });
    expect(readRole(['PIPELINE-PARAMETERS'], VOCABULARY).role).toBe(
      'parameters'
    );
  });

  it('is "same as above" without a role tag, and the first role tag wins', () => {
    expect(readRole([], VOCABULARY)).toEqual({ role: 'continue', step: '' });
    expect(readRole(['hide-input', 'after:x', 'gpu:1'], VOCABULARY).role).toBe(
      'continue'
    );
    // A bare `step` or a role word with a value is no role tag.
    expect(readRole(['step', 'imports:x'], VOCABULARY).role).toBe('continue');
    expect(readRole(['skip', 'step:b'], VOCABULARY).role).toBe('skip');
    expect(readRole(['step:a', 'skip'], VOCABULARY)).toEqual({
      role: 'step',
      step: 'a'
    });
  });
});

describe('withRole', () => {
  it('writes the first spelling of the role, replacing any other role tag', () => {
    expect(
      withRole(['block:old', 'hide-input'], 'step', 'new', VOCABULARY)
    ).toEqual(['step:new', 'hide-input']);
    expect(withRole(['step:a'], 'parameters', '', VOCABULARY)).toEqual([
      'parameters'
    ]);
    expect(withRole(['pipeline-metrics'], 'imports', '', VOCABULARY)).toEqual([
      'imports'
    ]);
  });

  it("keeps a step's options on a step, drops them from a shared cell", () => {
    const tags = [
      'step:train',
      'after:load',
      'prev:prep',
      'gpu:1',
      'limit:cpu:2',
      'hide-input'
    ];
    expect(withRole(tags, 'step', 'fit', VOCABULARY)).toEqual([
      'step:fit',
      'after:load',
      'prev:prep',
      'gpu:1',
      'limit:cpu:2',
      'hide-input'
    ]);
    expect(withRole(tags, 'functions', '', VOCABULARY)).toEqual([
      'functions',
      'hide-input'
    ]);
  });

  it('leaves only the other tags for "same as above"', () => {
    expect(
      withRole(['skip', 'after:a', 'hide-input'], 'continue', '', VOCABULARY)
    ).toEqual(['after:a', 'hide-input']);
  });

  it('reads back what it wrote', () => {
    for (const { value } of roleChoices(VOCABULARY)) {
      const tags = withRole(
        ['injected-parameters'],
        value,
        'my-step',
        VOCABULARY
      );
      expect(readRole(tags, VOCABULARY).role).toBe(value);
    }
  });
});

describe('roleChoices', () => {
  it("offers the server's roles, labelled, in reading order", () => {
    expect(roleChoices(VOCABULARY).map(c => c.value)).toEqual([
      'continue',
      'step',
      'imports',
      'functions',
      'parameters',
      'metrics',
      'skip'
    ]);
    const fewer = {
      ...VOCABULARY,
      roles: { imports: ['imports'], extra: ['x'] }
    };
    expect(roleChoices(fewer)).toEqual([
      { value: 'continue', label: 'Same as cell above' },
      { value: 'step', label: 'Starts step' },
      { value: 'imports', label: 'Imports' },
      { value: 'extra', label: 'extra' }
    ]);
  });
});
