/**
 * The GPU memory history of jobs and pipeline steps for other panels (`IGpuUsage`): one
 * `/gpu` request per interval for every series watched, none while nothing is watched.
 */
import { DisposableDelegate, type IDisposable } from '@lumino/disposable';

import type { GpuPoints, IGpuUsage } from '../tokens';
import type { GpuClient } from './client';

/** How often a watched series is read, and how much of its history. */
export const USAGE_POLL_MS = 5000;
export const USAGE_HISTORY_SECONDS = 600;

type Watcher = (points: GpuPoints) => void;

export class GpuUsage implements IGpuUsage {
  constructor(private readonly client: GpuClient) {}

  watchMemory(series: string, changed: Watcher): IDisposable {
    const watchers = this._watchers.get(series) ?? new Set<Watcher>();
    watchers.add(changed);
    this._watchers.set(series, watchers);
    if (this._timer === null) {
      this._timer = window.setInterval(() => void this._poll(), USAGE_POLL_MS);
    }
    void this._poll();
    return new DisposableDelegate(() => {
      watchers.delete(changed);
      if (watchers.size === 0) {
        this._watchers.delete(series);
      }
      if (this._watchers.size === 0 && this._timer !== null) {
        window.clearInterval(this._timer);
        this._timer = null;
      }
    });
  }

  private async _poll(): Promise<void> {
    if (this._polling || this._watchers.size === 0) {
      return;
    }
    this._polling = true;
    try {
      const report = await this.client.report({
        historySeconds: USAGE_HISTORY_SECONDS
      });
      const memory = new Map(
        report.history
          .filter(s => s.metric === 'memory_used_mib')
          .map(s => [s.key, s.points] as const)
      );
      for (const [series, watchers] of this._watchers) {
        for (const changed of watchers) {
          changed(memory.get(series) ?? []);
        }
      }
    } catch {
      // A failed read leaves the last points shown; the GPU panel says why the reads fail.
    } finally {
      this._polling = false;
    }
  }

  private readonly _watchers = new Map<string, Set<Watcher>>();
  private _timer: number | null = null;
  private _polling = false;
}
