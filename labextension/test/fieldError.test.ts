/** Where the server's `{message, reason, field}` shows in a form. */
import { describe, expect, it } from 'vitest';

import {
  fieldError,
  isInvalid,
  isWithin,
  messageFor,
  placed,
  placeError
} from '../src/common/fieldError';

const TRAINING = [
  'name',
  'framework',
  'replicas.master.replicas',
  'replicas.worker.replicas',
  'resources.cpu',
  'resources.memory',
  'parameters.lr',
  'parameters.lr.max'
];

describe('placeError', () => {
  it('routes an error to the field it names', () => {
    expect(placeError(TRAINING, 'name')).toBe('name');
    expect(placeError(TRAINING, 'resources.cpu')).toBe('resources.cpu');
    expect(placeError(TRAINING, 'parameters.lr.max')).toBe('parameters.lr.max');
  });

  it('routes it to the one field inside what it names', () => {
    expect(placeError(TRAINING, 'replicas.worker')).toBe(
      'replicas.worker.replicas'
    );
  });

  it('singles out no field when several are inside', () => {
    expect(placeError(TRAINING, 'resources')).toBeNull();
    expect(placeError(TRAINING, 'replicas')).toBeNull();
  });

  it('routes it to the closest field around what it names', () => {
    expect(placeError(TRAINING, 'parameters.lr.min')).toBe('parameters.lr');
    expect(placeError(TRAINING, 'resources.cpu.limit')).toBe('resources.cpu');
    const cells = ['cells[0]', 'cells[1]', 'cells[10]'];
    expect(placeError(cells, 'cells[1].tags')).toBe('cells[1]');
    expect(placeError(cells, 'cells[10].tags')).toBe('cells[10]');
  });

  it('places nothing for a field no input writes, or no field', () => {
    expect(placeError(TRAINING, 'user')).toBeNull();
    expect(placeError(TRAINING, 'names')).toBeNull();
    expect(placeError(TRAINING, null)).toBeNull();
    expect(placeError(TRAINING, '')).toBeNull();
  });
});

describe('placed errors', () => {
  const error = placed(TRAINING, {
    message: 'a pytorch job needs at least one worker',
    field: 'replicas.worker'
  });

  it('belong to the input of their field only', () => {
    expect(error).toEqual({
      at: 'replicas.worker.replicas',
      message: 'a pytorch job needs at least one worker'
    });
    expect(isInvalid(error, 'replicas.worker.replicas')).toBe(true);
    expect(isInvalid(error, 'replicas.master.replicas')).toBe(false);
    expect(messageFor(error, 'replicas.worker.replicas')).toBe(
      'a pytorch job needs at least one worker'
    );
    expect(messageFor(error, 'name')).toBeNull();
    expect(isWithin(error, 'replicas.worker')).toBe(true);
    expect(isWithin(error, 'replicas.work')).toBe(false);
  });

  it('show at the bottom when they name no field of the form', () => {
    const bottom = placed(TRAINING, { message: 'quota', field: 'user' });
    expect(bottom).toEqual({ at: null, message: 'quota' });
    expect(TRAINING.some(path => isInvalid(bottom, path))).toBe(false);
    expect(placed(TRAINING, null)).toBeNull();
  });
});

describe('fieldError', () => {
  it("keeps an API error's message and field", () => {
    class ApiError extends Error {
      constructor(
        message: string,
        readonly field: string | null
      ) {
        super(message);
      }
    }
    expect(fieldError(new ApiError('bad cpu', 'resources.cpu'))).toEqual({
      message: 'bad cpu',
      field: 'resources.cpu'
    });
    expect(fieldError(new Error('network'))).toEqual({
      message: 'network',
      field: null
    });
    expect(fieldError('odd')).toEqual({ message: 'odd', field: null });
  });
});
