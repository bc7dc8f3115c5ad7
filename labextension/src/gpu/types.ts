/**
 * What `GET /cube/api/v1/gpu` answers: `GpuReport.to_dict()` of `cube_jupyter/gpu/model.py`,
 * mirrored field for field. A value the source could not read is `null`, never a made-up 0.
 */

/** Where the readings came from; `none` when no source sees a GPU. */
export type GpuSource = 'nvml' | 'prometheus' | 'none';

/** A process holding memory on a GPU, and what it is to the user when the server can tell. */
export interface IGpuProcess {
  pid: number;
  used_memory_mib: number | null;
  name: string | null;
  kernel_id: string | null;
  notebook_path: string | null;
  server: string | null;
  /** Why the process could not be attributed (another user's, another PID namespace). */
  note: string | null;
  /** The job replica, trial, served model or pipeline step it is (or descends from). */
  workload: IGpuWorkload | null;
}

/** A user's job, tuning job, served model or pipeline step that runs GPU processes. */
export interface IGpuWorkload {
  user: string;
  kind: 'job' | 'tuning job' | 'model' | 'step';
  /** The job or model, or the pipeline run's id. */
  name: string;
  /** The replica (`worker-0`), trial or step. */
  part: string;
  /** How people read it: `job toy-ddp, worker-0`. */
  label: string;
  /** Its history's key: `job:<user>/<name>` or `step:<run id>/<step>`. */
  series: string;
}

/** GPU use of one job (all its replicas) or pipeline step, on this machine. */
export interface IWorkloadGpu {
  workload: IGpuWorkload;
  pids: number[];
  gpus: string[];
  memory_used_mib: number;
  utilization_pct: number | null;
}

/** A MIG slice of a GPU. */
export interface IMigInstance {
  gpu_instance_id: number;
  compute_instance_id: number | null;
  uuid: string | null;
  name: string | null;
  memory_used_mib: number | null;
  memory_total_mib: number | null;
}

/** One GPU at one instant. */
export interface IGpuDevice {
  index: number;
  uuid: string;
  name: string | null;
  host: string | null;
  utilization_pct: number | null;
  memory_used_mib: number | null;
  memory_total_mib: number | null;
  temperature_c: number | null;
  power_w: number | null;
  sm_clock_mhz: number | null;
  namespace: string | null;
  pod: string | null;
  container: string | null;
  processes: IGpuProcess[];
  mig: IMigInstance[];
}

/** The GPUs one pod holds (kubernetes source). */
export interface IPodGpu {
  namespace: string;
  pod: string;
  kind: 'notebook' | 'job' | 'other';
  gpus: string[];
  utilization_pct: number | null;
  memory_used_mib: number | null;
  memory_total_mib: number | null;
  owner: string | null;
}

/** GPU use of one Jupyter kernel of this server. */
export interface IKernelGpu {
  kernel_id: string;
  notebook_path: string | null;
  server: string | null;
  pids: number[];
  gpus: string[];
  memory_used_mib: number;
  utilization_pct: number | null;
}

export type SeriesMetric = 'utilization_pct' | 'memory_used_mib';

/**
 * History of one metric of one GPU (`gpu:<uuid>`), pod (`pod:<namespace>/<pod>`), kernel
 * (`kernel:<id>`), job (`job:<user>/<name>`) or pipeline step (`step:<run id>/<step>`).
 */
export interface ISeries {
  key: string;
  metric: SeriesMetric;
  /** `[unix seconds, value]`, oldest first. */
  points: [number, number][];
}

/** What holds the user's GPUs against the quota. */
export interface IQuotaHolder {
  kind: string;
  name: string;
  gpus: number;
}

/**
 * A job or notebook server of the user's waiting in the queue for the GPUs it asks for (it holds
 * none yet).
 */
export interface IQueuedGpuJob {
  kind: 'job' | 'notebook';
  name: string;
  gpus: number;
  /** 1-based place in the queue; null where Kueue does not say. */
  position: number | null;
  /** What it waits for. */
  reason: string;
}

/**
 * GPUs held against `gpu_quota_per_user`; `limit` null means no limit. `queued` is what the user's
 * queued jobs and servers ask for beside it (counted toward nothing until admitted).
 */
export interface IGpuQuota {
  used: number;
  limit: number | null;
  holders: IQuotaHolder[];
  queued: number;
  queued_jobs: IQueuedGpuJob[];
}

/** A kernel or pod holding GPU memory at 0% utilization for longer than allowed. */
export interface IIdleWarning {
  /**
   * `kernel:<id>`, `pod:<namespace>/<pod>`, `job:<user>/<name>` or `step:<run>/<step>`:
   * the same key for the whole idle episode.
   */
  key: string;
  gpu: string;
  idle_seconds: number;
  message: string;
  kernel_id: string | null;
  notebook_path: string | null;
  pod: string | null;
  /** `job toy-ddp`, `step <run>, train`: a job, model or pipeline step of this machine. */
  workload?: string | null;
  /**
   * Seconds until the culler stops what holds the GPU (its notebook server, or a training
   * job where the admin opted in); null when nothing will stop it.
   */
  stops_in_seconds?: number | null;
}

/** The whole answer of `/gpu`. */
export interface IGpuReport {
  source: GpuSource;
  /** False with `message` ("No GPU visible: ...") when the source sees none: a state, not an error. */
  available: boolean;
  timestamp: number;
  message: string | null;
  devices: IGpuDevice[];
  pods: IPodGpu[];
  kernels: IKernelGpu[];
  workloads: IWorkloadGpu[];
  history: ISeries[];
  quota: IGpuQuota | null;
  idle: IIdleWarning[];
  idle_after_seconds: number | null;
  interval_seconds: number | null;
  user?: string | null;
  is_admin?: boolean;
}
