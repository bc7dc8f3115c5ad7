/**
 * Kernels, pods, jobs and pipeline steps the server says have held GPU memory at 0%
 * utilization for too long, in the server's words, with the time left before the culler
 * stops what holds the GPU where it will.
 */
import * as React from 'react';

import { formatElapsed } from '../../common/format';
import { stopsIn } from '../idle';
import type { IIdleWarning } from '../types';

export function IdleList(props: {
  warnings: readonly IIdleWarning[];
}): JSX.Element | null {
  if (props.warnings.length === 0) {
    return null;
  }
  return (
    <ul className="cube-GpuIdle" data-testid="cube-gpu-idle">
      {props.warnings.map(w => (
        <li
          key={`${w.key}|${w.gpu}`}
          className="cube-GpuIdle-item"
          role="status"
          data-testid="cube-gpu-idle-warning"
          data-key={w.key}
          data-idle-seconds={w.idle_seconds}
        >
          <span className="cube-GpuIdle-message">{w.message}</span>
          <span className="cube-GpuIdle-for">
            idle {formatElapsed(w.idle_seconds)}
            {stopsIn(w) && (
              <span
                className="cube-GpuIdle-stops"
                data-testid="cube-gpu-idle-stops"
              >
                {stopsIn(w)}
              </span>
            )}
          </span>
        </li>
      ))}
    </ul>
  );
}
