/** The display formatters: short text from what the server sent, never a made-up figure. */
import { describe, expect, it } from 'vitest';

import {
  formatAge,
  formatDate,
  formatElapsed,
  isoFromSeconds,
  plural
} from '../src/common/format';
import {
  compact,
  numberOrText,
  textOrNothing
} from '../src/common/form/values';
import {
  formatMemory,
  formatMiB,
  formatPct,
  formatUnit,
  fraction,
  gpuLabel,
  NOT_REPORTED
} from '../src/gpu/format';
import {
  queueFields,
  queueSpec
} from '../src/jobs/components/form/QueueFields';
import {
  formatValue,
  jobKey,
  queueWhere,
  replicaCount
} from '../src/jobs/format';
import type { IJob, IJobsConfig } from '../src/jobs/types';
import { resourceParts } from '../src/notebooks/format';
import {
  describeError,
  formatDuration,
  formatFiles,
  formatGpus,
  parametersToSend,
  parameterText,
  runError,
  stepInfo,
  stepNote
} from '../src/pipeline/format';

describe('common', () => {
  it('writes a span in its two largest units', () => {
    expect(formatElapsed(0)).toBe('0s');
    expect(formatElapsed(59.9)).toBe('59s');
    expect(formatElapsed(60)).toBe('1m');
    expect(formatElapsed(3600)).toBe('1h');
    expect(formatElapsed(2 * 3600 + 10 * 60 + 5)).toBe('2h 10m');
    expect(formatElapsed(4 * 86400 + 3 * 3600)).toBe('4d 3h');
    expect(formatElapsed(86400)).toBe('1d');
    expect(formatElapsed(-5)).toBe('0s');
  });

  it('ages a date, and says nothing of a missing or bad one', () => {
    const now = Date.parse('2026-01-01T12:00:00Z');
    expect(formatAge('2026-01-01T11:55:00Z', now)).toBe('5m');
    expect(formatAge(null, now)).toBe('');
    expect(formatAge('yesterday', now)).toBe('');
    expect(formatDate(null)).toBe('');
    expect(formatDate('not a date')).toBe('not a date');
    expect(isoFromSeconds(0)).toBe('1970-01-01T00:00:00.000Z');
    expect(isoFromSeconds(null)).toBeNull();
  });

  it('counts with the noun', () => {
    expect(plural(1, 'GPU')).toBe('1 GPU');
    expect(plural(0, 'GPU')).toBe('0 GPUs');
    expect(plural(2, 'GPU')).toBe('2 GPUs');
  });
});

describe('form values', () => {
  it('sends numbers as numbers, anything else as typed, empty as nothing', () => {
    expect(numberOrText(' 2 ')).toBe(2);
    expect(numberOrText('1e-3')).toBe(0.001);
    expect(numberOrText('.5')).toBe(0.5);
    expect(numberOrText('two')).toBe('two');
    expect(numberOrText('2Gi')).toBe('2Gi');
    expect(numberOrText('  ')).toBeUndefined();
    expect(textOrNothing(' a ')).toBe('a');
    expect(textOrNothing('')).toBeUndefined();
  });

  it('leaves out the keys left empty', () => {
    expect(
      compact({ a: 1, b: undefined, c: {}, d: [], e: null, f: { g: 1 } })
    ).toEqual({ a: 1, d: [], e: null, f: { g: 1 } });
  });
});

describe('gpu', () => {
  it('shows an unreported figure as a dash, never as 0', () => {
    expect(formatPct(null)).toBe(NOT_REPORTED);
    expect(formatMiB(undefined)).toBe(NOT_REPORTED);
    expect(formatUnit(null, 'W')).toBe(NOT_REPORTED);
    expect(formatPct(0)).toBe('0%');
  });

  it('writes figures with their units', () => {
    expect(formatPct(36.6)).toBe('37%');
    expect(formatMiB(512)).toBe('512 MiB');
    expect(formatMiB(1536)).toBe('1.5 GiB');
    expect(formatMemory(1536, 81920)).toBe('1.5 GiB / 80.0 GiB');
    expect(formatMemory(512, null)).toBe('512 MiB');
    expect(formatUnit(64.4, '°C')).toBe('64 °C');
  });

  it('fills a bar by the known fraction, within 0..1', () => {
    expect(fraction(50, 200)).toBe(0.25);
    expect(fraction(300, 200)).toBe(1);
    expect(fraction(null, 200)).toBe(0);
    expect(fraction(5, 0)).toBe(0);
  });

  it('names a GPU by its index, else by a short UUID', () => {
    const indexOf = new Map([['GPU-aaaa', 0]]);
    expect(gpuLabel('GPU-aaaa', indexOf)).toBe('GPU 0');
    expect(gpuLabel('GPU-0123456789abcdef', indexOf)).toBe('GPU-01234567…');
    expect(gpuLabel('GPU-b', indexOf)).toBe('GPU-b');
  });
});

describe('jobs', () => {
  const job = {
    name: 'ddp',
    user: 'alice',
    replicas: [
      { state: 'Running' },
      { state: 'Succeeded' },
      { state: 'Pending' },
      { state: 'Failed' }
    ]
  } as unknown as IJob;

  it('counts replicas running or done, of all', () => {
    expect(replicaCount(job)).toBe('2/4');
  });

  it('keys a job by its owner and name', () => {
    expect(jobKey(job)).toBe('alice/ddp');
  });

  it('writes values briefly', () => {
    expect(formatValue(3)).toBe('3');
    expect(formatValue(0.123456)).toBe('0.1235');
    expect(formatValue('adam')).toBe('adam');
    expect(formatValue([1, 2])).toBe('[1,2]');
  });

  it('says where a queued job waits: its place locally, its LocalQueue on Kueue', () => {
    const reason = 'waiting for 2 GPUs';
    expect(queueWhere({ position: 2, queue: null, reason })).toBe('#2 · ');
    expect(queueWhere({ position: null, queue: 'gpu-jobs', reason })).toBe(
      'gpu-jobs · '
    );
    expect(queueWhere({ position: 3, queue: 'gpu-jobs', reason })).toBe(
      '#3 gpu-jobs · '
    );
    expect(queueWhere({ position: null, queue: null, reason })).toBe('');
  });

  it("offers Kueue's queues the admin allows, the admin's first, and sends none when left", () => {
    const vocabulary = (queues: unknown) =>
      ({ availability: { queues } }) as unknown as IJobsConfig;
    const offered = vocabulary({
      offered: ['gpu-jobs', 'cpu-batch'],
      priorities: ['urgent'],
      defaults: { training: 'gpu-jobs', tuning: null }
    });
    const [queue, priority] = queueFields(offered, 'training');
    expect(queue.options).toEqual([
      { value: '', label: "gpu-jobs (the admin's)" },
      'cpu-batch'
    ]);
    expect(priority.path).toBe('priority');
    expect(queueFields(offered, 'tuning')[0].options?.[0]).toEqual({
      value: '',
      label: 'none'
    });
    const none = vocabulary({
      offered: [],
      priorities: [],
      defaults: { training: null, tuning: null }
    });
    expect(queueFields(none, 'training')).toEqual([]);
    expect(queueSpec({ queue: '', priority: '' })).toEqual({});
    expect(queueSpec({ queue: 'cpu-batch', priority: '' })).toEqual({
      queue: 'cpu-batch'
    });
  });
});

describe('notebooks', () => {
  it('lists the resources given, and only those', () => {
    expect(
      resourceParts({ cpu: 2, memory: '8Gi', gpu: 1, gpu_resource: null })
    ).toEqual(['2 CPU', '8Gi', '1 × GPU']);
    expect(
      resourceParts({
        cpu: '',
        memory: null,
        gpu: 2,
        gpu_resource: 'nvidia.com/gpu'
      })
    ).toEqual(['2 × nvidia.com/gpu']);
    expect(resourceParts(null)).toEqual([]);
  });
});

describe('pipeline', () => {
  it('writes durations', () => {
    expect(formatDuration(0.44)).toBe('0.4s');
    expect(formatDuration(12.4)).toBe('12s');
    expect(formatDuration(185)).toBe('3m 05s');
    expect(formatDuration(null)).toBe('');
  });

  it('describes the errors a run recorded', () => {
    expect(describeError(null)).toBeNull();
    expect(describeError('killed')).toBe('killed');
    expect(describeError({ ename: 'ValueError', evalue: 'bad', cell: 3 })).toBe(
      'ValueError: bad (cell 3)'
    );
    expect(describeError({ message: 'timed out' })).toBe('timed out');
    expect(describeError({ code: 1 })).toBe('{"code":1}');
  });

  it('lists the data files a step read, the first three and how many more', () => {
    expect(formatFiles([])).toBe('');
    expect(formatFiles(['data/train.csv'])).toBe('data/train.csv');
    expect(formatFiles(['a.csv', 'b.csv', 'c.csv'])).toBe(
      'a.csv, b.csv, c.csv'
    );
    expect(formatFiles(['a.csv', 'b.csv', 'c.csv', 'd.csv', 'e.csv'])).toBe(
      'a.csv, b.csv, c.csv and 2 more'
    );
    expect(formatFiles(['a.csv', 'b.csv'], 1)).toBe('a.csv and 1 more');
  });

  it('says why a queued step waits and which GPUs a running one holds', () => {
    const reason = 'waiting for 1 GPU: 0 of 2 free';
    expect(stepNote({ status: 'queued', reason, gpus: [] })).toBe(reason);
    expect(stepNote({ status: 'queued', reason: null })).toBe('');
    expect(stepNote({ status: 'running', reason: null, gpus: ['1'] })).toBe(
      'GPU 1'
    );
    expect(stepNote({ status: 'running', gpus: ['0', '1'] })).toBe('GPUs 0, 1');
    expect(stepNote({ status: 'running', gpus: [] })).toBe('');
    // Records from before steps had GPUs have neither field.
    expect(stepNote({ status: 'running' })).toBe('');
    expect(stepNote({ status: 'succeeded', gpus: ['1'] })).toBe('');
    expect(formatGpus(undefined)).toBe('');
  });

  it('says how long a step ran, and nothing of a cached one: its state says so', () => {
    const step = { cache_hit: false, duration: 12.4, attempts: 1 };
    expect(stepInfo(step)).toBe('12s');
    expect(stepInfo({ ...step, attempts: 3 })).toBe('12s · 3 tries');
    expect(stepInfo({ ...step, cache_hit: true })).toBe('');
  });

  it("leaves a failed step's error to that step, and says which step failed", () => {
    const message =
      "step 'use' failed in cell 1 of flaky.ipynb: AssertionError: missing";
    const steps = [
      { name: 'make', status: 'succeeded', error: null },
      {
        name: 'use',
        status: 'failed',
        error: { message, ename: 'AssertionError', evalue: 'missing', cell: 1 }
      }
    ];
    expect(runError({ error: message, steps })).toBe(
      'Failed at step use: see its error below'
    );
    // What failed the run besides its steps is kept.
    expect(runError({ error: `${message}; the store is full`, steps })).toBe(
      'Failed at step use: see its error below; the store is full'
    );
    expect(runError({ error: 'cancelled by the user', steps: [] })).toBe(
      'cancelled by the user'
    );
    expect(runError({ error: null, steps })).toBeNull();
  });

  it('shows a number as the notebook wrote it: C = 1.0 stays a float', () => {
    const c = { name: 'C', default: 1, default_source: '1.0' };
    expect(parameterText(c)).toBe('1.0');
    expect(
      parameterText({ ...c, default_source: ' 1e-3', default: 0.001 })
    ).toBe('1e-3');
    // Python-only spellings are shown as JSON, which the input must hold.
    expect(
      parameterText({ ...c, default_source: '1_000', default: 1000 })
    ).toBe('1000');
    expect(parametersToSend([c], new Map([['C', '1.0']]))).toEqual({});
    expect(parametersToSend([c], new Map([['C', '2.5']]))).toEqual({ C: 2.5 });
  });
});
