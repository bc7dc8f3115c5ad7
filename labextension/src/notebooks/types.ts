/**
 * Shapes of the JSON documents served by the cube-jupyter REST API
 * (`/cube/api/v1/...`). The server owns every rule behind these values; the UI only
 * displays them, so the types mirror the wire format and nothing more.
 */

/** Lifecycle states a notebook server reports; `queued`: waiting in this machine's queue for
 * its GPUs (local backend), holding nothing yet. */
export type ServerStatus =
  | 'queued'
  | 'pending'
  | 'running'
  | 'stopping'
  | 'stopped'
  | 'failed'
  | 'terminating';

/** What the server says the caller may do to a notebook server now. */
export type ServerAction = 'connect' | 'stop' | 'start' | 'delete';

/** Resources granted to one server (quantities as the server formats them). */
export interface IResources {
  cpu: string | number | null;
  memory: string | number | null;
  gpu: number | null;
  gpu_resource: string | null;
}

/** Which parts of a profile a server of it is really given by the backend. */
export interface IEnforced {
  image: boolean;
  cpu: boolean;
  memory: boolean;
  gpu: boolean;
}

/** An admin-defined notebook profile (`c.CubeSpawner.profiles`). */
export interface IProfile {
  name: string;
  display_name: string;
  description: string;
  image: string;
  cpu: string | number | null;
  memory: string | number | null;
  gpu: number | null;
  gpu_resource: string | null;
  node_selector: Record<string, string> | null;
  tolerations: unknown[] | null;
  env: Record<string, string> | null;
  default: boolean;
  enforced: IEnforced;
  /** What the backend does with the profile, one sentence per part, to show as is. */
  enforcement: string[];
}

/** One notebook server as listed by `GET /cube/api/v1/notebooks`. */
export interface IServer {
  user: string;
  name: string;
  profile: string;
  status: ServerStatus;
  url: string;
  resources: IResources;
  created: string;
  image: string;
  reason: string | null;
  last_activity: string | null;
  namespace: string | null;
  /** The buttons to show, decided by the server from the status. */
  actions: ServerAction[];
  /** While queued: its place in the machine's queue (from 1) and what it waits for. */
  queue_position: number | null;
  queue_reason: string | null;
}

/** Body of `GET /cube/api/v1/profiles`. */
export interface IProfileList {
  profiles: IProfile[];
}

/** Body of `GET /cube/api/v1/notebooks`. */
export interface IServerList {
  user: string;
  is_admin: boolean;
  notebooks: IServer[];
}
