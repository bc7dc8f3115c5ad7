/**
 * Typed client of `/cube/api/v1/gpu`, on top of the workbench's one HTTP client.
 */
import type { CubeClient } from '../api';
import type { IGpuReport } from './types';

export interface IReportOptions {
  /** Seconds of history to include for the charts (0: none); absent: the server's default. */
  historySeconds?: number;
  /** Admins: every user's pods, not only their own. */
  allUsers?: boolean;
}

export class GpuClient {
  constructor(readonly cube: CubeClient) {}

  /** The GPU report of the caller (or, for an admin asking, of everyone). */
  report(options: IReportOptions = {}): Promise<IGpuReport> {
    const query = new URLSearchParams();
    if (options.historySeconds !== undefined) {
      query.set('history', String(Math.round(options.historySeconds)));
    }
    if (options.allUsers) {
      query.set('all', '1');
    }
    const text = query.toString();
    return this.cube.request<IGpuReport>(text ? `gpu?${text}` : 'gpu');
  }
}
