/**
 * One GPU: current utilization and memory bars, their history as charts, temperature,
 * power and clock, the processes holding its memory (with the notebook each belongs to,
 * or why that is not known), and its MIG instances.
 */
import * as React from 'react';

import { Table } from '../../common/components/Table';
import { formatMemory, formatMiB, formatUnit } from '../format';
import type { IGpuDevice, IGpuProcess, IMigInstance } from '../types';
import { IUsageHistory, UsageBars, UsageCharts } from './Usage';

export interface IDeviceCardProps extends IUsageHistory {
  device: IGpuDevice;
  /** Whether the server reports a kernel or pod idle on this GPU. */
  idle: boolean;
}

export function DeviceCard(props: IDeviceCardProps): JSX.Element {
  const d = props.device;
  return (
    <section
      className={`cube-GpuCard${props.idle ? ' cube-mod-idle' : ''}`}
      data-testid="cube-gpu-device"
      data-uuid={d.uuid}
      data-index={d.index}
    >
      <header className="cube-GpuCard-head">
        <span className="cube-GpuCard-title" data-testid="cube-gpu-name">
          GPU {d.index}: {d.name ?? 'unknown model'}
        </span>
        {d.host && <span className="cube-GpuCard-host">{d.host}</span>}
      </header>
      <div className="cube-GpuCard-uuid" title="Device UUID">
        {d.uuid}
        {d.pod && (
          <span className="cube-GpuCard-pod">
            {' '}
            · {d.namespace}/{d.pod}
          </span>
        )}
      </div>
      <UsageBars usage={d} testid="cube-gpu" />
      <div className="cube-GpuCard-stats" data-testid="cube-gpu-stats">
        <span title="Temperature">{formatUnit(d.temperature_c, '°C')}</span>
        <span title="Power draw">{formatUnit(d.power_w, 'W')}</span>
        <span title="SM clock">{formatUnit(d.sm_clock_mhz, 'MHz')}</span>
      </div>
      <UsageCharts usage={d} history={props} />
      {d.processes.length > 0 && <ProcessTable processes={d.processes} />}
      {d.mig.length > 0 && <MigTable instances={d.mig} />}
    </section>
  );
}

function ProcessTable(props: { processes: IGpuProcess[] }): JSX.Element {
  const named = props.processes.some(p => p.name);
  return (
    <Table
      className="cube-GpuTable"
      testid="cube-gpu-processes"
      caption="Processes"
      columns={[
        'PID',
        named && 'Process',
        { label: 'Memory', numeric: true },
        'Held by'
      ]}
    >
      {props.processes.map(p => (
        <tr
          key={p.pid}
          data-testid="cube-gpu-process"
          data-pid={p.pid}
          data-kernel={p.kernel_id ?? undefined}
        >
          <td>{p.pid}</td>
          {named && <td className="cube-GpuTable-name">{p.name ?? ''}</td>}
          <td className="cube-mod-number">{formatMiB(p.used_memory_mib)}</td>
          <td className="cube-GpuTable-path">
            {p.notebook_path ?? p.workload?.label ?? (
              <span className="cube-GpuTable-note">
                {p.kernel_id ? `kernel ${p.kernel_id}` : (p.note ?? '')}
              </span>
            )}
          </td>
        </tr>
      ))}
    </Table>
  );
}

function MigTable(props: { instances: IMigInstance[] }): JSX.Element {
  return (
    <Table
      className="cube-GpuTable"
      testid="cube-gpu-mig"
      caption="MIG instances"
      columns={['GI', 'CI', 'Profile', { label: 'Memory', numeric: true }]}
    >
      {props.instances.map(m => (
        <tr
          key={`${m.gpu_instance_id}/${m.compute_instance_id ?? ''}`}
          data-testid="cube-gpu-mig-instance"
          title={m.uuid ?? undefined}
        >
          <td>{m.gpu_instance_id}</td>
          <td>{m.compute_instance_id ?? ''}</td>
          <td>{m.name ?? ''}</td>
          <td className="cube-mod-number">
            {formatMemory(m.memory_used_mib, m.memory_total_mib)}
          </td>
        </tr>
      ))}
    </Table>
  );
}
