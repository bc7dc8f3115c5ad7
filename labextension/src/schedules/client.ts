/**
 * Typed client of `/cube/api/v1/schedules`, on top of the workbench's one HTTP client.
 */
import { CubeClient, itemPath, Query, withQuery } from '../common/api';
import type {
  IBackfill,
  IBackfillRequest,
  ISchedule,
  IScheduleList,
  IScheduleRun,
  IScheduleRunList,
  ISchedulePreview
} from './types';

/** How many runs of a schedule the panel's grid asks for. */
export const RUNS_SHOWN = 60;

export class ScheduleClient {
  constructor(readonly cube: CubeClient) {}

  /** The caller's schedules. */
  list(): Promise<IScheduleList> {
    return this.cube.request<IScheduleList>('schedules');
  }

  /** The next fire times of a cron (or interval) in a timezone, and its words. */
  preview(query: Query): Promise<ISchedulePreview> {
    // `no-cache`, not Jupyter's default `no-store`: that appends a cache-busting key to
    // the query, and the preview refuses keys it does not know.
    return this.cube.request<ISchedulePreview>(
      withQuery('schedules/preview', query),
      { cache: 'no-cache' }
    );
  }

  create(spec: Record<string, unknown>): Promise<ISchedule> {
    return this.cube.send<ISchedule>('schedules', 'POST', spec);
  }

  /** Change any field but the name. */
  patch(name: string, changes: Record<string, unknown>): Promise<ISchedule> {
    return this.cube.send<ISchedule>(
      itemPath('schedules', name),
      'PATCH',
      changes
    );
  }

  async remove(name: string): Promise<void> {
    await this.cube.fetch(itemPath('schedules', name), { method: 'DELETE' });
  }

  /** A run for the logical time now. */
  runNow(name: string): Promise<IScheduleRun> {
    return this.cube.request<IScheduleRun>(
      `${itemPath('schedules', name)}/run`,
      { method: 'POST' }
    );
  }

  backfill(name: string, request: IBackfillRequest): Promise<IBackfill> {
    return this.cube.send<IBackfill>(
      `${itemPath('schedules', name)}/backfill`,
      'POST',
      request
    );
  }

  /** Its runs by logical time, newest first. */
  runs(name: string, limit = RUNS_SHOWN): Promise<IScheduleRunList> {
    return this.cube.request<IScheduleRunList>(
      withQuery(`${itemPath('schedules', name)}/runs`, { limit })
    );
  }
}
