/**
 * Typed client of `/cube/api/v1/jobs`, on top of the workbench's one HTTP client; the
 * log stream reads the chunked text answer as it arrives.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { CubeApiError, CubeClient } from '../api';
import type {
  IJob,
  IJobHistory,
  IJobList,
  IPredictRequest,
  IPredictResponse,
  ISubmitJob
} from './types';

/** Options of one log read. */
export interface ILogOptions {
  /** e.g. `worker-0`; the server's default (the first replica) when left out. */
  replica?: string;
  /** Keep reading until the replica ends. */
  follow?: boolean;
  /** Only the last N lines. */
  tail?: number;
  /** Stops the read (and the server's read of the log). */
  signal?: AbortSignal;
}

export class JobsClient {
  constructor(readonly cube: CubeClient) {}

  /** Whether this server offers the jobs API: only a 404 says it does not. */
  async isAvailable(): Promise<boolean> {
    try {
      await this.list();
      return true;
    } catch (error) {
      return !(error instanceof CubeApiError && error.status === 404);
    }
  }

  /** The caller's jobs of every kind. */
  list(): Promise<IJobList> {
    return this.cube.request<IJobList>('jobs');
  }

  /** Submit a job; the server validates the spec and names the bad field. */
  submit(request: ISubmitJob): Promise<IJob> {
    return this.cube.request<IJob>('jobs', {
      method: 'POST',
      body: JSON.stringify(request)
    });
  }

  get(name: string): Promise<IJob> {
    return this.cube.request<IJob>(jobPath(name));
  }

  /** Stop every replica and remove the job. */
  async remove(name: string): Promise<void> {
    await this.cube.request<null>(jobPath(name), { method: 'DELETE' });
  }

  /** A tuning job's objective per finished trial and the best so far. */
  history(name: string): Promise<IJobHistory> {
    return this.cube.request<IJobHistory>(`${jobPath(name)}/history`);
  }

  /** One prediction request to a served model. */
  predict(name: string, request: IPredictRequest): Promise<IPredictResponse> {
    return this.cube.request<IPredictResponse>(`${jobPath(name)}/predict`, {
      method: 'POST',
      body: JSON.stringify(request)
    });
  }

  /**
   * Read a replica's log, calling `onText` with each chunk as the server flushes it.
   * Resolves when the log ends (with `follow`, when the replica has finished); an
   * abort through `options.signal` resolves it too.
   */
  async streamLogs(
    name: string,
    options: ILogOptions,
    onText: (text: string) => void
  ): Promise<void> {
    const query = new URLSearchParams();
    if (options.replica) {
      query.set('replica', options.replica);
    }
    if (options.follow) {
      query.set('follow', '1');
    }
    if (options.tail !== undefined) {
      query.set('tail', String(options.tail));
    }
    const url =
      URLExt.join(
        this.cube.settings.baseUrl,
        'cube/api/v1',
        `${jobPath(name)}/logs`
      ) + (query.toString() ? `?${query}` : '');
    let response: Response;
    try {
      response = await ServerConnection.makeRequest(
        url,
        { signal: options.signal, cache: 'no-store' },
        this.cube.settings
      );
    } catch (error) {
      if (options.signal?.aborted) {
        return;
      }
      throw new CubeApiError(
        0,
        `Cannot reach the Jupyter server: ${(error as Error).message}`,
        'NetworkError',
        null
      );
    }
    if (!response.ok) {
      throw await apiError(response);
    }
    const reader = response.body?.getReader();
    if (!reader) {
      onText(await response.text());
      return;
    }
    const decoder = new TextDecoder();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) {
          break;
        }
        const text = decoder.decode(value, { stream: true });
        if (text) {
          onText(text);
        }
      }
      const rest = decoder.decode();
      if (rest) {
        onText(rest);
      }
    } catch (error) {
      if (!options.signal?.aborted) {
        throw error;
      }
    }
  }
}

function jobPath(name: string): string {
  return `jobs/${encodeURIComponent(name)}`;
}

/** The server's `{message, reason, field}` of a failed answer, as a `CubeApiError`. */
async function apiError(response: Response): Promise<CubeApiError> {
  let body: { message?: string; reason?: string; field?: string | null } = {};
  try {
    body = JSON.parse(await response.text());
  } catch {
    body = {};
  }
  return new CubeApiError(
    response.status,
    body.message || `${response.status} ${response.statusText}`.trim(),
    body.reason ?? null,
    body.field ?? null
  );
}
