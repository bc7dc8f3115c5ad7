/**
 * What `/cube/api/v1/jobs` answers (see server_ext/openapi.yaml, `Job`); the panel
 * shows these as they come and never decides a job's state itself.
 */

export type JobKind = 'training' | 'tuning' | 'serving';

/** The last true condition, as the Kubeflow operators report it; serving adds Ready. */
export type JobPhase =
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
  conditions: IJobCondition[];
  replicas: IJobReplica[];
  gpus: number;
  message: string | null;
  /** The normalized spec it was submitted with. */
  spec: Record<string, unknown>;
  trials: IJobTrial[];
  best_trial: string | null;
  endpoint: string | null;
  completed: number | null;
  finished: boolean;
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
