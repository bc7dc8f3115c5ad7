/**
 * GPUs the user holds against the admin's per-user quota, and what holds them; beside it the GPUs
 * their queued jobs and servers ask for ("holding 2 · queued 3 (job a, notebook b)").
 */
import * as React from 'react';

import { plural } from '../../common/format';
import type { IGpuQuota } from '../types';
import { Bar } from './Bar';

export function QuotaBar(props: { quota: IGpuQuota }): JSX.Element {
  const { used, limit, holders, queued } = props.quota;
  const waiting = props.quota.queued_jobs;
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
      <div
        className="cube-GpuQuota-demand"
        data-testid="cube-gpu-demand"
        data-queued={queued}
        title={waiting
          .map(
            j =>
              `${j.position === null ? '' : `#${j.position} `}${j.kind} ${j.name}: ${plural(j.gpus, 'GPU')}, ${j.reason}`
          )
          .join('\n')}
      >
        holding {used} · queued {queued}
        {waiting.length > 0 &&
          ` (${waiting.map(j => `${j.kind} ${j.name}`).join(', ')})`}
      </div>
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
