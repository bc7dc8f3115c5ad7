/**
 * GPU memory per job (all its replicas), served model and pipeline step on this machine,
 * with a sparkline of its recent memory: which work holds the GPU, in the user's words.
 */
import * as React from 'react';

import { Sparkline } from '../../common/components/Sparkline';
import { Table } from '../../common/components/Table';
import { formatMiB, formatPct, gpuLabel } from '../format';
import type { ISeries, IWorkloadGpu } from '../types';

export interface IWorkloadTableProps {
  workloads: readonly IWorkloadGpu[];
  indexOf: ReadonlyMap<string, number>;
  /** A workload's memory history (`workload.series`). */
  memory: (series: string) => ISeries['points'];
}

export function WorkloadTable(props: IWorkloadTableProps): JSX.Element {
  return (
    <Table
      className="cube-GpuTable"
      testid="cube-gpu-workloads"
      columns={[
        'Job or step',
        'GPUs',
        'PIDs',
        { label: 'Memory', numeric: true },
        { label: 'Util.', numeric: true },
        'Recent memory'
      ]}
    >
      {props.workloads.map(w => {
        return (
          <tr
            key={w.workload.series}
            data-testid="cube-gpu-workload"
            data-series={w.workload.series}
          >
            <td className="cube-GpuTable-path">{w.workload.label}</td>
            <td title={w.gpus.join('\n')}>
              {w.gpus.map(g => gpuLabel(g, props.indexOf)).join(', ')}
            </td>
            <td>{w.pids.join(', ')}</td>
            <td className="cube-mod-number">{formatMiB(w.memory_used_mib)}</td>
            <td className="cube-mod-number">{formatPct(w.utilization_pct)}</td>
            <td>
              <Sparkline
                points={props.memory(w.workload.series)}
                label={`${w.workload.label}: GPU memory over the last minutes`}
                testid="cube-gpu-workload-sparkline"
              />
            </td>
          </tr>
        );
      })}
    </Table>
  );
}
