/**
 * GPU memory per job (all its replicas), served model and pipeline step on this machine,
 * with a sparkline of its recent memory: which work holds the GPU, in the user's words.
 */
import * as React from 'react';

import { Table } from '../../common/components/Table';
import { formatMiB, formatPct, gpuLabel } from '../format';
import type { ISeries, IWorkloadGpu } from '../types';
import { chartPoints, HEIGHT, WIDTH } from './LineChart';

export interface IWorkloadTableProps {
  workloads: readonly IWorkloadGpu[];
  indexOf: ReadonlyMap<string, number>;
  /** A workload's memory history (`workload.series`). */
  memory: (series: string) => ISeries['points'];
  from: number;
  to: number;
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
        const points = props.memory(w.workload.series);
        // headroom above the peak, so a steady line shows as a line, not the chart's edge
        const max =
          1.25 * Math.max(w.memory_used_mib, ...points.map(([, v]) => v));
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
              <svg
                className="cube-GpuSparkline"
                viewBox={`0 0 ${WIDTH} ${HEIGHT}`}
                preserveAspectRatio="none"
                role="img"
                aria-label={`${w.workload.label}: GPU memory over the last minutes`}
                data-testid="cube-gpu-workload-sparkline"
                data-points={points.length}
              >
                <polyline
                  points={chartPoints(points, props.from, props.to, max)}
                />
              </svg>
            </td>
          </tr>
        );
      })}
    </Table>
  );
}
