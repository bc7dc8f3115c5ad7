/** A spec file's fields as a form's text and back, and which job conditions still hold. */
import { describe, expect, it } from 'vitest';

import { currentConditions } from '../src/jobs/format';
import {
  argsText,
  keptKeys,
  overFile,
  parameterTexts,
  replicasSpec,
  roleCounts
} from '../src/jobs/specText';
import type { IJobCondition } from '../src/jobs/types';

describe('spec files in forms', () => {
  it('shows an argument list as one line a shell splits back', () => {
    expect(argsText(['--epochs', '2'])).toBe('--epochs 2');
    expect(argsText(['--greeting', 'hello world', "it's", ''])).toBe(
      `--greeting 'hello world' 'it'"'"'s' ''`
    );
    expect(argsText('--lr 0.1')).toBe('--lr 0.1');
    expect(argsText(undefined)).toBe('');
  });

  it('reads replica counts written either way, and keeps a role settings', () => {
    const file = { master: 1, worker: { replicas: 2, resources: { gpu: 1 } } };
    expect(roleCounts(file)).toEqual({ master: '1', worker: '2' });
    expect(replicasSpec({ master: 1, worker: 3, ps: undefined }, file)).toEqual(
      {
        master: { replicas: 1 },
        worker: { replicas: 3, resources: { gpu: 1 } }
      }
    );
  });

  it('lays the typed spec over the file, the shown keys cleared when left empty', () => {
    const file = { name: 'a', image: 'x', env: { A: '1' } };
    const shown = ['name', 'image'];
    const laid = overFile(file, { name: 'b', args: '-v' }, shown);
    expect(laid).toEqual({ name: 'b', env: { A: '1' }, args: '-v' });
    expect(Object.keys(laid)).toEqual(['name', 'env', 'args']); // the file's order
    expect(keptKeys(file, shown)).toEqual(['env']);
    expect(overFile(undefined, { name: 'b' }, shown)).toEqual({ name: 'b' });
  });

  it('turns parameters into rows', () => {
    expect(
      parameterTexts(
        {
          lr: { type: 'double', min: 0.001, max: 0.2, log: true },
          opt: { type: 'categorical', values: ['sgd', 'adam'] },
          depth: {}
        },
        'double'
      )
    ).toEqual([
      {
        name: 'lr',
        type: 'double',
        min: '0.001',
        max: '0.2',
        step: '',
        values: '',
        log: true
      },
      {
        name: 'opt',
        type: 'categorical',
        min: '',
        max: '',
        step: '',
        values: 'sgd, adam',
        log: false
      },
      {
        name: 'depth',
        type: 'double',
        min: '',
        max: '',
        step: '',
        values: '',
        log: false
      }
    ]);
  });
});

function condition(
  type: string,
  status: IJobCondition['status'],
  at: number
): IJobCondition {
  return { type, status, reason: '', message: '', last_transition_time: at };
}

describe('currentConditions', () => {
  it('leaves out a condition a later true one replaced', () => {
    const finished = [
      condition('Created', 'True', 1),
      condition('Running', 'False', 5),
      condition('Succeeded', 'True', 5)
    ];
    expect(currentConditions(finished).map(c => c.type)).toEqual([
      'Created',
      'Succeeded'
    ]);
  });

  it('keeps a false condition nothing replaced', () => {
    const waiting = [
      condition('Created', 'True', 1),
      condition('Ready', 'False', 2)
    ];
    expect(currentConditions(waiting)).toEqual(waiting);
  });
});
