/** The idle warnings' countdown and which of them become a toast. */
import { describe, expect, it } from 'vitest';

import { stopsIn, wantsToast } from '../src/gpu/idle';
import type { IIdleWarning } from '../src/gpu/types';

function warning(fields: Partial<IIdleWarning>): IIdleWarning {
  return {
    key: 'job:alice/toy-ddp',
    gpu: 'GPU-0',
    idle_seconds: 2100,
    message:
      'job toy-ddp has held 4458 MiB on GPU 0 at 0% utilization for 35 min',
    kernel_id: null,
    notebook_path: null,
    pod: null,
    workload: 'job toy-ddp',
    stops_in_seconds: null,
    ...fields
  };
}

describe('stopsIn', () => {
  it('counts down to the stop, and says when it is due', () => {
    expect(stopsIn(warning({ stops_in_seconds: 1500 }))).toBe('stops in 25m');
    expect(stopsIn(warning({ stops_in_seconds: 59 }))).toBe('stops in 59s');
    expect(stopsIn(warning({ stops_in_seconds: 0 }))).toBe('stopping now');
  });

  it('says nothing where nothing will stop it (or an older server sent no field)', () => {
    expect(stopsIn(warning({ stops_in_seconds: null }))).toBeNull();
    expect(stopsIn(warning({ stops_in_seconds: undefined }))).toBeNull();
  });
});

describe('wantsToast', () => {
  it("toasts a notebook's kernel, stopped or not", () => {
    const kernel = warning({
      key: 'kernel:k1',
      kernel_id: 'k1',
      workload: null
    });
    expect(wantsToast(kernel, false)).toBe(true);
    expect(wantsToast(kernel, true)).toBe(true);
  });

  it('toasts a job or server pod of the user only when the culler will stop it', () => {
    expect(wantsToast(warning({ stops_in_seconds: 600 }), false)).toBe(true);
    expect(wantsToast(warning({ stops_in_seconds: null }), false)).toBe(false);
    const pod = warning({
      key: 'pod:cube-alice/lab-0',
      pod: 'lab-0',
      workload: null
    });
    expect(wantsToast({ ...pod, stops_in_seconds: 0 }, false)).toBe(true);
  });

  it("gives an admin looking at every user's GPUs no toast for their jobs", () => {
    expect(wantsToast(warning({ stops_in_seconds: 600 }), true)).toBe(false);
  });
});
