/**
 * Shapes of the schedule documents served under `/cube/api/v1/schedules`; they mirror
 * `Schedule`, `ScheduleSpec`, `ScheduleRun` and `Backfill` in server_ext/openapi.yaml.
 * Every rule behind the values lives on the server.
 */

export type CatchUp = 'none' | 'latest' | 'all';
export type ConcurrencyPolicy = 'Allow' | 'Forbid' | 'Replace';
export type ScheduleState = 'active' | 'paused' | 'ended';
export type ScheduleRunState =
  'pending' | 'running' | 'succeeded' | 'failed' | 'skipped' | 'cancelled';

/** One run of a schedule, for one logical time. */
export interface IScheduleRun {
  logical_date: string;
  state: ScheduleRunState;
  origin: 'schedule' | 'catchup' | 'backfill' | 'manual' | 'cluster' | 'kfp';
  attempts: number;
  /** The pipeline run's id (kind notebook) or the training job's name. */
  run_id: string | null;
  /** Why it waits, was skipped or failed. */
  reason: string | null;
  created: string;
  started: string | null;
  finished: string | null;
  retry_at: string | null;
}

/** A saved schedule, with its words, state and latest runs. */
export interface ISchedule {
  owner: string;
  name: string;
  kind: 'notebook' | 'training';
  path: string | null;
  job: Record<string, unknown> | null;
  parameters: Record<string, unknown>;
  target: 'local' | 'cluster' | 'kfp';
  cron: string | null;
  interval_seconds: number | null;
  timezone: string;
  start: string | null;
  end: string | null;
  catchup: CatchUp;
  max_concurrency: number;
  concurrency_policy: ConcurrencyPolicy;
  retries: number;
  retry_backoff_seconds: number;
  depends_on: string | null;
  depends_timeout_seconds: number;
  paused: boolean;
  created: string;
  updated: string;
  next_fire: string | null;
  snapshot_taken: string | null;
  /** The schedule in words. */
  describe: string;
  state: ScheduleState;
  last_run: IScheduleRun | null;
  running: number;
  pending: number;
}

/** Body of `GET /schedules`. */
export interface IScheduleList {
  user: string;
  schedules: ISchedule[];
}

/** Body of `GET /schedules/{name}/runs`: newest logical time first. */
export interface IScheduleRunList {
  name: string;
  runs: IScheduleRun[];
}

/** Body of `GET /schedules/preview`. */
export interface ISchedulePreview {
  describe: string;
  cron: string | null;
  timezone: string;
  /** The next fire times (UTC, ISO 8601). */
  next: string[];
}

/** What `POST /schedules/{name}/backfill` takes. */
export interface IBackfillRequest {
  start: string;
  end: string;
  parallel?: number | string;
  dry_run?: boolean;
  rerun?: boolean;
}

/** Its answer: the logical times in the range and what happens to each. */
export interface IBackfill {
  logical_dates: string[];
  to_run: string[];
  already_succeeded: string[];
  in_progress: string[];
  dry_run: boolean;
  batch?: string;
}
