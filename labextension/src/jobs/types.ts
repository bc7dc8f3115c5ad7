/**
 * What `/cube/api/v1/jobs` answers (see server_ext/openapi.yaml, `Job`); the panel
 * shows these as they come and never decides a job's state itself.
 */

export type JobKind = 'training' | 'tuning' | 'serving';

/** The last true condition, as the Kubeflow operators report it; serving adds Ready; Queued: waiting
 * in the local training queue or Kueue's; Admitted: Kueue let it go, no replica runs yet. */
export type JobPhase =
  | 'Queued'
  | 'Admitted'
  | 'Created'
  | 'Running'
  | 'Restarting'
  | 'Succeeded'
  | 'Failed'
  | 'Ready'
  | 'Deleting';

export type ReplicaState = 'Pending' | 'Running' | 'Succeeded' | 'Failed';

export type TrialState =
  'Pending' | 'Running' | 'Succeeded' | 'Failed' | 'Pruned';

export interface IJobCondition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason: string;
  message: string;
  /** Unix seconds. */
  last_transition_time: number;
}

export interface IJobReplica {
  /** `worker-1`: the key of its log stream. */
  name: string;
  role: string;
  index: number;
  state: ReplicaState;
  gpus: number;
  exit_code: number | null;
  pod: string | null;
  pid: number | null;
  message: string | null;
}

export interface IJobTrial {
  name: string;
  parameters: Record<string, unknown>;
  state: TrialState;
  metrics: Record<string, number>;
  objective: number | null;
}

/** Why a job failed, cause first: read from the failed replica's traceback. */
export interface IJobError {
  /** One line: the exception's type and message. */
  cause: string;
  /** The user's own frames, oldest first, as Python printed them. */
  frames: string[];
  /** The whole traceback as logged, the workbench's frames too. */
  traceback: string;
  /** What ended, e.g. `PyTorchJob x has failed: replica worker-0 exited with code 1`. */
  context: string;
  /** Whose log holds the traceback. */
  replica: string | null;
}

export interface IJob {
  name: string;
  kind: JobKind;
  user: string;
  phase: JobPhase;
  /** Unix seconds. */
  created: number;
  /** Training: the framework; serving: the model format. */
  framework: string | null;
  backend: 'local' | 'kubernetes';
  /** Where its objects are, on a cluster. */
  namespace?: string | null;
  conditions: IJobCondition[];
  replicas: IJobReplica[];
  gpus: number;
  /** Why it failed (cause first) or is pending. */
  message: string | null;
  /** The traceback that failed it, when the failed replica's log has one. */
  error: IJobError | null;
  /** The normalized spec it was submitted with. */
  spec: Record<string, unknown>;
  trials: IJobTrial[];
  best_trial: string | null;
  endpoint: string | null;
  completed: number | null;
  /** While Queued: its place in the queue, what it waits for, and on the cluster its LocalQueue. */
  queue: IQueuePlace | null;
  finished: boolean;
}

export interface IQueuePlace {
  /** 1-based; null where Kueue does not say. */
  position: number | null;
  reason: string;
  /** Kueue's LocalQueue on the cluster; null locally. */
  queue: string | null;
}

export interface IJobList {
  user: string;
  is_admin: boolean;
  jobs: IJob[];
}

/** What a launch form sends: the server parses and validates `spec`. */
export interface ISubmitJob {
  kind: JobKind;
  spec: Record<string, unknown>;
}

/** `GET /jobs/specs/file`: a YAML spec file, its kind told by its keys, the spec as written. */
export interface ISpecFile {
  path: string;
  kind: JobKind;
  spec: Record<string, unknown>;
}

/** `POST /jobs/specs/yaml`: a spec as the YAML a spec file holds. */
export interface ISpecYaml {
  kind: JobKind;
  yaml: string;
}

export interface IHistoryPoint {
  number: number;
  trial: string;
  objective: number;
  /** The best objective reached up to and including this trial. */
  best: number;
}

/** A tuning job's optimization history. */
export interface IJobHistory {
  name: string;
  goal: 'minimize' | 'maximize';
  best_trial: string | null;
  points: IHistoryPoint[];
}

export type PredictProtocol = 'v1' | 'v2';

export interface IPredictRequest {
  inputs: unknown;
  protocol: PredictProtocol;
}

export interface IPredictResponse {
  name: string;
  protocol: PredictProtocol;
  predictions: unknown;
}

/** Which job an action is on: `user` only when it is another user's (an admin's view). */
export interface IJobRef {
  name: string;
  user?: string;
}

/** A choice a form offers: the value sent and how it reads. */
export interface IChoice {
  value: string;
  label: string;
}

/** One replica type of a framework's operator, and how many replicas it may have. */
export interface IFrameworkRole {
  /** As the operator names it (`Master`), and as the spec's `replicas` key (`master`). */
  name: string;
  key: string;
  /** The count the form starts with. */
  default: number;
  /** The fewest and most a job may have (`max` null: no limit). */
  min: number;
  max: number | null;
  /** Whether every job needs at least one. */
  required: boolean;
}

export interface IFramework extends IChoice {
  roles: IFrameworkRole[];
}

/** A way to give the code a training job runs, with an example and how it is read. */
export interface ICodeKind extends IChoice {
  example: string;
  hint: string;
}

export interface IScaleMetric extends IChoice {
  /** Whether its target is a utilization percentage. */
  percent: boolean;
}

/**
 * Body of `GET /jobs/config`: what the launch forms offer, from the lists the server
 * checks specs against. `defaults` are the values a new form starts with.
 */
/** One thing that may or may not run here: what it becomes, or why it cannot. */
export interface IJobUsable {
  available: boolean;
  /** What a job becomes: a kind (`TrainJob`, `PyTorchJob`, `Experiment`, ...) or `processes`. */
  via: string | null;
  /** Why it cannot run, naming the missing CRD; null when it can. */
  reason: string | null;
}

/** What this workbench can run: locally everything, on a cluster what its operators allow. */
export interface IJobsAvailability {
  backend: 'local' | 'kubernetes';
  /** `auto`, `trainer-v2` or `training-operator-v1` (CubeJobs.training_api). */
  training_api: string;
  /** Whether the cluster was asked yet which job kinds it serves. */
  discovered: boolean;
  /** Each job kind the cluster was asked about, and whether it serves it. */
  served: Record<string, boolean>;
  training: Record<string, IJobUsable>;
  tuning: IJobUsable;
  serving: IJobUsable;
  /** Kueue's queues and priorities a user may pick for one job (cluster only), and the admin's
   * queue of each kind (null: not queued). */
  queues: {
    offered: string[];
    priorities: string[];
    defaults: { training: string | null; tuning: string | null };
  };
}

export interface IJobsConfig {
  /** Absent from servers older than the Trainer v2 support. */
  availability?: IJobsAvailability;
  training: {
    frameworks: IFramework[];
    code_kinds: ICodeKind[];
    restart_policies: string[];
    defaults: { framework: string; code_kind: string; restart_policy: string };
  };
  tuning: {
    algorithms: IChoice[];
    objective_types: string[];
    parameter_types: string[];
    /**
     * The parameter types given as a list of values (the others are ranges), and what
     * the values may be: numbers, or any text.
     */
    value_types: Record<string, 'number' | 'any'>;
    defaults: {
      algorithm: string;
      objective_type: string;
      parameter_type: string;
    };
  };
  serving: {
    model_formats: string[];
    scale_metrics: IScaleMetric[];
    protocols: IChoice[];
    /** The target a percent metric scales at when none is given. */
    default_utilization_target: number;
    defaults: {
      model_format: string;
      scale_metric: string;
      protocol_version: string;
    };
  };
}
