/**
 * State of the Pipeline panel for the active notebook: the server's graph of the
 * notebook's current (possibly unsaved) content, the parameter values typed, the runs,
 * and the errors to show where the user acted.
 *
 * The graph is asked for again a moment after every edit of the notebook; a run being
 * watched is polled every second until it ends; the history is fetched when the panel
 * is shown and after each run.
 */
import type { NotebookPanel } from '@jupyterlab/notebook';
import { Debouncer } from '@lumino/polling';

import { errorMessage } from '../common/api';
import { fieldError, IFieldError } from '../common/fieldError';
import { PolledModel } from '../common/polledModel';
import { RequestState } from '../common/request';
import { PipelineClient } from './client';
import { parametersToSend, parameterText } from './format';
import type {
  IParameter,
  IPipeline,
  IPipelineConfig,
  IRun,
  RunStatus,
  RunTarget
} from './types';

/** Wait after the last edit before asking the server for the graph again (ms). */
export const GRAPH_DEBOUNCE = 400;
/** Poll interval of a run that has not ended (ms). */
export const RUN_POLL_INTERVAL = 1000;

const ENDED: ReadonlySet<RunStatus> = new Set<RunStatus>([
  'succeeded',
  'failed',
  'cancelled'
]);

/** Whether a run has ended. */
export function isEnded(run: IRun): boolean {
  return ENDED.has(run.status);
}

export { parameterText } from './format';

/**
 * The panel's model; its poll follows the selected run while it has not ended (shown or
 * not: the run goes on either way).
 */
export class PipelineModel extends PolledModel {
  constructor(readonly client: PipelineClient) {
    super({
      name: 'cube-jupyter:pipeline-run',
      interval: RUN_POLL_INTERVAL,
      whileHidden: true
    });
    this._graphDebouncer = new Debouncer(
      () => this.refreshGraph(),
      GRAPH_DEBOUNCE
    );
  }

  /** The notebook the panel shows, if any. */
  get notebook(): NotebookPanel | null {
    return this._notebook;
  }

  /** Its path in the Jupyter root. */
  get path(): string | null {
    return this._notebook?.context.path ?? null;
  }

  get graph(): IPipeline | null {
    return this._graph;
  }

  /** Why the graph could not be built (e.g. a cycle), with the field at fault. */
  get graphError(): IFieldError | null {
    return this._graphError;
  }

  get graphLoading(): boolean {
    return this._graphLoading;
  }

  get config(): IPipelineConfig | null {
    return this._config;
  }

  /** Run targets the server offers; local until it says more. */
  get targets(): readonly RunTarget[] {
    return this._config?.targets ?? ['local'];
  }

  get target(): RunTarget {
    return this.targets.includes(this._target) ? this._target : 'local';
  }

  set target(value: RunTarget) {
    this._target = value;
    this.stateChanged.emit();
  }

  get noCache(): boolean {
    return this._noCache;
  }

  set noCache(value: boolean) {
    this._noCache = value;
    this.stateChanged.emit();
  }

  /** The caller's runs of this notebook, newest first. */
  get runs(): readonly IRun[] {
    const path = this.path;
    return this._runs.filter(run => run.path === path);
  }

  get historyError(): string | null {
    return this._historyError;
  }

  /** The run whose steps are shown (the one started last, or picked from history). */
  get selectedRun(): IRun | null {
    return this._runs.find(run => run.id === this._selectedRunId) ?? null;
  }

  /** Starting a run; its error is a 400 naming e.g. `parameters.lr`. */
  readonly starting = new RequestState<IRun>(() => this.stateChanged.emit());

  /** The error of an action on the selected run (cancel, opening a step notebook). */
  get actionError(): string | null {
    return this._actionError;
  }

  /** The text typed for a parameter, or its default. */
  parameterValue(parameter: IParameter): string {
    return this._texts().get(parameter.name) ?? parameterText(parameter);
  }

  setParameterValue(name: string, text: string): void {
    this._texts().set(name, text);
    if (this.starting.error?.field?.startsWith('parameters')) {
      this.starting.clear();
    }
    this.stateChanged.emit();
  }

  /** Follow another notebook (or none). */
  setNotebook(panel: NotebookPanel | null): void {
    if (panel === this._notebook) {
      return;
    }
    const old = this._notebook;
    if (old && !old.isDisposed) {
      old.context.model.contentChanged.disconnect(this._onContentChanged, this);
      old.context.pathChanged.disconnect(this._onPathChanged, this);
      old.disposed.disconnect(this._onNotebookDisposed, this);
    }
    this._notebook = panel;
    this._graph = null;
    this._graphError = null;
    this.starting.clear();
    this._actionError = null;
    this._selectedRunId = this.runs[0]?.id ?? null;
    if (panel) {
      panel.context.model.contentChanged.connect(this._onContentChanged, this);
      panel.context.pathChanged.connect(this._onPathChanged, this);
      panel.disposed.connect(this._onNotebookDisposed, this);
      void panel.context.ready.then(() => {
        if (this._notebook === panel) {
          void this.refreshGraph();
        }
      });
    }
    this.stateChanged.emit();
    this._watchSelectedRun();
  }

  /** Use the config already fetched (by the availability probe). */
  setConfig(config: IPipelineConfig): void {
    this._config = config;
    this.stateChanged.emit();
  }

  async loadConfig(): Promise<void> {
    if (this._config) {
      return;
    }
    try {
      this.setConfig(await this.client.config());
    } catch {
      // Only local runs are offered, and cells not edited, until the server answers.
    }
  }

  /** Ask the server for the graph of the notebook's current content. */
  async refreshGraph(): Promise<void> {
    const panel = this._notebook;
    if (!panel || panel.isDisposed || !panel.context.isReady || !this.visible) {
      return; // Asked again when the panel is shown.
    }
    const request = ++this._graphRequest;
    this._graphLoading = true;
    this.stateChanged.emit();
    try {
      const graph = await this.client.graph(
        panel.context.path,
        panel.context.model.toJSON()
      );
      if (request === this._graphRequest) {
        this._graph = graph;
        this._graphError = null;
      }
    } catch (error) {
      if (request === this._graphRequest) {
        this._graphError = fieldError(error);
      }
    } finally {
      if (request === this._graphRequest) {
        this._graphLoading = false;
        this.stateChanged.emit();
      }
    }
  }

  async refreshHistory(): Promise<void> {
    try {
      const { runs } = await this.client.listRuns();
      this._runs = runs;
      this._historyError = null;
      if (this._selectedRunId === null) {
        this._selectedRunId = this.runs[0]?.id ?? null;
      }
    } catch (error) {
      this._historyError = errorMessage(error);
    }
    this.stateChanged.emit();
    this._watchSelectedRun();
  }

  /** Show this run's steps (and follow it while it runs). */
  selectRun(id: string): void {
    this._selectedRunId = id;
    this._actionError = null;
    this.stateChanged.emit();
    this._watchSelectedRun();
  }

  /**
   * Start a run of the notebook as it is on screen, with the typed parameters. The
   * content goes with the request and the notebook is not saved: running never changes
   * the file (nor its kernel metadata), and unsaved edits stay unsaved. Returns the run,
   * or null (see `starting.error`).
   */
  async startRun(target: RunTarget = this.target): Promise<IRun | null> {
    const panel = this._notebook;
    if (!panel) {
      return null;
    }
    this._actionError = null;
    const run = await this.starting.run(async () => {
      return this.client.startRun({
        path: panel.context.path,
        parameters: parametersToSend(
          this._graph?.parameters ?? [],
          this._texts()
        ),
        target,
        no_cache: this._noCache,
        notebook: panel.context.model.toJSON()
      });
    });
    if (run) {
      this._upsert(run);
      this._selectedRunId = run.id;
      this.stateChanged.emit();
      this._watchSelectedRun();
    }
    return run;
  }

  /** Ask the server to cancel the selected run. */
  async cancelRun(): Promise<void> {
    const run = this.selectedRun;
    if (!run) {
      return;
    }
    try {
      this._upsert(await this.client.cancelRun(run.id));
    } catch (error) {
      this._actionError = errorMessage(error);
    }
    this.stateChanged.emit();
  }

  /** Ask the server to resume the selected run, then follow it again. */
  async resumeRun(): Promise<void> {
    const run = this.selectedRun;
    if (!run) {
      return;
    }
    this._actionError = null;
    try {
      this._upsert(await this.client.resumeRun(run.id));
      this._watchSelectedRun();
    } catch (error) {
      this._actionError = errorMessage(error);
    }
    this.stateChanged.emit();
  }

  /** Show an error about the selected run (e.g. a step notebook failed to open). */
  setActionError(message: string | null): void {
    this._actionError = message;
    this.stateChanged.emit();
  }

  /** Tell the panel to draw again (the notebook's cells changed). */
  notify(): void {
    this.stateChanged.emit();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.setNotebook(null);
    this._graphDebouncer.dispose();
    super.dispose();
  }

  /** Shown: the config (once), the history and the graph are fetched then. */
  protected onVisibilityChanged(): void {
    if (this.visible) {
      void this.loadConfig();
      void this.refreshHistory();
      void this.refreshGraph();
    }
  }

  /** The parameter values typed for this notebook (kept while others are shown). */
  private _texts(): Map<string, string> {
    const path = this.path ?? '';
    let texts = this._parameterTexts.get(path);
    if (!texts) {
      texts = new Map();
      this._parameterTexts.set(path, texts);
    }
    return texts;
  }

  private _upsert(run: IRun): void {
    const index = this._runs.findIndex(r => r.id === run.id);
    this._runs =
      index < 0
        ? [run, ...this._runs]
        : this._runs.map((r, i) => (i === index ? run : r));
  }

  /** Poll the selected run while it has not ended. */
  private _watchSelectedRun(): void {
    const run = this.selectedRun;
    if (run && !isEnded(run)) {
      if (!this.polling) {
        this.startPolling();
      }
    } else {
      this.stopPolling();
    }
  }

  /** Fetch the selected run; once it has ended, stop and fetch the history. */
  protected async poll(): Promise<void> {
    const run = this.selectedRun;
    if (!run || isEnded(run)) {
      return;
    }
    try {
      this._upsert(await this.client.getRun(run.id));
      this._actionError = null;
    } catch (error) {
      this._actionError = errorMessage(error);
    }
    this.stateChanged.emit();
    const now = this.selectedRun;
    if (!now || isEnded(now)) {
      this.stopPolling();
      if (this.visible) {
        void this.refreshHistory();
      }
    }
  }

  private _onContentChanged(): void {
    this.stateChanged.emit();
    this._graphDebouncer.invoke().catch(() => undefined);
  }

  private _onPathChanged(): void {
    this._selectedRunId = this.runs[0]?.id ?? null;
    this.stateChanged.emit();
    void this.refreshGraph();
  }

  private _onNotebookDisposed(): void {
    this.setNotebook(null);
  }

  private _notebook: NotebookPanel | null = null;
  private _graph: IPipeline | null = null;
  private _graphError: IFieldError | null = null;
  private _graphLoading = false;
  private _graphRequest = 0;
  private _graphDebouncer: Debouncer;
  private _config: IPipelineConfig | null = null;
  private _target: RunTarget = 'local';
  private _noCache = false;
  private _parameterTexts = new Map<string, Map<string, string>>();
  private _runs: IRun[] = [];
  private _historyError: string | null = null;
  private _selectedRunId: string | null = null;
  private _actionError: string | null = null;
}
