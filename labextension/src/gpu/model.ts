/**
 * State of the GPU panel and status-bar item: the server's last GPU report, or why it
 * could not be had. One model is shared by the panel, the status-bar item and the idle
 * notifier, so the server is asked once per tick whatever is on screen.
 *
 * The poll follows the server's own sampling interval (`interval_seconds`) while the panel
 * is shown, and slows down while only the status bar needs the figures; history for the
 * charts is asked for only while the panel is shown.
 */
import { VDomModel } from '@jupyterlab/ui-components';
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { CubeApiError, errorMessage } from '../api';
import type { IVisibilityAware } from '../visibleRenderer';
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

export class GpuModel extends VDomModel implements IVisibilityAware {
  constructor(readonly client: GpuClient) {
    super();
    this._poll = new Poll({
      auto: false,
      factory: () => this._fetch(),
      frequency: { interval: DEFAULT_INTERVAL, backoff: true, max: 60_000 },
      name: 'cube-jupyter:gpu',
      standby: 'when-hidden'
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

  /** Whether the server offers no GPU API (a spawned notebook server without the workbench). */
  get missing(): boolean {
    return this._missing;
  }

  /** Whether the panel is on screen. */
  get visible(): boolean {
    return this._visible;
  }

  /** Admins only: show every user's pods. */
  get allUsers(): boolean {
    return this._allUsers;
  }

  set allUsers(value: boolean) {
    if (value !== this._allUsers) {
      this._allUsers = value;
      this.stateChanged.emit();
      void this.refresh();
    }
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
   * Ask the server once, to learn whether it offers the GPU API: false only on a 404.
   * The answer, if any, becomes the first report.
   */
  async probe(): Promise<boolean> {
    await this.refresh();
    return !this._missing;
  }

  /** Start polling (once the API is known to be there). */
  start(): void {
    if (!this._started && !this._missing) {
      this._started = true;
      void this._poll.start();
    }
  }

  /** The panel tells the model when it is shown or hidden. */
  setVisible(visible: boolean): void {
    if (visible === this._visible) {
      return;
    }
    this._visible = visible;
    this._tune();
    if (visible && this._started) {
      void this._poll.refresh(); // the charts want their history now
    }
  }

  /** Fetch now; errors land in `error`, never thrown. */
  async refresh(): Promise<void> {
    try {
      await this._fetch();
    } catch {
      // Recorded in `error` and shown by the panel.
    }
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._poll.dispose();
    super.dispose();
  }

  private async _fetch(): Promise<void> {
    if (this._missing) {
      return;
    }
    try {
      const report = await this.client.report({
        historySeconds: this._visible ? HISTORY_SECONDS : 0,
        allUsers: this._allUsers
      });
      this._report = report;
      this._series = new Map(
        report.history.map(s => [`${s.key}|${s.metric}`, s.points])
      );
      this._error = null;
      this._tune();
      this._reportChanged.emit(report);
    } catch (error) {
      if (error instanceof CubeApiError && error.status === 404) {
        this._missing = true;
        void this._poll.stop();
      }
      this._error = errorMessage(error);
      throw error;
    } finally {
      this.stateChanged.emit();
    }
  }

  /** Poll as often as the server samples while the panel shows, slower otherwise. */
  private _tune(): void {
    const sampled = this._report?.interval_seconds;
    const base = sampled && sampled > 0 ? sampled * 1000 : DEFAULT_INTERVAL;
    const interval = this._visible
      ? base
      : Math.max(base * HIDDEN_SLOWDOWN, HIDDEN_MIN_INTERVAL);
    if (this._poll.frequency.interval !== interval) {
      this._poll.frequency = { ...this._poll.frequency, interval };
    }
  }

  private _poll: Poll;
  private _report: IGpuReport | null = null;
  private _series = new Map<string, ISeries['points']>();
  private _error: string | null = null;
  private _missing = false;
  private _visible = false;
  private _started = false;
  private _allUsers = false;
  private _reportChanged = new Signal<this, IGpuReport>(this);
}
