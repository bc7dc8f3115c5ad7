/**
 * State of the Schedules panel: the caller's schedules and each one's runs by logical
 * time (polled while the panel is shown), the form (a new schedule of a notebook, or an
 * edit) and its request, a backfill's dry run and confirmation, and the error of each
 * action where the user acted.
 */
import { errorMessage } from '../common/api';
import { fieldError } from '../common/fieldError';
import { PolledModel } from '../common/polledModel';
import { RequestState } from '../common/request';
import type { PipelineClient } from '../pipeline/client';
import type { IParameter } from '../pipeline/types';
import { ScheduleClient } from './client';
import type {
  IBackfill,
  IBackfillRequest,
  ISchedule,
  IScheduleRun
} from './types';

/** How often the schedules and their runs are fetched while the panel is shown (ms). */
export const SCHEDULES_POLL_INTERVAL = 2000;

/** What the form is for: a notebook's new schedule, or a saved one. */
export interface IScheduleFormTarget {
  /** The notebook it runs. */
  path: string;
  /** The schedule edited; null for a new one. */
  schedule: ISchedule | null;
  /** The notebook's parameters (null until the server has said). */
  parameters: IParameter[] | null;
  /** Why they could not be read. */
  parametersError: string | null;
  /** The notebook is open with unsaved changes (the saved file is what runs). */
  unsaved: boolean;
  /** Bumped each time the form opens, so it starts from its target's values. */
  key: number;
}

/** A backfill being prepared for one schedule. */
export interface IBackfillState {
  name: string;
  /** The dry run's answer, for the range asked. */
  plan: IBackfill | null;
  /** The range the plan is for (confirming sends it again without `dry_run`). */
  request: IBackfillRequest | null;
  /** The answer of the confirmed backfill. */
  queued: IBackfill | null;
}

export class SchedulesModel extends PolledModel {
  constructor(
    readonly client: ScheduleClient,
    private readonly _pipelines: PipelineClient
  ) {
    super({
      name: 'cube-jupyter:schedules',
      interval: SCHEDULES_POLL_INTERVAL,
      backoff: true
    });
  }

  /** Saving the form; its error names the spec field at fault. */
  readonly saving = new RequestState<ISchedule>(() => this.stateChanged.emit());

  /** The backfill request (dry run or confirmed); its error names `start`, `end`, `parallel`. */
  readonly backfilling = new RequestState<IBackfill>(() =>
    this.stateChanged.emit()
  );

  get schedules(): readonly ISchedule[] {
    return this._schedules;
  }

  /** Whether the list has been fetched once (to tell "none" from "not yet"). */
  get loaded(): boolean {
    return this._loaded;
  }

  get listError(): string | null {
    return this._listError;
  }

  /** A schedule's runs by logical time, newest first (as fetched last). */
  runs(name: string): readonly IScheduleRun[] {
    return this._runs.get(name) ?? [];
  }

  /** The error of the last action on a schedule (pause, run now, delete, opening a run). */
  actionError(name: string): string | null {
    return this._actionErrors.get(name) ?? null;
  }

  /** Whether an action on the schedule is in flight. */
  busy(name: string): boolean {
    return this._busy.has(name);
  }

  /** What the form is for; null: the list is shown. */
  get form(): IScheduleFormTarget | null {
    return this._form;
  }

  get backfill(): IBackfillState | null {
    return this._backfill;
  }

  /** Open the form for a new schedule of the notebook at `path`. */
  startCreate(path: string, unsaved = false): void {
    this._openForm(path, null, unsaved);
  }

  /** Open the form for a saved schedule. */
  startEdit(name: string): void {
    const schedule = this._schedules.find(s => s.name === name);
    if (schedule?.path) {
      this._openForm(schedule.path, schedule, false);
    }
  }

  closeForm(): void {
    this._form = null;
    this.saving.clear();
    this.stateChanged.emit();
  }

  /** Send the form: create or edit; true once the server accepted it (the list shows). */
  async save(body: () => Record<string, unknown>): Promise<boolean> {
    const form = this._form;
    if (!form) {
      return false;
    }
    let spec: Record<string, unknown>;
    try {
      spec = body();
    } catch (error) {
      this.saving.fail(fieldError(error));
      return false;
    }
    const saved = await this.saving.run(() =>
      form.schedule
        ? this.client.patch(form.schedule.name, spec)
        : this.client.create(spec)
    );
    if (!saved) {
      return false;
    }
    this._upsert(saved);
    this._form = null;
    this.saving.clear();
    this.stateChanged.emit();
    void this.refresh();
    return true;
  }

  /** Pause or resume a schedule. */
  setPaused(name: string, paused: boolean): Promise<void> {
    return this._act(name, async () => {
      this._upsert(await this.client.patch(name, { paused }));
    });
  }

  /** A run for the logical time now. */
  runNow(name: string): Promise<void> {
    return this._act(name, async () => {
      await this.client.runNow(name);
    });
  }

  remove(name: string): Promise<void> {
    return this._act(name, async () => {
      await this.client.remove(name);
      this._schedules = this._schedules.filter(s => s.name !== name);
      this._runs.delete(name);
    });
  }

  /** Record why opening a run failed, by its schedule. */
  setActionError(name: string, message: string | null): void {
    if (message) {
      this._actionErrors.set(name, message);
    } else {
      this._actionErrors.delete(name);
    }
    this.stateChanged.emit();
  }

  /** Open (or close, for the same schedule) the backfill box of a schedule. */
  toggleBackfill(name: string): void {
    this._backfill =
      this._backfill?.name === name
        ? null
        : { name, plan: null, request: null, queued: null };
    this.backfilling.clear();
    this.stateChanged.emit();
  }

  /** The range was edited: the plan shown no longer speaks of it. */
  editBackfill(): void {
    if (this._backfill) {
      this._backfill = { ...this._backfill, plan: null, queued: null };
    }
    this.backfilling.clearError();
    this.stateChanged.emit();
  }

  /** Ask for the dry run of a range: the logical times that would run. */
  async planBackfill(request: IBackfillRequest): Promise<void> {
    const state = this._backfill;
    if (!state) {
      return;
    }
    const plan = await this.backfilling.run(() =>
      this.client.backfill(state.name, { ...request, dry_run: true })
    );
    if (plan && this._backfill?.name === state.name) {
      this._backfill = { ...state, plan, request, queued: null };
      this.stateChanged.emit();
    }
  }

  /** Queue the planned backfill. */
  async confirmBackfill(): Promise<void> {
    const state = this._backfill;
    if (!state?.request) {
      return;
    }
    const queued = await this.backfilling.run(() =>
      this.client.backfill(state.name, { ...state.request!, dry_run: false })
    );
    if (queued && this._backfill?.name === state.name) {
      this._backfill = { ...state, plan: null, queued };
      this.stateChanged.emit();
      void this.refresh();
    }
  }

  /** One tick: the list, then each schedule's runs. */
  protected async poll(): Promise<void> {
    try {
      const { schedules } = await this.client.list();
      const runs = await Promise.all(
        schedules.map(s =>
          this.client
            .runs(s.name)
            .then(list => list.runs)
            .catch(() => this._runs.get(s.name) ?? [])
        )
      );
      this._schedules = schedules;
      this._runs = new Map(schedules.map((s, i) => [s.name, runs[i]]));
      this._listError = null;
    } catch (error) {
      this._listError = errorMessage(error);
      throw error;
    } finally {
      this._loaded = true;
      this.stateChanged.emit();
    }
  }

  protected onVisibilityChanged(): void {
    if (this.visible) {
      this.startPolling();
    } else {
      this.stopPolling();
    }
  }

  private _openForm(
    path: string,
    schedule: ISchedule | null,
    unsaved: boolean
  ): void {
    const key = (this._form?.key ?? 0) + 1;
    this._form = {
      path,
      schedule,
      parameters: null,
      parametersError: null,
      unsaved,
      key
    };
    this.saving.clear();
    this.stateChanged.emit();
    // The parameters of the notebook as saved: the schedule runs the saved file.
    this._pipelines.graph(path).then(
      graph => this._setParameters(key, graph.parameters, null),
      error => this._setParameters(key, [], errorMessage(error))
    );
  }

  private _setParameters(
    key: number,
    parameters: IParameter[],
    error: string | null
  ): void {
    if (this._form?.key === key) {
      this._form = { ...this._form, parameters, parametersError: error };
      this.stateChanged.emit();
    }
  }

  private async _act(name: string, action: () => Promise<void>): Promise<void> {
    if (this._busy.has(name)) {
      return;
    }
    this._busy.add(name);
    this._actionErrors.delete(name);
    this.stateChanged.emit();
    try {
      await action();
    } catch (error) {
      this._actionErrors.set(name, errorMessage(error));
    } finally {
      this._busy.delete(name);
      this.stateChanged.emit();
    }
    void this.refresh();
  }

  private _upsert(schedule: ISchedule): void {
    const index = this._schedules.findIndex(s => s.name === schedule.name);
    this._schedules =
      index < 0
        ? [...this._schedules, schedule]
        : this._schedules.map((s, i) => (i === index ? schedule : s));
  }

  private _schedules: ISchedule[] = [];
  private _runs = new Map<string, IScheduleRun[]>();
  private _loaded = false;
  private _listError: string | null = null;
  private _actionErrors = new Map<string, string>();
  private _busy = new Set<string>();
  private _form: IScheduleFormTarget | null = null;
  private _backfill: IBackfillState | null = null;
}
