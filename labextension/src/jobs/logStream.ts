/**
 * The live log of one replica: a following read of `/jobs/{name}/logs` whose text
 * grows as the server flushes lines, until the replica ends or another is picked.
 */
import type { IDisposable } from '@lumino/disposable';
import { ISignal, Signal } from '@lumino/signaling';

import { errorMessage } from '../api';
import type { JobsClient } from './client';

/** Keep at most this much of a log in the page (the tail). */
export const MAX_LOG_CHARS = 1_000_000;

export type LogStreamState = 'idle' | 'streaming' | 'ended' | 'error';

export class LogStream implements IDisposable {
  constructor(private readonly _client: JobsClient) {}

  /** Emitted when the text or the state changes. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get job(): string | null {
    return this._job;
  }

  get replica(): string | null {
    return this._replica;
  }

  get text(): string {
    return this._text;
  }

  /** Whether the start of the log was dropped to keep the page light. */
  get clipped(): boolean {
    return this._clipped;
  }

  get state(): LogStreamState {
    return this._state;
  }

  get error(): string | null {
    return this._error;
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  /** Follow `replica` of `job` from the start of its log (stops any other read first). */
  open(job: string, replica: string): void {
    this.close();
    this._job = job;
    this._replica = replica;
    this._text = '';
    this._clipped = false;
    this._error = null;
    this._state = 'streaming';
    const controller = new AbortController();
    this._controller = controller;
    this._changed.emit();
    this._client
      .streamLogs(
        job,
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
    this._job = null;
    this._replica = null;
    this._text = '';
    this._state = 'idle';
    this._error = null;
    this._changed.emit();
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
    let next = this._text + text;
    if (next.length > MAX_LOG_CHARS) {
      next = next.slice(next.length - MAX_LOG_CHARS);
      this._clipped = true;
    }
    this._text = next;
    this._changed.emit();
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
    this._state = state;
    this._error = error;
    this._changed.emit();
  }

  private _changed = new Signal<this, void>(this);
  private _controller: AbortController | null = null;
  private _job: string | null = null;
  private _replica: string | null = null;
  private _text = '';
  private _clipped = false;
  private _state: LogStreamState = 'idle';
  private _error: string | null = null;
  private _isDisposed = false;
}
