/**
 * Tokens other plugins use to reach the Notebook Servers panel without importing it.
 */
import { Token } from '@lumino/coreutils';
import type { IDisposable } from '@lumino/disposable';

/** Command ids; part of the public surface (command palette, shortcuts). */
export const CommandIDs = {
  open: 'cube:open-notebook-servers',
  create: 'cube:create-notebook-server',
  refresh: 'cube:refresh-notebook-servers',
  /** In a user server: open the central workbench in a new tab. */
  workbench: 'cube:open-workbench'
} as const;

/** Options for showing the panel. */
export interface IShowOptions {
  /** Put the keyboard focus in the create form's name field. */
  focusCreate?: boolean;
}

/** What the `notebook-servers` plugin offers to other plugins. */
export interface INotebookServers {
  /**
   * Resolves to whether this Jupyter server spawns notebook servers: the central
   * workbench does; a user server it started (which serves pipelines, jobs and GPU) and a
   * server without the server extension do not, and get no panel, palette items or card.
   */
  readonly available: Promise<boolean>;
  /** Reveal (and activate) the panel in the left sidebar. */
  show(options?: IShowOptions): void;
  /** Fetch the server list and profiles again now. */
  refresh(): Promise<void>;
}

export const INotebookServers = new Token<INotebookServers>(
  'cube-jupyter:INotebookServers',
  'The Notebook Servers sidebar panel.'
);

/** Command ids of the Pipeline panel. */
export const PipelineCommandIDs = {
  open: 'cube:open-pipeline',
  run: 'cube:run-as-pipeline',
  /** The pipeline graph, large, in the main area. */
  openGraph: 'cube:open-pipeline-graph',
  /** Show one run in the panel, with its notebook: `{path, run}` (not in the palette). */
  openRun: 'cube:open-pipeline-run'
} as const;

/** Command ids of the GPU panel. */
export const GpuCommandIDs = {
  open: 'cube:open-gpu',
  refresh: 'cube:refresh-gpu'
} as const;

/** Command ids of the Jobs panel. */
export const JobsCommandIDs = {
  open: 'cube:open-jobs',
  newTraining: 'cube:new-training-job',
  newTuning: 'cube:new-tuning-job',
  newServing: 'cube:new-serving-job',
  refresh: 'cube:refresh-jobs'
} as const;

/** What the `jobs` plugin offers to other plugins. */
export interface IJobsPanel {
  /** Resolves to whether this Jupyter server offers the jobs API. */
  readonly available: Promise<boolean>;
  /** Open (and activate) the Jobs panel; with `kind`, at that kind's launch form. */
  open(kind?: 'training' | 'tuning' | 'serving'): Promise<void>;
  /** Show one job (its conditions, logs, trials or endpoint). */
  showJob(name: string): Promise<void>;
  /** Fetch the job list again now. */
  refresh(): Promise<void>;
}

export const IJobsPanel = new Token<IJobsPanel>(
  'cube-jupyter:IJobsPanel',
  'The Jobs panel: training, tuning and serving jobs.'
);

/** `[unix seconds, value]` points of a GPU history series, oldest first. */
export type GpuPoints = readonly (readonly [number, number])[];

/**
 * What the `gpu` plugin offers other panels: the GPU memory history of a job
 * (`job:<user>/<name>`) or pipeline step (`step:<run id>/<step>`), polled while watched.
 */
export interface IGpuUsage {
  /**
   * Call `changed` with the series' GPU memory (MiB) points as they are read (every few
   * seconds) until the returned handle is disposed; no points: nothing of it holds a GPU.
   */
  watchMemory(
    series: string,
    changed: (points: GpuPoints) => void
  ): IDisposable;
}

export const IGpuUsage = new Token<IGpuUsage>(
  'cube-jupyter:IGpuUsage',
  'The GPU memory history of jobs and pipeline steps.'
);
