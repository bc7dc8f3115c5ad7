/**
 * The status-bar item: GPU memory and utilization of the current notebook's kernel, as
 * the server attributes them (`report.kernels`, matched by kernel id). Hidden while that
 * kernel holds no GPU memory; clicking it opens the GPU panel.
 */
import type { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import type { Kernel } from '@jupyterlab/services';
import { VDomModel, VDomRenderer } from '@jupyterlab/ui-components';
import { ISignal, Signal } from '@lumino/signaling';
import * as React from 'react';

import { formatMiB, formatPct, gpuLabel } from './format';
import { gpuIcon } from './icons';
import { GpuModel } from './model';
import type { IKernelGpu } from './types';

/** Which notebook is current, its kernel, and what the GPU report says of that kernel. */
export class KernelGpuStatusModel extends VDomModel {
  constructor(
    readonly gpu: GpuModel,
    tracker: INotebookTracker
  ) {
    super();
    gpu.stateChanged.connect(this._update, this);
    tracker.currentChanged.connect((_, panel) => this._follow(panel), this);
    this._follow(tracker.currentWidget);
  }

  /** The current notebook's kernel, when it holds GPU memory. */
  get kernel(): IKernelGpu | null {
    return this._kernel;
  }

  /** Whether the server lists that kernel as idle on its GPU. */
  get idle(): boolean {
    return this._idle;
  }

  /** `GPU 0, GPU 1` for the devices the kernel holds. */
  get gpus(): string {
    const report = this.gpu.report;
    const indexOf = new Map(
      (report?.devices ?? []).map(d => [d.uuid, d.index])
    );
    return (this._kernel?.gpus ?? []).map(g => gpuLabel(g, indexOf)).join(', ');
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._follow(null);
    super.dispose();
  }

  private _follow(panel: NotebookPanel | null): void {
    if (this._panel && !this._panel.isDisposed) {
      this._panel.sessionContext.kernelChanged.disconnect(
        this._onKernelChanged,
        this
      );
    }
    this._panel = panel;
    if (panel) {
      panel.sessionContext.kernelChanged.connect(this._onKernelChanged, this);
    }
    this._update();
  }

  private _onKernelChanged(
    _: unknown,
    change: { newValue: Kernel.IKernelConnection | null }
  ): void {
    this._update();
    if (change.newValue) {
      void this.gpu.refresh(); // a kernel just started: show its GPU use without waiting
    }
  }

  private _update(): void {
    const kernelId = this._panel?.sessionContext.session?.kernel?.id ?? null;
    const report = this.gpu.report;
    const kernel =
      (kernelId &&
        report?.kernels.find(
          k => k.kernel_id === kernelId && k.memory_used_mib > 0
        )) ||
      null;
    const idle = !!(
      kernelId && report?.idle.some(w => w.kernel_id === kernelId)
    );
    if (kernel !== this._kernel || idle !== this._idle) {
      const wasActive = this._kernel !== null;
      this._kernel = kernel;
      this._idle = idle;
      this.stateChanged.emit();
      if (wasActive !== (kernel !== null)) {
        this._activeChanged.emit();
      }
    }
  }

  /** Emitted when the item should be shown or hidden. */
  get activeChanged(): ISignal<this, void> {
    return this._activeChanged;
  }

  private _panel: NotebookPanel | null = null;
  private _kernel: IKernelGpu | null = null;
  private _idle = false;
  private _activeChanged = new Signal<this, void>(this);
}

export class KernelGpuStatus extends VDomRenderer<KernelGpuStatusModel> {
  constructor(
    model: KernelGpuStatusModel,
    private readonly _open: () => void
  ) {
    super(model);
    this.addClass('cube-GpuStatus');
    this.node.setAttribute('data-testid', 'cube-gpu-status');
  }

  protected render(): JSX.Element | null {
    const kernel = this.model.kernel;
    if (!kernel) {
      return null;
    }
    const idle = this.model.idle;
    const title =
      `This notebook's kernel holds ${formatMiB(kernel.memory_used_mib)} on ` +
      `${this.model.gpus} (${formatPct(kernel.utilization_pct)} utilization)` +
      (idle ? ', idle' : '') +
      '. Click to open the GPU panel.';
    return (
      <button
        className={`cube-GpuStatus-button${idle ? ' cube-mod-idle' : ''}`}
        title={title}
        data-kernel={kernel.kernel_id}
        onClick={this._open}
      >
        <gpuIcon.react tag="span" className="cube-GpuStatus-icon" />
        <span data-testid="cube-gpu-status-memory">
          {formatMiB(kernel.memory_used_mib)}
        </span>
        <span data-testid="cube-gpu-status-util">
          {formatPct(kernel.utilization_pct)}
        </span>
      </button>
    );
  }
}
