/**
 * GPUs the user holds against the admin's per-user quota, and what holds them.
 */
import * as React from 'react';

import { plural } from '../../common/format';
import type { IGpuQuota } from '../types';
import { Bar } from './Bar';

export function QuotaBar(props: { quota: IGpuQuota }): JSX.Element {
  const { used, limit, holders } = props.quota;
  const text =
    limit === null ? `${plural(used, 'GPU')} (no limit)` : `${used} / ${limit}`;
  const full = limit !== null && used >= limit;
  return (
    <div
      className="cube-GpuQuota"
      data-testid="cube-gpu-quota"
      data-used={used}
      data-limit={limit ?? ''}
    >
      <Bar
        label="GPU quota"
        fraction={limit ? Math.min(1, used / limit) : 0}
        text={text}
        testid="cube-gpu-quota-bar"
        mod={full ? 'cube-mod-full' : undefined}
        title={
          full
            ? 'The quota is used up: stop a GPU server or job to start another.'
            : undefined
        }
      />
      {holders.length > 0 && (
        <ul
          className="cube-GpuQuota-holders"
          data-testid="cube-gpu-quota-holders"
        >
          {holders.map(h => (
            <li key={`${h.kind}/${h.name}`}>
              {h.kind} <b>{h.name}</b>: {plural(h.gpus, 'GPU')}
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}
