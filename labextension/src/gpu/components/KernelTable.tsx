/**
 * GPU memory per kernel of this server, with the notebook each kernel belongs to:
 * which notebook to shut down to free a GPU.
 */
import * as React from 'react';

import { Table } from '../../common/components/Table';
import { formatMiB, formatPct, gpuLabel } from '../format';
import type { IKernelGpu } from '../types';

export interface IKernelTableProps {
  kernels: readonly IKernelGpu[];
  indexOf: ReadonlyMap<string, number>;
  idleKernels: ReadonlySet<string>;
  onOpen?: (path: string) => void;
}

export function KernelTable(props: IKernelTableProps): JSX.Element {
  if (props.kernels.length === 0) {
    return (
      <div className="cube-Gpu-empty" data-testid="cube-gpu-kernels-none">
        No kernel of this server holds GPU memory.
      </div>
    );
  }
  return (
    <Table
      className="cube-GpuTable"
      testid="cube-gpu-kernels"
      columns={[
        'Notebook',
        'GPUs',
        'PIDs',
        { label: 'Memory', numeric: true },
        { label: 'Util.', numeric: true }
      ]}
    >
      {props.kernels.map(k => {
        const path = k.notebook_path;
        const idle = props.idleKernels.has(k.kernel_id);
        return (
          <tr
            key={k.kernel_id}
            className={idle ? 'cube-mod-idle' : undefined}
            data-testid="cube-gpu-kernel"
            data-kernel={k.kernel_id}
            data-path={path ?? undefined}
          >
            <td className="cube-GpuTable-path" title={`kernel ${k.kernel_id}`}>
              {path && props.onOpen ? (
                <button
                  className="cube-GpuLink"
                  onClick={() => props.onOpen!(path)}
                >
                  {path}
                </button>
              ) : (
                (path ?? (
                  <span className="cube-GpuTable-note">
                    kernel {k.kernel_id.slice(0, 8)}
                  </span>
                ))
              )}
              {k.server && (
                <span className="cube-GpuTable-note"> ({k.server})</span>
              )}
            </td>
            <td title={k.gpus.join('\n')}>
              {k.gpus.map(g => gpuLabel(g, props.indexOf)).join(', ')}
            </td>
            <td>{k.pids.join(', ')}</td>
            <td
              className="cube-mod-number"
              data-testid="cube-gpu-kernel-memory"
            >
              {formatMiB(k.memory_used_mib)}
            </td>
            <td className="cube-mod-number">{formatPct(k.utilization_pct)}</td>
          </tr>
        );
      })}
    </Table>
  );
}
