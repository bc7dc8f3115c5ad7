/**
 * Shapes of the pipeline documents served under `/cube/api/v1/pipelines`. They mirror
 * the wire format (`Pipeline.to_dict()`, `RunRecord.to_dict()`); every rule behind the
 * values lives on the server.
 */
import type { ITagVocabulary } from './tags';

/** Per-step resources and behaviour from `image:`, `cpu:`, `gpu:N`, ... tags. */
export interface IStepOptions {
  image: string | null;
  cpu: string | null;
  memory: string | null;
  gpu: number;
  retries: number;
  timeout: number | null;
  /** False: the step runs every time (`cache:disabled`). */
  cache: boolean;
  /** The step pod's annotations and labels (Kale's `annotation:` and `label:` tags). */
  annotations: Record<string, string>;
  labels: Record<string, string>;
}

/** One pipeline step: the cells it runs and what flows in and out. */
export interface IStep {
  name: string;
  /** Indices of the notebook's cells (all cells, markdown included). */
  cells: number[];
  source: string[];
  after: string[];
  inputs: string[];
  outputs: string[];
  /** String literals its code passes to calls: the data files it may read. */
  files: string[];
  options: IStepOptions;
}

/** A dependency between two steps and the variables passed along it. */
export interface IEdge {
  upstream: string;
  downstream: string;
  variables: string[];
}

/** A papermill parameter from the `parameters` cell. */
export interface IParameter {
  name: string;
  default: unknown;
  default_source: string;
}

/**
 * Something about the notebook to see before a run (an ignored tag, code no step runs, a
 * value two branches may both change), and the cell it is about, if any: its index over
 * all the notebook's cells, as in `IStep.cells`.
 */
export interface IGraphWarning {
  message: string;
  cell: number | null;
}

/** Body of `POST /pipelines/graph`. */
export interface IPipeline {
  name: string;
  path: string;
  steps: IStep[];
  edges: IEdge[];
  imports: string[];
  functions: string[];
  parameters: IParameter[];
  parameters_source: string;
  metrics: string[];
  kernel_name: string;
  /** Sorted by cell, the notebook-wide ones (cell null) first. */
  warnings: IGraphWarning[];
}

/** Where a run executes. */
export type RunTarget = 'local' | 'cluster' | 'kfp';

/** Body of `GET /pipelines/config`. */
export interface IPipelineConfig {
  backend: string;
  targets: RunTarget[];
  /** The cell tags the server reads, for the cell editor. */
  tags: ITagVocabulary;
}

export type RunStatus =
  'queued' | 'running' | 'succeeded' | 'failed' | 'cancelled';

export type StepStatus =
  | 'pending'
  | 'queued'
  | 'running'
  | 'succeeded'
  | 'failed'
  | 'cached'
  | 'skipped'
  | 'cancelled';

/** One step of a run. */
export interface IRunStep {
  name: string;
  status: StepStatus;
  started: string | null;
  finished: string | null;
  duration: number | null;
  attempts: number;
  cache_hit: boolean;
  error: unknown;
  notebook: string | null;
  /**
   * The data files (relative to the notebook's folder) whose contents are part of the
   * step's cache key in this run.
   */
  files: string[];
  /** The GPU ids a local `gpu:N` step was given (`CUDA_VISIBLE_DEVICES`), held while it runs. */
  gpus: string[];
  /** Why a `queued` step waits (free GPUs, the GPU quota); null otherwise. */
  reason: string | null;
}

/** One pipeline run, as `GET /pipelines/runs/{id}` returns it. */
export interface IRun {
  id: string;
  user: string;
  path: string;
  pipeline: string;
  status: RunStatus;
  target: RunTarget;
  parameters: Record<string, unknown>;
  store: string | null;
  created: string;
  started: string | null;
  finished: string | null;
  error: unknown;
  metrics: Record<string, unknown>;
  /** A failed, cancelled or interrupted local run with steps left: it can resume. */
  resumable: boolean;
  /** Where the run can be seen in its engine's own UI (a Kubeflow Pipelines run), if anywhere. */
  link?: string | null;
  steps: IRunStep[];
}

/** Body of `GET /pipelines/runs`. */
export interface IRunList {
  user: string;
  runs: IRun[];
}

/** What `POST /pipelines/runs` takes. */
export interface IStartRun {
  path: string;
  parameters: Record<string, unknown>;
  target: RunTarget;
  no_cache?: boolean;
  /** The notebook's content to run instead of the saved file (which is left as it is). */
  notebook?: unknown;
}
