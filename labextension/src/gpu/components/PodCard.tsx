/**
 * The pods holding GPUs (kubernetes source): a table of them, and a card per pod with
 * the history of its utilization and memory.
 */
import * as React from 'react';

import { Table } from '../../common/components/Table';
import { plural } from '../../common/format';
import { formatMemory, formatPct, gpuLabel } from '../format';
import type { IPodGpu } from '../types';
import { IUsageHistory, UsageBars, UsageCharts } from './Usage';

export function podKey(pod: IPodGpu): string {
  return `pod:${pod.namespace}/${pod.pod}`;
}

export interface IPodTableProps {
  pods: readonly IPodGpu[];
  indexOf: ReadonlyMap<string, number>;
  /** Whether to show each pod's owner (an admin looking at every user's pods). */
  showOwner: boolean;
}

export function PodTable(props: IPodTableProps): JSX.Element {
  return (
    <Table
      className="cube-GpuTable"
      testid="cube-gpu-pods"
      columns={[
        'Pod',
        'Kind',
        props.showOwner && 'Owner',
        'GPUs',
        { label: 'Util.', numeric: true },
        { label: 'Memory', numeric: true }
      ]}
    >
      {props.pods.map(p => (
        <tr
          key={podKey(p)}
          data-testid="cube-gpu-pod"
          data-pod={`${p.namespace}/${p.pod}`}
        >
          <td className="cube-GpuTable-path" title={`${p.namespace}/${p.pod}`}>
            <span className="cube-GpuTable-note">{p.namespace}/</span>
            {p.pod}
          </td>
          <td>{p.kind}</td>
          {props.showOwner && <td>{p.owner ?? ''}</td>}
          <td title={p.gpus.join('\n')}>
            {p.gpus.map(g => gpuLabel(g, props.indexOf)).join(', ')}
          </td>
          <td className="cube-mod-number">{formatPct(p.utilization_pct)}</td>
          <td className="cube-mod-number">
            {formatMemory(p.memory_used_mib, p.memory_total_mib)}
          </td>
        </tr>
      ))}
    </Table>
  );
}

export interface IPodCardProps extends IUsageHistory {
  pod: IPodGpu;
  idle: boolean;
}

export function PodCard(props: IPodCardProps): JSX.Element {
  const p = props.pod;
  return (
    <section
      className={`cube-GpuCard${props.idle ? ' cube-mod-idle' : ''}`}
      data-testid="cube-gpu-pod-card"
      data-pod={`${p.namespace}/${p.pod}`}
    >
      <header className="cube-GpuCard-head">
        <span className="cube-GpuCard-title">{p.pod}</span>
        <span className="cube-GpuCard-host">
          {p.namespace} · {p.kind} · {plural(p.gpus.length, 'GPU')}
        </span>
      </header>
      <UsageBars usage={p} testid="cube-gpu-pod" />
      <UsageCharts usage={p} history={props} />
    </section>
  );
}
