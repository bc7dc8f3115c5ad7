/**
 * State of the Jobs panel: the caller's jobs (polled while the panel is shown), the job
 * picked and its live replica log, a tuning job's history, a served model's test
 * request, and the launch form's state with the server's error naming a field.
 */
import { VDomModel } from '@jupyterlab/ui-components';
import { Poll } from '@lumino/polling';

import { CubeApiError, errorMessage } from '../api';
import { JobsClient } from './client';
import { LogStream } from './logStream';
import type {
  IJob,
  IJobHistory,
  IPredictResponse,
  JobKind,
  PredictProtocol
} from './types';

/** How often the job list is fetched while the panel is shown (ms). */
export const JOBS_POLL_INTERVAL = 2000;

/** An error the server answered, with the spec field it names (`replicas.worker`). */
export interface IFieldError {
  message: string;
  field: string | null;
}

export function fieldError(error: unknown): IFieldError {
  return {
    message: errorMessage(error),
    field: error instanceof CubeApiError ? error.field : null
  };
}

/** What the right-hand side of the panel shows. */
export type JobsView = 'job' | 'launch';

export class JobsModel extends VDomModel {
  constructor(readonly client: JobsClient) {
    super();
    this.logs = new LogStream(client);
    this.logs.changed.connect(() => this.stateChanged.emit(), this);
    this._poll = new Poll({
      auto: false,
      factory: () => this.refresh(),
      frequency: { interval: JOBS_POLL_INTERVAL, backoff: false },
      name: 'cube-jupyter:jobs',
      standby: 'when-hidden'
    });
  }

  /** The live log of the picked replica of the job shown. */
  readonly logs: LogStream;

  get jobs(): readonly IJob[] {
    return this._jobs;
  }

  /** Whether the list has been fetched once (to tell "no jobs" from "not yet"). */
  get loaded(): boolean {
    return this._loaded;
  }

  get listError(): string | null {
    return this._listError;
  }

  get view(): JobsView {
    return this._view;
  }

  get launchKind(): JobKind {
    return this._launchKind;
  }

  /** The job shown, if it is still there. */
  get selected(): IJob | null {
    return this._jobs.find(job => job.name === this._selected) ?? null;
  }

  get selectedName(): string | null {
    return this._selected;
  }

  /** The replica whose log is shown. */
  get replica(): string | null {
    return this.logs.replica;
  }

  get launching(): boolean {
    return this._launching;
  }

  /** Why the last launch was refused, with the spec field the server named. */
  get launchError(): IFieldError | null {
    return this._launchError;
  }

  /** The error of an action on the job shown (delete). */
  get actionError(): string | null {
    return this._actionError;
  }

  get history(): IJobHistory | null {
    const job = this.selected;
    return job && this._history?.name === job.name ? this._history : null;
  }

  get historyError(): string | null {
    return this._historyError;
  }

  get predicting(): boolean {
    return this._predicting;
  }

  get prediction(): IPredictResponse | null {
    return this._prediction;
  }

  get predictError(): IFieldError | null {
    return this._predictError;
  }

  /** The panel tells the model when it is shown: it polls and streams only then. */
  setVisible(visible: boolean): void {
    if (visible === this._visible) {
      return;
    }
    this._visible = visible;
    if (visible) {
      void this._poll.start();
      void this._poll.refresh();
      if (this._resumeLogs) {
        this._resumeLogs = false;
        this._openLogs(this.logs.replica);
      }
    } else {
      void this._poll.stop();
      if (this.logs.state === 'streaming') {
        this._resumeLogs = true;
        this.logs.close();
      }
    }
  }

  /** Fetch the job list now. */
  async refresh(): Promise<void> {
    try {
      const { jobs } = await this.client.list();
      this._jobs = [...jobs].sort((a, b) => b.created - a.created);
      this._listError = null;
    } catch (error) {
      this._listError = errorMessage(error);
    }
    this._loaded = true;
    this._sync();
    this.stateChanged.emit();
  }

  /** Show a job: its conditions, replicas and the first replica's live log. */
  select(name: string): void {
    const changed = name !== this._selected;
    this._selected = name;
    this._view = 'job';
    this._actionError = null;
    if (changed) {
      this._prediction = null;
      this._predictError = null;
      this._historyKey = null;
      this.logs.clear();
    }
    this._sync();
    this.stateChanged.emit();
  }

  /** Follow another replica's log. */
  pickReplica(replica: string): void {
    this._openLogs(replica);
  }

  /** Show the launch form of `kind`. */
  startLaunch(kind: JobKind): void {
    this._view = 'launch';
    this._launchKind = kind;
    this._launchError = null;
    this.stateChanged.emit();
  }

  /** Forget the launch error once the user edits the form. */
  editLaunch(): void {
    if (this._launchError) {
      this._launchError = null;
      this.stateChanged.emit();
    }
  }

  /** Submit a spec as the form collected it; on success the new job is shown. */
  async launch(kind: JobKind, spec: Record<string, unknown>): Promise<boolean> {
    if (this._launching) {
      return false;
    }
    this._launching = true;
    this._launchError = null;
    this.stateChanged.emit();
    try {
      const job = await this.client.submit({ kind, spec });
      this._upsert(job);
      this.select(job.name);
      void this._poll.refresh();
      return true;
    } catch (error) {
      this._launchError = fieldError(error);
      return false;
    } finally {
      this._launching = false;
      this.stateChanged.emit();
    }
  }

  /** Delete a job (the panel asks the user first). */
  async remove(name: string): Promise<void> {
    this._actionError = null;
    try {
      await this.client.remove(name);
      if (this._selected === name) {
        this.logs.clear();
      }
      this._jobs = this._jobs.filter(job => job.name !== name);
    } catch (error) {
      this._actionError = errorMessage(error);
    }
    this.stateChanged.emit();
    void this._poll.refresh();
  }

  /** Send the JSON typed in the test-request box to the served model shown. */
  async predict(inputsText: string, protocol: PredictProtocol): Promise<void> {
    const job = this.selected;
    if (!job || this._predicting) {
      return;
    }
    let inputs: unknown;
    try {
      inputs = JSON.parse(inputsText);
    } catch (error) {
      this._prediction = null;
      this._predictError = {
        message: `inputs is not JSON: ${errorMessage(error)}`,
        field: 'inputs'
      };
      this.stateChanged.emit();
      return;
    }
    this._predicting = true;
    this._predictError = null;
    this.stateChanged.emit();
    try {
      this._prediction = await this.client.predict(job.name, {
        inputs,
        protocol
      });
    } catch (error) {
      this._prediction = null;
      this._predictError = fieldError(error);
    } finally {
      this._predicting = false;
      this.stateChanged.emit();
    }
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._poll.dispose();
    this.logs.dispose();
    super.dispose();
  }

  /** Keep the log and history of the job shown in step with the list. */
  private _sync(): void {
    const job = this.selected;
    if (!job) {
      if (this.logs.job !== null && this._loaded) {
        this.logs.clear(); // the job shown is gone (deleted elsewhere)
      }
      return;
    }
    this._syncLogs(job);
    this._syncHistory(job);
  }

  private _syncLogs(job: IJob): void {
    if (job.replicas.length === 0 || !this._visible) {
      return;
    }
    const current = this.logs.job === job.name ? this.logs.replica : null;
    const replica = job.replicas.find(r => r.name === current);
    if (!replica) {
      this._openLogs(job.replicas[0].name);
      return;
    }
    // A replica restarted by its restart policy writes on: follow its log again.
    const live = replica.state === 'Pending' || replica.state === 'Running';
    if (this.logs.state === 'ended' && live) {
      this._openLogs(replica.name);
    }
  }

  private _openLogs(replica: string | null): void {
    const job = this.selected;
    if (!job || !replica) {
      return;
    }
    this.logs.open(job.name, replica);
  }

  /** Fetch a tuning job's history again whenever another trial has reported. */
  private _syncHistory(job: IJob): void {
    if (job.kind !== 'tuning') {
      return;
    }
    const reported = job.trials.filter(t => t.objective !== null).length;
    const key = `${job.name}:${reported}:${job.phase}`;
    if (key === this._historyKey) {
      return;
    }
    this._historyKey = key;
    void this.client.history(job.name).then(
      history => {
        this._history = history;
        this._historyError = null;
        this.stateChanged.emit();
      },
      (error: unknown) => {
        this._historyError = errorMessage(error);
        this.stateChanged.emit();
      }
    );
  }

  private _upsert(job: IJob): void {
    const others = this._jobs.filter(j => j.name !== job.name);
    this._jobs = [job, ...others].sort((a, b) => b.created - a.created);
  }

  private _poll: Poll;
  private _jobs: IJob[] = [];
  private _loaded = false;
  private _listError: string | null = null;
  private _view: JobsView = 'launch';
  private _launchKind: JobKind = 'training';
  private _selected: string | null = null;
  private _launching = false;
  private _launchError: IFieldError | null = null;
  private _actionError: string | null = null;
  private _history: IJobHistory | null = null;
  private _historyKey: string | null = null;
  private _historyError: string | null = null;
  private _predicting = false;
  private _prediction: IPredictResponse | null = null;
  private _predictError: IFieldError | null = null;
  private _visible = false;
  private _resumeLogs = false;
}
