/**
 * The "GPU" panel: the caller's quota, idle warnings, one card per GPU with live bars
 * and charts, the pods holding GPUs (kubernetes) and the kernels holding GPU memory
 * (this machine). It draws the model's last report; every figure and warning is the
 * server's.
 */
import * as React from 'react';

import { AllUsersToggle } from '../common/components/AllUsersToggle';
import { ErrorMessage } from '../common/components/ErrorMessage';
import {
  PanelHeader,
  RefreshButton,
  SectionTitle
} from '../common/components/PanelHeader';
import { VisibleRenderer } from '../common/visibleRenderer';
import { DeviceCard } from './components/DeviceCard';
import { IdleList } from './components/IdleList';
import { KernelTable } from './components/KernelTable';
import { PodCard, podKey, PodTable } from './components/PodCard';
import { QuotaBar } from './components/QuotaBar';
import { WorkloadTable } from './components/WorkloadTable';
import { GpuModel, HISTORY_SECONDS } from './model';
import type { GpuSource, IGpuReport } from './types';

const SOURCE_LABELS: Record<GpuSource, string> = {
  nvml: 'NVML · this machine',
  prometheus: 'DCGM · Prometheus',
  none: 'no source'
};

export class GpuPanel extends VisibleRenderer<GpuModel> {
  constructor(
    model: GpuModel,
    private readonly _openNotebook: (path: string) => void
  ) {
    super(model, { className: 'cube-GpuPanel', testid: 'cube-gpu-panel' });
  }

  protected render(): JSX.Element {
    const model = this.model;
    const report = model.report;
    return (
      <div className="cube-Gpu">
        <PanelHeader
          title="GPU"
          note={
            report && (
              <span
                className="cube-Gpu-source"
                data-testid="cube-gpu-source"
                data-source={report.source}
                title={`Read at ${new Date(report.timestamp * 1000).toLocaleTimeString()}`}
              >
                {SOURCE_LABELS[report.source] ?? report.source}
              </span>
            )
          }
        >
          {report?.source === 'prometheus' && (
            <AllUsersToggle
              scope={model}
              label="All users"
              testid="cube-gpu-all-users"
            />
          )}
          <RefreshButton
            tooltip="Read the GPUs again now"
            testid="cube-gpu-refresh"
            onClick={() => void model.refresh()}
          />
        </PanelHeader>
        <div className="cube-Gpu-body">
          <ErrorMessage message={model.error} testid="cube-gpu-error" />
          {report
            ? this._renderReport(report)
            : !model.error && (
                <div className="cube-Gpu-empty" data-testid="cube-gpu-loading">
                  Reading GPUs…
                </div>
              )}
        </div>
      </div>
    );
  }

  private _renderReport(report: IGpuReport): JSX.Element {
    const model = this.model;
    const to = report.timestamp;
    const from = to - HISTORY_SECONDS;
    const indexOf = new Map(report.devices.map(d => [d.uuid, d.index]));
    const idleGpus = new Set(report.idle.map(w => w.gpu));
    const idleKernels = new Set(
      report.idle.flatMap(w => (w.kernel_id ? [w.kernel_id] : []))
    );
    const idlePods = new Set(report.idle.flatMap(w => (w.pod ? [w.key] : [])));
    const stale = model.error ? ' cube-mod-stale' : '';
    return (
      <div className={`cube-Gpu-report${stale}`}>
        {report.quota && (
          <section className="cube-Gpu-section">
            <QuotaBar quota={report.quota} />
          </section>
        )}
        <IdleList warnings={report.idle} />
        {!report.available && (
          <div
            className="cube-Gpu-none"
            role="status"
            data-testid="cube-gpu-none"
          >
            {report.message}
          </div>
        )}
        {report.devices.length > 0 && (
          <section className="cube-Gpu-section">
            <SectionTitle note={report.devices.length}>GPUs</SectionTitle>
            <div className="cube-Gpu-cards" data-testid="cube-gpu-devices">
              {report.devices.map(d => (
                <DeviceCard
                  key={d.uuid}
                  device={d}
                  utilization={model.series(`gpu:${d.uuid}`, 'utilization_pct')}
                  memory={model.series(`gpu:${d.uuid}`, 'memory_used_mib')}
                  from={from}
                  to={to}
                  idle={idleGpus.has(d.uuid)}
                />
              ))}
            </div>
          </section>
        )}
        {(report.source === 'prometheus' || report.pods.length > 0) && (
          <section className="cube-Gpu-section">
            <SectionTitle>Pods</SectionTitle>
            {report.pods.length === 0 ? (
              <div className="cube-Gpu-empty" data-testid="cube-gpu-pods-none">
                No pod {model.allUsers ? '' : 'of yours '}holds a GPU.
              </div>
            ) : (
              <>
                <PodTable
                  pods={report.pods}
                  indexOf={indexOf}
                  showOwner={model.allUsers}
                />
                <div className="cube-Gpu-cards">
                  {report.pods.map(p => (
                    <PodCard
                      key={podKey(p)}
                      pod={p}
                      utilization={model.series(podKey(p), 'utilization_pct')}
                      memory={model.series(podKey(p), 'memory_used_mib')}
                      from={from}
                      to={to}
                      idle={idlePods.has(podKey(p))}
                    />
                  ))}
                </div>
              </>
            )}
          </section>
        )}
        {report.workloads.length > 0 && (
          <section className="cube-Gpu-section">
            <SectionTitle note={report.workloads.length}>
              Jobs and pipeline steps
            </SectionTitle>
            <WorkloadTable
              workloads={report.workloads}
              indexOf={indexOf}
              memory={series => model.series(series, 'memory_used_mib')}
            />
          </section>
        )}
        {report.source === 'nvml' && report.available && (
          <section className="cube-Gpu-section">
            <SectionTitle>Kernels</SectionTitle>
            <KernelTable
              kernels={report.kernels}
              indexOf={indexOf}
              idleKernels={idleKernels}
              onOpen={this._openNotebook}
            />
          </section>
        )}
      </div>
    );
  }
}
