/**
 * One request a panel makes on the user's behalf (create a server, launch a job, start
 * a run, send a test prediction): whether it is in flight, its answer, and the server's
 * error with the field it names, for the form to show by that field.
 */
import { fieldError, IFieldError } from './fieldError';

export class RequestState<T> {
  /** `changed` is called whenever what the request shows changes. */
  constructor(private readonly _changed: () => void) {}

  /** Whether the request is in flight. */
  get busy(): boolean {
    return this._busy;
  }

  /** The last answer (null after a failure, or once cleared). */
  get value(): T | null {
    return this._value;
  }

  /** Why the last request failed, with the field the server named. */
  get error(): IFieldError | null {
    return this._error;
  }

  /**
   * Send the request unless one is in flight: its answer, or null (then see `error`).
   * Errors are recorded, never thrown.
   */
  async run(request: () => Promise<T>): Promise<T | null> {
    if (this._busy) {
      return null;
    }
    this._busy = true;
    this._error = null;
    this._changed();
    try {
      this._value = await request();
      return this._value;
    } catch (error) {
      this._value = null;
      this._error = fieldError(error);
      return null;
    } finally {
      this._busy = false;
      this._changed();
    }
  }

  /** Record a failure found before sending (e.g. input that is not JSON). */
  fail(error: IFieldError): void {
    this._value = null;
    this._error = error;
    this._changed();
  }

  /** Forget the error (the user is editing what it was about). */
  clearError(): void {
    if (this._error) {
      this._error = null;
      this._changed();
    }
  }

  /** Forget the answer and the error (the form now speaks of something else). */
  clear(): void {
    this._value = null;
    this._error = null;
  }

  private _busy = false;
  private _value: T | null = null;
  private _error: IFieldError | null = null;
}
