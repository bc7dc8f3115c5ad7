/**
 * A read-only contents drive of executed step notebooks, so Lab opens them like any
 * notebook, in a tab, without writing a file anywhere.
 *
 * `cube-runs:{run id}/{step}.ipynb` is fetched from
 * `GET /cube/api/v1/pipelines/runs/{id}/steps/{step}/notebook`; the model says
 * `writable: false`, so Lab neither saves nor checkpoints it, and every cell is marked
 * `editable: false` / `deletable: false` so it reads as the record it is. Its times are
 * the step's, from the run. It opens in the `STEP_NOTEBOOK_FACTORY` view, without a
 * kernel (so does `StepNotebookKernel` in Lab's notebook view, should it open there):
 * running a cell again would change the record (and starting one changes the notebook's
 * metadata).
 */
import type { DocumentRegistry } from '@jupyterlab/docregistry';
import type { INotebookModel, NotebookPanel } from '@jupyterlab/notebook';
import type { Contents, ServerConnection } from '@jupyterlab/services';
import { Signal } from '@lumino/signaling';

import type { PipelineClient } from './client';
import type { IRun, IRunStep } from './types';

export const DRIVE_NAME = 'cube-runs';
/**
 * The document widget that shows executed step notebooks: a notebook view that never
 * has a kernel, apart from Lab's `Notebook` factory so extensions that expect a kernel
 * session of every notebook (ipywidgets' manager) leave it alone.
 */
export const STEP_NOTEBOOK_FACTORY = 'Executed Step Notebook';

/** The path Lab opens for a step's executed notebook. */
export function stepNotebookPath(runId: string, step: string): string {
  return `${DRIVE_NAME}:${runId}/${step}.ipynb`;
}

/** Whether `path` (as Lab names it, drive included) is an executed step notebook. */
export function isStepNotebookPath(path: string): boolean {
  return path.startsWith(`${DRIVE_NAME}:`);
}

/**
 * A step notebook's times for its Contents model: made when the step started, last
 * changed when it finished (the run's, for a step that never started).
 */
export function stepNotebookTimes(
  run: IRun,
  step: IRunStep
): { created: string; last_modified: string } {
  const created = step.started ?? run.started ?? run.created;
  return { created, last_modified: step.finished ?? created };
}

/**
 * A copy of an nbformat notebook whose cells cannot be edited or deleted in Lab, and
 * whose code cells are trusted: their outputs are the workbench's own record of the
 * user's code, run by the workbench, so rich outputs (a model's HTML) show as they did.
 */
export function readOnlyCopy(
  notebook: Record<string, unknown>
): Record<string, unknown> {
  const cells = Array.isArray(notebook.cells) ? notebook.cells : [];
  return {
    ...notebook,
    cells: cells.map(cell => {
      const c = cell as Record<string, unknown>;
      const meta = (c.metadata ?? {}) as Record<string, unknown>;
      const trust = c.cell_type === 'code' ? { trusted: true } : {};
      return {
        ...c,
        metadata: { ...meta, editable: false, deletable: false, ...trust }
      };
    })
  };
}

function readOnly(path: string): Error {
  return new Error(
    `${DRIVE_NAME}:${path} is an executed step notebook: read-only`
  );
}

export class StepNotebookDrive implements Contents.IDrive {
  constructor(
    private readonly _client: PipelineClient,
    readonly serverSettings: ServerConnection.ISettings
  ) {}

  readonly name = DRIVE_NAME;
  readonly fileChanged: Signal<Contents.IDrive, Contents.IChangedArgs> =
    new Signal(this);

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  dispose(): void {
    this._isDisposed = true;
    Signal.clearData(this);
  }

  async get(
    localPath: string,
    options?: Contents.IFetchOptions
  ): Promise<Contents.IModel> {
    const match = /^([^/]+)\/([^/]+)\.ipynb$/.exec(localPath);
    if (!match) {
      throw new Error(
        `${DRIVE_NAME}:${localPath} is not {run id}/{step}.ipynb`
      );
    }
    const [, runId, step] = match;
    const [run, notebook] = await Promise.all([
      this._client.getRun(runId),
      options?.content === false ? null : this._client.stepNotebook(runId, step)
    ]);
    const record = run.steps.find(s => s.name === step);
    if (!record) {
      throw new Error(`run ${runId} has no step named ${step}`);
    }
    return {
      name: `${step}.ipynb`,
      path: localPath,
      type: 'notebook',
      format: 'json',
      mimetype: 'application/x-ipynb+json',
      content: notebook === null ? null : readOnlyCopy(notebook),
      writable: false,
      ...stepNotebookTimes(run, record)
    };
  }

  async getDownloadUrl(localPath: string): Promise<string> {
    const [runId, file] = localPath.split('/');
    return this._client.stepNotebookUrl(runId, file.replace(/\.ipynb$/, ''));
  }

  async listCheckpoints(): Promise<Contents.ICheckpointModel[]> {
    return [];
  }

  async newUntitled(): Promise<Contents.IModel> {
    throw readOnly('');
  }

  async delete(localPath: string): Promise<void> {
    throw readOnly(localPath);
  }

  async rename(localPath: string): Promise<Contents.IModel> {
    throw readOnly(localPath);
  }

  async save(localPath: string): Promise<Contents.IModel> {
    throw readOnly(localPath);
  }

  async copy(localPath: string): Promise<Contents.IModel> {
    throw readOnly(localPath);
  }

  async createCheckpoint(
    localPath: string
  ): Promise<Contents.ICheckpointModel> {
    throw readOnly(localPath);
  }

  async restoreCheckpoint(localPath: string): Promise<void> {
    throw readOnly(localPath);
  }

  async deleteCheckpoint(localPath: string): Promise<void> {
    throw readOnly(localPath);
  }

  private _isDisposed = false;
}

/** Opens every executed step notebook without a kernel (and with no way to start one). */
export class StepNotebookKernel implements DocumentRegistry.IWidgetExtension<
  NotebookPanel,
  INotebookModel
> {
  createNew(panel: NotebookPanel): void {
    if (isStepNotebookPath(panel.context.path)) {
      // Set before the context initializes its session (the document manager does that next).
      panel.sessionContext.kernelPreference = {
        ...panel.sessionContext.kernelPreference,
        shouldStart: false,
        canStart: false,
        autoStartDefault: false
      };
    }
  }
}
