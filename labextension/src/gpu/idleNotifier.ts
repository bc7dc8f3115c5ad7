/**
 * Tells the user, once per idle episode, that a notebook's kernel holds a GPU at 0%
 * utilization, or that a server or job of theirs will be stopped for it. Which kernels are idle, and for how long that counts, is the server's
 * call (`report.idle`); an episode ends when its key leaves that list, and the toast
 * goes with it.
 */
import { Notification } from '@jupyterlab/apputils';
import type { IDisposable } from '@lumino/disposable';

import { wantsToast } from './idle';
import { GpuModel } from './model';
import type { IGpuReport } from './types';

export class IdleNotifier implements IDisposable {
  constructor(
    private readonly _model: GpuModel,
    private readonly _openPanel: () => void
  ) {
    _model.reportChanged.connect(this._onReport, this);
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this._model.reportChanged.disconnect(this._onReport, this);
  }

  private _onReport(_: GpuModel, report: IGpuReport): void {
    const current = new Set<string>();
    for (const warning of report.idle) {
      if (!wantsToast(warning, this._model.allUsers)) {
        continue; // shown in the panel only
      }
      current.add(warning.key);
      if (this._shown.has(warning.key)) {
        continue;
      }
      const id = Notification.warning(warning.message, {
        autoClose: false,
        data: { cubeGpuIdle: warning.key },
        actions: [
          {
            label: 'Open GPU panel',
            caption: 'Show GPU use per kernel',
            callback: () => this._openPanel()
          }
        ]
      });
      this._shown.set(warning.key, id);
    }
    for (const [key, id] of [...this._shown]) {
      if (!current.has(key)) {
        this._shown.delete(key);
        Notification.dismiss(id);
      }
    }
  }

  private _shown = new Map<string, string>();
  private _disposed = false;
}
