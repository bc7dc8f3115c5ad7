/**
 * Typed client of `/cube/api/v1/pipelines`, on top of the workbench's one HTTP client.
 */
import { URLExt } from '@jupyterlab/coreutils';

import type { CubeClient } from '../common/api';
import type {
  IPipeline,
  IPipelineConfig,
  IRun,
  IRunList,
  IStartRun
} from './types';

export class PipelineClient {
  constructor(readonly cube: CubeClient) {}

  /** Which run targets this server offers (cluster only on the kubernetes backend). */
  config(): Promise<IPipelineConfig> {
    return this.cube.request<IPipelineConfig>('pipelines/config');
  }

  /**
   * The pipeline of a notebook. With `notebook` (nbformat JSON) the server parses that
   * content instead of the saved file, so unsaved tag edits show at once.
   */
  graph(path: string, notebook?: unknown): Promise<IPipeline> {
    const body =
      notebook === undefined
        ? { path }
        : { path, notebook: withoutOutputs(notebook) };
    return this.cube.request<IPipeline>('pipelines/graph', {
      method: 'POST',
      body: JSON.stringify(body)
    });
  }

  /** The caller's runs, newest first. */
  listRuns(): Promise<IRunList> {
    return this.cube.request<IRunList>('pipelines/runs');
  }

  /**
   * Start a run of the notebook at `request.path`: of `request.notebook` (nbformat JSON)
   * when given, so what is on screen runs without the file being saved.
   */
  startRun(request: IStartRun): Promise<IRun> {
    const body =
      request.notebook === undefined
        ? request
        : { ...request, notebook: withoutOutputs(request.notebook) };
    return this.cube.request<IRun>('pipelines/runs', {
      method: 'POST',
      body: JSON.stringify(body)
    });
  }

  /** One run with its per-step state. */
  getRun(id: string): Promise<IRun> {
    return this.cube.request<IRun>(runPath(id));
  }

  /** Cancel a run; the answer is the run as it is now. */
  cancelRun(id: string): Promise<IRun> {
    return this.cube.request<IRun>(runPath(id), { method: 'DELETE' });
  }

  /** Run a failed or interrupted run on from where it stopped (completed steps kept). */
  resumeRun(id: string): Promise<IRun> {
    return this.cube.request<IRun>(`${runPath(id)}/resume`, { method: 'POST' });
  }

  /** The executed notebook of one step of a run (nbformat JSON). */
  stepNotebook(id: string, step: string): Promise<Record<string, unknown>> {
    return this.cube.request<Record<string, unknown>>(
      stepNotebookPath(id, step)
    );
  }

  /** The address of that notebook, for a download link. */
  stepNotebookUrl(id: string, step: string): string {
    return URLExt.join(
      this.cube.settings.baseUrl,
      'cube/api/v1',
      stepNotebookPath(id, step)
    );
  }
}

function runPath(id: string): string {
  return `pipelines/runs/${encodeURIComponent(id)}`;
}

function stepNotebookPath(id: string, step: string): string {
  return `${runPath(id)}/steps/${encodeURIComponent(step)}/notebook`;
}

/**
 * Notebook content as the server needs it for a graph or a run: the cells' sources and tags.
 * Outputs (plots, tables) are left out, and so are execution counts: they change nothing there,
 * and a notebook's outputs can be far larger than the request limit.
 */
export function withoutOutputs(notebook: unknown): unknown {
  if (typeof notebook !== 'object' || notebook === null) {
    return notebook; // the server names what is wrong with it
  }
  const content = notebook as { cells?: unknown };
  if (!Array.isArray(content.cells)) {
    return notebook;
  }
  return {
    ...content,
    cells: content.cells.map(cell => {
      const c = cell as Record<string, unknown>;
      return c?.cell_type === 'code'
        ? { ...c, outputs: [], execution_count: null }
        : cell;
    })
  };
}
