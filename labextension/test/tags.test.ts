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

  it('is "same as above" without a role tag or step name', () => {
    expect(readRole([], VOCABULARY)).toEqual({ role: 'continue', step: '' });
    expect(readRole(['hide-input', 'after:x', 'gpu:1'], VOCABULARY).role).toBe(
      'continue'
    );
    // A bare `step` or a role word with a value is no role tag.
    expect(readRole(['step', 'imports:x'], VOCABULARY).role).toBe('continue');
  });

  it("continues the step above on an empty `block:` (Kale's editor)", () => {
    expect(readRole(['block:'], VOCABULARY)).toEqual({
      role: 'continue',
      step: ''
    });
    expect(readRole(['step: ', 'prev:a', 'gpu:1'], VOCABULARY)).toEqual({
      role: 'continue',
      step: ''
    });
    // Beside a named one, the empty tag adds nothing.
    expect(readRole(['block:', 'block:train'], VOCABULARY)).toEqual({
      role: 'step',
      step: 'train'
    });
  });

  it('lets a role tag decide the cell wherever it stands (Kale)', () => {
    expect(readRole(['skip', 'step:b'], VOCABULARY).role).toBe('skip');
    expect(readRole(['step:a', 'skip'], VOCABULARY)).toEqual({
      role: 'skip',
      step: ''
    });
    expect(readRole(['prev:a', 'skip'], VOCABULARY)).toEqual({
      role: 'skip',
      step: ''
    });
    expect(readRole(['step:x', 'imports'], VOCABULARY)).toEqual({
      role: 'imports',
      step: ''
    });
    expect(readRole(['block:', 'pipeline-metrics'], VOCABULARY).role).toBe(
      'metrics'
    );
    // Of two role tags, the first.
    expect(readRole(['functions', 'imports'], VOCABULARY).role).toBe(
      'functions'
    );
    expect(
      readRole(['step:a', 'pipeline-parameters', 'skip'], VOCABULARY).role
    ).toBe('parameters');
  });

  it('takes the first step name of several', () => {
    expect(readRole(['step:a', 'block:b'], VOCABULARY)).toEqual({
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
    // An empty `block:` says the same as no tag: it goes.
    expect(withRole(['block:', 'gpu:1'], 'continue', '', VOCABULARY)).toEqual([
      'gpu:1'
    ]);
  });

  it('gives an empty `block:` cell or a role cell its own step', () => {
    expect(withRole(['block:', 'gpu:1'], 'step', 'fit', VOCABULARY)).toEqual([
      'step:fit',
      'gpu:1'
    ]);
    expect(withRole(['step:x', 'imports'], 'step', 'x', VOCABULARY)).toEqual([
      'step:x'
    ]);
    expect(withRole(['prev:a', 'skip'], 'step', 'b', VOCABULARY)).toEqual([
      'step:b',
      'prev:a'
    ]);
    expect(withRole(['block:'], 'skip', '', VOCABULARY)).toEqual(['skip']);
  });

  it('writes no step tag for a step without a name', () => {
    expect(withRole(['block:a', 'gpu:1'], 'step', ' ', VOCABULARY)).toEqual([
      'gpu:1'
    ]);
    expect(readRole(withRole([], 'step', '', VOCABULARY), VOCABULARY)).toEqual({
      role: 'continue',
      step: ''
    });
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
