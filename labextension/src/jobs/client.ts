/**
 * Typed client of `/cube/api/v1/jobs`, on top of the workbench's one HTTP client; the
 * log stream reads the chunked text answer as it arrives.
 */
import { CubeClient, Query, withQuery } from '../common/api';
import type {
  IJob,
  IJobHistory,
  IJobList,
  IJobRef,
  IJobsConfig,
  IPredictRequest,
  IPredictResponse,
  ISpecFile,
  ISpecYaml,
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

  /** What the launch forms offer: frameworks and roles, formats, algorithms. */
  config(): Promise<IJobsConfig> {
    return this.cube.request<IJobsConfig>('jobs/config');
  }

  /** The caller's jobs of every kind, or (admins only) every user's. */
  list(allUsers = false): Promise<IJobList> {
    return this.cube.request<IJobList>(withQuery('jobs', { all: allUsers }));
  }

  /** Submit a job; the server validates the spec and names the bad field. */
  submit(request: ISubmitJob): Promise<IJob> {
    return this.cube.send<IJob>('jobs', 'POST', request);
  }

  /** A YAML job spec file (under the caller's root) as its kind and spec. */
  readSpecFile(path: string): Promise<ISpecFile> {
    return this.cube.request<ISpecFile>(withQuery('jobs/specs/file', { path }));
  }

  /** A spec as YAML text, the way the server writes spec files. */
  renderSpec(request: ISubmitJob): Promise<ISpecYaml> {
    return this.cube.send<ISpecYaml>('jobs/specs/yaml', 'POST', request);
  }

  /** Stop every replica and remove the job. */
  async remove(job: IJobRef): Promise<void> {
    await this.cube.request<null>(jobPath(job), { method: 'DELETE' });
  }

  /** A tuning job's objective per finished trial and the best so far. */
  history(job: IJobRef): Promise<IJobHistory> {
    return this.cube.request<IJobHistory>(jobPath(job, '/history'));
  }

  /** One prediction request to a served model. */
  predict(job: IJobRef, request: IPredictRequest): Promise<IPredictResponse> {
    return this.cube.send<IPredictResponse>(
      jobPath(job, '/predict'),
      'POST',
      request
    );
  }

  /**
   * Read a replica's log, calling `onText` with each chunk as the server flushes it.
   * Resolves when the log ends (with `follow`, when the replica has finished); an
   * abort through `options.signal` resolves it too.
   */
  async streamLogs(
    job: IJobRef,
    options: ILogOptions,
    onText: (text: string) => void
  ): Promise<void> {
    const { replica, follow, tail, signal } = options;
    let response: Response;
    try {
      response = await this.cube.fetch(
        jobPath(job, '/logs', { replica, follow, tail }),
        { signal, cache: 'no-store' }
      );
    } catch (error) {
      if (signal?.aborted) {
        return;
      }
      throw error;
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
      if (!signal?.aborted) {
        throw error;
      }
    }
  }
}

/** `jobs/{name}{suffix}`, with `?user=` for another user's job and the `query`. */
function jobPath(job: IJobRef, suffix = '', query: Query = {}): string {
  return withQuery(`jobs/${encodeURIComponent(job.name)}${suffix}`, {
    ...query,
    user: job.user
  });
}
