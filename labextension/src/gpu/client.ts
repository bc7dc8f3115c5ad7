/**
 * Typed client of `/cube/api/v1/gpu`, on top of the workbench's one HTTP client.
 */
import { CubeClient, withQuery } from '../common/api';
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
    const history = options.historySeconds;
    return this.cube.request<IGpuReport>(
      withQuery('gpu', {
        history: history === undefined ? undefined : Math.round(history),
        all: options.allUsers
      })
    );
  }
}
