/**
 * State of the Jobs panel: the caller's jobs (polled while the panel is shown; every
 * user's for an admin who asks), the job picked and its live replica log, a tuning job's
 * history, a served model's test request, and the launch forms' vocabulary and state with
 * the server's error naming a field.
 */
import type { Contents } from '@jupyterlab/services';

import { errorMessage } from '../common/api';
import { PolledModel } from '../common/polledModel';
import { RequestState } from '../common/request';
import { JobsClient } from './client';
import { jobKey } from './format';
import { LogStream, type LogStreamState } from './logStream';
import type {
  IJob,
  IJobHistory,
  IJobRef,
  IJobsConfig,
  IPredictResponse,
  ISpecFile,
  JobKind,
  PredictProtocol
} from './types';

/** How often the job list is fetched while the panel is shown (ms). */
export const JOBS_POLL_INTERVAL = 2000;

/** What the right-hand side of the panel shows. */
export type JobsView = 'job' | 'launch';

function newestFirst(jobs: readonly IJob[]): IJob[] {
  return [...jobs].sort((a, b) => b.created - a.created);
}

/** A spec file opened into its kind's launch form; a new `version` starts the form afresh. */
export interface ISpecDraft extends ISpecFile {
  version: number;
}

export class JobsModel extends PolledModel {
  /** `contents` writes the spec files the forms save. */
  constructor(
    readonly client: JobsClient,
    private readonly _contents: Contents.IManager
  ) {
    super({ name: 'cube-jupyter:jobs', interval: JOBS_POLL_INTERVAL });
    this.logs = new LogStream(client);
    this.logs.changed.connect(this._onLogChanged, this);
  }

  /** The live log of the picked replica of the job shown. */
  readonly logs: LogStream;

  /** The launch form's request; its error names the spec field at fault. */
  readonly launching = new RequestState<IJob>(() => this.stateChanged.emit());

  /** Opening a spec file into a form; its error says why the file is no job spec. */
  readonly opening = new RequestState<ISpecFile>(() =>
    this.stateChanged.emit()
  );

  /** Saving a form as a YAML spec file: the path written. */
  readonly saving = new RequestState<string>(() => this.stateChanged.emit());

  /** The spec file the form of its kind started from, if any. */
  get draft(): ISpecDraft | null {
    return this._draft;
  }

  /** The served model's test request (shown for the job shown). */
  readonly prediction = new RequestState<IPredictResponse>(() =>
    this.stateChanged.emit()
  );

  /** What the launch forms offer, once the server has said. */
  get vocabulary(): IJobsConfig | null {
    return this._vocabulary;
  }

  get vocabularyError(): string | null {
    return this._vocabularyError;
  }

  get jobs(): readonly IJob[] {
    return this._jobs;
  }

  /** Whether the list has been fetched once (to tell "no jobs" from "not yet"). */
  get loaded(): boolean {
    return this._loaded;
  }

  /** The user the server says we are. */
  get user(): string | null {
    return this._user;
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
    return this._jobs.find(job => jobKey(job) === this._selected) ?? null;
  }

  /** Its key (`user/name`). */
  get selectedKey(): string | null {
    return this._selected;
  }

  /** The error of an action on the job shown (delete). */
  get actionError(): string | null {
    return this._actionError;
  }

  get history(): IJobHistory | null {
    const job = this.selected;
    return job && this._history?.key === jobKey(job)
      ? this._history.value
      : null;
  }

  get historyError(): string | null {
    return this._historyError;
  }

  /** Use the forms' vocabulary already fetched (by the availability probe). */
  setVocabulary(vocabulary: IJobsConfig): void {
    this._vocabulary = vocabulary;
    this._vocabularyError = null;
    this.stateChanged.emit();
  }

  /** Fetch the forms' vocabulary (again). */
  async loadVocabulary(): Promise<void> {
    try {
      this.setVocabulary(await this.client.config());
    } catch (error) {
      this._vocabularyError = errorMessage(error);
      this.stateChanged.emit();
    }
  }

  /** Show one of the caller's own jobs (by name). */
  selectOwn(name: string): void {
    if (this._user !== null) {
      this.select(`${this._user}/${name}`);
    }
  }

  /** Show a job (by `jobKey`): its conditions, replicas and the first replica's live log. */
  select(key: string): void {
    const changed = key !== this._selected;
    this._selected = key;
    this._view = 'job';
    this._actionError = null;
    if (changed) {
      this.prediction.clear();
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
    this.launching.clear();
    this.opening.clear();
    this.saving.clear();
    this.stateChanged.emit();
  }

  /** Open a YAML spec file into the launch form of its kind, prefilled with what it says. */
  async openSpecFile(path: string): Promise<boolean> {
    this._view = 'launch';
    this.saving.clear();
    const file = await this.opening.run(() => this.client.readSpecFile(path));
    if (file) {
      this.showSpecFile(file);
    }
    return file !== null;
  }

  /** Show a spec file already read in the launch form of its kind, prefilled, afresh. */
  showSpecFile(file: ISpecFile): void {
    this._view = 'launch';
    this._draft = { ...file, version: (this._draft?.version ?? 0) + 1 };
    this._launchKind = file.kind;
    this.launching.clear();
    this.opening.clear();
    this.saving.clear();
    this.stateChanged.emit();
  }

  /** Write a form's spec as YAML (rendered by the server) to `path` through the Contents API. */
  async saveSpec(
    kind: JobKind,
    spec: Record<string, unknown>,
    path: string
  ): Promise<boolean> {
    const saved = await this.saving.run(async () => {
      const { yaml } = await this.client.renderSpec({ kind, spec });
      await this._contents.save(path, {
        type: 'file',
        format: 'text',
        content: yaml
      });
      return path;
    });
    return saved !== null;
  }

  /** Submit a spec as the form collected it; on success the new job is shown. */
  async launch(kind: JobKind, spec: Record<string, unknown>): Promise<boolean> {
    const job = await this.launching.run(() =>
      this.client.submit({ kind, spec })
    );
    if (!job) {
      return false;
    }
    this._jobs = newestFirst([
      job,
      ...this._jobs.filter(j => jobKey(j) !== jobKey(job))
    ]);
    this.select(jobKey(job));
    this.pollNow();
    return true;
  }

  /** Delete a job (the panel asks the user first). */
  async remove(job: IJob): Promise<void> {
    const key = jobKey(job);
    this._actionError = null;
    try {
      await this.client.remove(this._ref(job));
      if (this._selected === key) {
        this.logs.clear();
      }
      this._jobs = this._jobs.filter(j => jobKey(j) !== key);
    } catch (error) {
      this._actionError = errorMessage(error);
    }
    this.stateChanged.emit();
    this.pollNow();
  }

  /** Send the JSON typed in the test-request box to the served model shown. */
  async predict(inputsText: string, protocol: PredictProtocol): Promise<void> {
    const job = this.selected;
    if (!job || this.prediction.busy) {
      return;
    }
    let inputs: unknown;
    try {
      inputs = JSON.parse(inputsText);
    } catch (error) {
      this.prediction.fail({
        message: `inputs is not JSON: ${errorMessage(error)}`,
        field: 'inputs'
      });
      return;
    }
    await this.prediction.run(() =>
      this.client.predict(this._ref(job), { inputs, protocol })
    );
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.logs.dispose();
    super.dispose();
  }

  /** Fetch the job list; errors land in `listError`. */
  protected async poll(): Promise<void> {
    try {
      const list = await this.fetchInScope(all => this.client.list(all));
      if (list === null) {
        return;
      }
      this._jobs = newestFirst(list.jobs);
      this._user = list.user;
      this.isAdmin = list.is_admin;
      this._listError = null;
    } catch (error) {
      this._listError = errorMessage(error);
    }
    this._loaded = true;
    this._sync();
    this.stateChanged.emit();
  }

  /** Poll and stream only while shown; a log being followed resumes when shown again. */
  protected onVisibilityChanged(): void {
    super.onVisibilityChanged();
    if (this.visible) {
      if (this._vocabulary === null) {
        void this.loadVocabulary();
      }
      if (this._resumeLogs) {
        this._resumeLogs = false;
        this._openLogs(this.logs.current.replica);
      }
    } else if (this.logs.current.state === 'streaming') {
      this._resumeLogs = true;
      this.logs.close();
    }
  }

  /**
   * A log's stream ends when its replica has finished: fetch the list at once, so the
   * replica's state says so too rather than Running until the next tick.
   */
  private _onLogChanged(): void {
    const state = this.logs.current.state;
    if (state === 'ended' && this._logState !== 'ended') {
      this.pollNow();
    }
    this._logState = state;
    this.stateChanged.emit();
  }

  /** How to name a job to the server: with its owner when it is someone else's. */
  private _ref(job: IJob): IJobRef {
    return {
      name: job.name,
      user:
        this._user !== null && job.user !== this._user ? job.user : undefined
    };
  }

  /** Keep the log and history of the job shown in step with the list. */
  private _sync(): void {
    const job = this.selected;
    if (!job) {
      if (this.logs.current.job !== null && this._loaded) {
        this.logs.clear(); // the job shown is gone (deleted elsewhere)
      }
      return;
    }
    this._syncLogs(job);
    this._syncHistory(job);
  }

  private _syncLogs(job: IJob): void {
    if (job.replicas.length === 0 || !this.visible) {
      return;
    }
    const log = this.logs.current;
    const current = log.job === jobKey(job) ? log.replica : null;
    const replica = job.replicas.find(r => r.name === current);
    if (!replica) {
      this._openLogs(job.replicas[0].name);
      return;
    }
    // A replica restarted by its restart policy writes on: follow its log again.
    const live = replica.state === 'Pending' || replica.state === 'Running';
    if (log.state === 'ended' && live) {
      this._openLogs(replica.name);
    }
  }

  private _openLogs(replica: string | null): void {
    const job = this.selected;
    if (job && replica) {
      this.logs.open(jobKey(job), this._ref(job), replica);
    }
  }

  /** Fetch a tuning job's history again whenever another trial has reported. */
  private _syncHistory(job: IJob): void {
    if (job.kind !== 'tuning') {
      return;
    }
    const key = jobKey(job);
    const reported = job.trials.filter(t => t.objective !== null).length;
    const version = `${key}:${reported}:${job.phase}`;
    if (version === this._historyKey) {
      return;
    }
    this._historyKey = version;
    void this.client.history(this._ref(job)).then(
      value => {
        this._history = { key, value };
        this._historyError = null;
        this.stateChanged.emit();
      },
      (error: unknown) => {
        this._historyError = errorMessage(error);
        this.stateChanged.emit();
      }
    );
  }

  private _vocabulary: IJobsConfig | null = null;
  private _vocabularyError: string | null = null;
  private _jobs: IJob[] = [];
  private _user: string | null = null;
  private _loaded = false;
  private _listError: string | null = null;
  private _view: JobsView = 'launch';
  private _launchKind: JobKind = 'training';
  private _draft: ISpecDraft | null = null;
  private _selected: string | null = null;
  private _actionError: string | null = null;
  private _history: { key: string; value: IJobHistory } | null = null;
  private _historyKey: string | null = null;
  private _historyError: string | null = null;
  private _resumeLogs = false;
  private _logState: LogStreamState = 'idle';
}
