/**
 * The live log of one replica: a following read of `/jobs/{name}/logs` whose text
 * grows as the server flushes lines, until the replica ends or another is picked.
 */
import type { IDisposable } from '@lumino/disposable';
import { ISignal, Signal } from '@lumino/signaling';

import { errorMessage } from '../common/api';
import type { JobsClient } from './client';
import type { IJobRef } from './types';

/** Keep at most this much of a log in the page (the tail). */
export const MAX_LOG_CHARS = 1_000_000;

export type LogStreamState = 'idle' | 'streaming' | 'ended' | 'error';

/** What the log view shows: whose log, how far it got, and how the read is going. */
export interface ILogState {
  /** The key of the job (`user/name`) whose log is read, if any. */
  job: string | null;
  replica: string | null;
  text: string;
  /** Whether the start of the log was dropped to keep the page light. */
  clipped: boolean;
  state: LogStreamState;
  error: string | null;
}

const IDLE: ILogState = {
  job: null,
  replica: null,
  text: '',
  clipped: false,
  state: 'idle',
  error: null
};

export class LogStream implements IDisposable {
  constructor(private readonly _client: JobsClient) {}

  /** Emitted when the text or the state changes. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** The log as it is now. */
  get current(): ILogState {
    return this._current;
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  /**
   * Follow `replica` of the job `key` (`ref` names it to the server) from the start of its
   * log; stops any other read first.
   */
  open(key: string, ref: IJobRef, replica: string): void {
    this.close();
    const controller = new AbortController();
    this._controller = controller;
    this._set({ ...IDLE, job: key, replica, state: 'streaming' });
    this._client
      .streamLogs(
        ref,
        { replica, follow: true, signal: controller.signal },
        text => {
          if (this._controller === controller) {
            this._append(text);
          }
        }
      )
      .then(
        () => this._finish(controller, 'ended', null),
        (error: unknown) =>
          this._finish(controller, 'error', errorMessage(error))
      );
  }

  /** Stop reading; the text stays. */
  close(): void {
    if (this._controller) {
      this._controller.abort();
      this._controller = null;
    }
  }

  /** Forget the log shown (the job went away). */
  clear(): void {
    this.close();
    this._set(IDLE);
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this.close();
    Signal.clearData(this);
  }

  private _append(text: string): void {
    let next = this._current.text + text;
    let clipped = this._current.clipped;
    if (next.length > MAX_LOG_CHARS) {
      next = next.slice(next.length - MAX_LOG_CHARS);
      clipped = true;
    }
    this._set({ text: next, clipped });
  }

  private _finish(
    controller: AbortController,
    state: LogStreamState,
    error: string | null
  ): void {
    if (this._controller !== controller) {
      return; // another replica was picked meanwhile
    }
    this._controller = null;
    this._set({ state, error });
  }

  private _set(change: Partial<ILogState>): void {
    this._current = { ...this._current, ...change };
    this._changed.emit();
  }

  private _changed = new Signal<this, void>(this);
  private _controller: AbortController | null = null;
  private _current: ILogState = IDLE;
  private _isDisposed = false;
}
