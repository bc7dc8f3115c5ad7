/**
 * State of the GPU panel and status-bar item: the server's last GPU report, or why it
 * could not be had. One model is shared by the panel, the status-bar item and the idle
 * notifier, so the server is asked once per tick whatever is on screen.
 *
 * The poll follows the server's own sampling interval (`interval_seconds`) while the panel
 * is shown, and slows down while only the status bar needs the figures; history for the
 * charts is asked for only while the panel is shown.
 */
import { ISignal, Signal } from '@lumino/signaling';

import { errorMessage, IProbe, probe as probeApi } from '../common/api';
import { PolledModel } from '../common/polledModel';
import { GpuClient } from './client';
import type { IGpuReport, ISeries, SeriesMetric } from './types';

/** Seconds of history the panel's charts span. */
export const HISTORY_SECONDS = 300;
/** Poll interval before the server has said its own (ms). */
export const DEFAULT_INTERVAL = 2000;
/**
 * While the panel is hidden (only the status bar and idle warnings need figures), poll
 * this many times slower than the server samples...
 */
export const HIDDEN_SLOWDOWN = 2.5;
/** ...but no more often than this (ms), like jupyter-resource-usage's status bar. */
export const HIDDEN_MIN_INTERVAL = 5000;

export class GpuModel extends PolledModel {
  constructor(readonly client: GpuClient) {
    super({
      name: 'cube-jupyter:gpu',
      interval: DEFAULT_INTERVAL,
      backoff: true,
      whileHidden: true
    });
  }

  /** The last report, kept (and shown as stale) while a later fetch fails. */
  get report(): IGpuReport | null {
    return this._report;
  }

  /** Why the last fetch failed, if it did. */
  get error(): string | null {
    return this._error;
  }

  /** Emitted after each report that arrives (not on errors). */
  get reportChanged(): ISignal<this, IGpuReport> {
    return this._reportChanged;
  }

  /** One metric's history of a GPU (`gpu:<uuid>`) or pod (`pod:<ns>/<pod>`), oldest first. */
  series(key: string, metric: SeriesMetric): ISeries['points'] {
    return this._series.get(`${key}|${metric}`) ?? [];
  }

  /**
   * Ask the server once, to learn whether it offers the GPU API (see `probe`); the
   * answer, if any, is the first report.
   */
  probe(): Promise<IProbe<void>> {
    return probeApi(this.client.cube, 'gpu', () => this.poll());
  }

  /** Start polling (once the API is known to be there): the status bar needs figures too. */
  start(): void {
    if (!this.polling) {
      this.startPolling();
    }
  }

  protected async poll(): Promise<void> {
    try {
      const report = await this.fetchInScope(allUsers =>
        this.client.report({
          historySeconds: this.visible ? HISTORY_SECONDS : 0,
          allUsers
        })
      );
      if (report === null) {
        return;
      }
      this._report = report;
      this._series = new Map(
        report.history.map(s => [`${s.key}|${s.metric}`, s.points])
      );
      this.isAdmin = !!report.is_admin;
      this._error = null;
      this._tune();
      this._reportChanged.emit(report);
    } catch (error) {
      this._error = errorMessage(error);
      throw error;
    } finally {
      this.stateChanged.emit();
    }
  }

  /** Shown: poll at the server's pace, with the charts' history, now; hidden: slower. */
  protected onVisibilityChanged(): void {
    this._tune();
    super.onVisibilityChanged();
  }

  /** Poll as often as the server samples while the panel shows, slower otherwise. */
  private _tune(): void {
    const sampled = this._report?.interval_seconds;
    const base = sampled && sampled > 0 ? sampled * 1000 : DEFAULT_INTERVAL;
    this.interval = this.visible
      ? base
      : Math.max(base * HIDDEN_SLOWDOWN, HIDDEN_MIN_INTERVAL);
  }

  private _report: IGpuReport | null = null;
  private _series = new Map<string, ISeries['points']>();
  private _error: string | null = null;
  private _reportChanged = new Signal<this, IGpuReport>(this);
}
