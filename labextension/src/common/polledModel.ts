/**
 * The model of a panel that polls the server: one base owning the poll loop, the panel's
 * visibility, the admin's "every user's" scope and disposal, so the feature models
 * (notebook servers, jobs, GPU, pipeline runs) only say what one tick fetches.
 */
import { VDomModel } from '@jupyterlab/ui-components';
import { Poll } from '@lumino/polling';

import type { IAllUsersScope } from './components/AllUsersToggle';
import { fetchForScope } from './scope';
import type { IVisibilityAware } from './visibleRenderer';

/** Longest wait between polls after failures (ms) when the poll backs off. */
export const MAX_POLL_INTERVAL = 60_000;

export interface IPolledModelOptions {
  /** The poll's name, e.g. `cube-jupyter:jobs`. */
  name: string;
  /** Time between ticks (ms); a model may change it as it goes (`interval`). */
  interval: number;
  /** Wait longer after each failed tick (up to `MAX_POLL_INTERVAL`). */
  backoff?: boolean;
  /**
   * Keep polling while the panel is hidden (the GPU status bar, a run being watched);
   * by default a hidden panel's model stands by. Either way nothing is fetched while the
   * browser tab is hidden.
   */
  whileHidden?: boolean;
}

export abstract class PolledModel
  extends VDomModel
  implements IVisibilityAware, IAllUsersScope
{
  constructor(options: IPolledModelOptions) {
    super();
    const whileHidden = options.whileHidden ?? false;
    this._poll = new Poll({
      auto: false,
      factory: () => this.poll(),
      frequency: {
        interval: options.interval,
        backoff: options.backoff ?? false,
        max: Math.max(MAX_POLL_INTERVAL, options.interval)
      },
      name: options.name,
      standby: () => (whileHidden || this._visible ? 'when-hidden' : true)
    });
  }

  /** Whether the panel is on screen. */
  get visible(): boolean {
    return this._visible;
  }

  /** Whether the poll has been started (and not stopped since). */
  get polling(): boolean {
    return this._polling;
  }

  /** Whether the server says the caller is an admin (who may list every user's). */
  get isAdmin(): boolean {
    return this._isAdmin;
  }

  /** Recorded by the model from the last list. */
  protected set isAdmin(value: boolean) {
    this._isAdmin = value;
  }

  /** Whether an admin asked for every user's items; changing it fetches them now. */
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

  /**
   * Fetch for the scope in force (every user's or the caller's own). An answer that comes back
   * after the scope changed is `null`: the change fetched anew already, and an answer for the
   * old view must not overwrite the new one (nor toast the other view's warnings).
   */
  protected async fetchInScope<T>(
    fetch: (allUsers: boolean) => Promise<T>
  ): Promise<T | null> {
    return fetchForScope(() => this._allUsers, fetch);
  }

  /**
   * A view tells the model when it is shown or hidden; with several views of one model
   * (a sidebar panel and a main-area view), the model is visible while any of them is.
   */
  setVisible(visible: boolean, view: object = this): void {
    if (visible) {
      this._views.add(view);
    } else {
      this._views.delete(view);
    }
    if (this._views.size > 0 !== this._visible) {
      this._visible = this._views.size > 0;
      this.onVisibilityChanged();
    }
  }

  /** Fetch now, outside the schedule; errors are recorded by `poll`, never thrown. */
  async refresh(): Promise<void> {
    try {
      await this.poll();
    } catch {
      // Recorded by the model and shown by the panel.
    }
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._poll.dispose();
    super.dispose();
  }

  /**
   * One tick: fetch and record what the server said (or why it could not), then emit
   * `stateChanged`. A rejection makes a backing-off poll wait longer.
   */
  protected abstract poll(): Promise<void>;

  /** What showing or hiding the panel does: by default, poll as soon as it is shown. */
  protected onVisibilityChanged(): void {
    if (this._visible) {
      this.startPolling();
    }
  }

  /** Start polling now; if the poll runs already, tick now. */
  protected startPolling(): void {
    if (this._polling) {
      void this._poll.refresh();
    } else {
      this._polling = true;
      void this._poll.start();
    }
  }

  /** Tick now if the poll runs (after an action changed what it would fetch). */
  protected pollNow(): void {
    if (this._polling) {
      void this._poll.refresh();
    }
  }

  protected stopPolling(): void {
    if (this._polling) {
      this._polling = false;
      void this._poll.stop();
    }
  }

  /** The time between ticks (ms). */
  protected get interval(): number {
    return this._poll.frequency.interval;
  }

  protected set interval(value: number) {
    const frequency = this._poll.frequency;
    if (frequency.interval !== value) {
      const max = Math.max(frequency.max, value);
      this._poll.frequency = { ...frequency, interval: value, max };
    }
  }

  private _poll: Poll;
  private _visible = false;
  private _views = new Set<object>();
  private _polling = false;
  private _isAdmin = false;
  private _allUsers = false;
}
