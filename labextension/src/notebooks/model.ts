/**
 * State of the Notebook Servers panel: what the server last said, plus the errors to
 * show next to where the user acted. Polls while the panel is visible, faster while
 * any server is between states, so a status change shows up without a click.
 */
import { errorMessage } from '../common/api';
import { PolledModel } from '../common/polledModel';
import { RequestState } from '../common/request';
import type { NotebooksClient } from './client';
import type { IProfile, IServer, ServerStatus } from './types';

/** Poll interval while every server is settled (ms). */
export const SETTLED_INTERVAL = 5000;
/** Poll interval while a server is queued, pending, stopping or terminating (ms): a queued
 * server's place and reason, and its start, show live. */
export const TRANSITION_INTERVAL = 1000;

const TRANSITIONAL: ReadonlySet<ServerStatus> = new Set<ServerStatus>([
  'queued',
  'pending',
  'stopping',
  'terminating'
]);

/** Identifies a row: server names are unique per user. */
export function rowKey(server: IServer): string {
  return `${server.user}/${server.name}`;
}

/** The panel's model; emits `stateChanged` after every change or poll. */
export class NotebookServersModel extends PolledModel {
  constructor(readonly client: NotebooksClient) {
    super({
      name: 'cube-jupyter:notebook-servers',
      interval: SETTLED_INTERVAL,
      backoff: true
    });
  }

  /** The servers listed, in the server's order. */
  get servers(): readonly IServer[] {
    return this._servers;
  }

  /** The user the server says we are. */
  get user(): string | null {
    return this._user;
  }

  /** The admin-defined profiles, once loaded. */
  get profiles(): readonly IProfile[] {
    return this._profiles ?? [];
  }

  /** Whether the first list has arrived. */
  get loaded(): boolean {
    return this._loaded;
  }

  /** Why the list could not be fetched, if it could not. */
  get listError(): string | null {
    return this._listError;
  }

  /** Why profiles could not be loaded, if they could not. */
  get profilesError(): string | null {
    return this._profilesError;
  }

  /** The last error of an action on a server row. */
  rowError(server: IServer): string | null {
    return this._rowErrors.get(rowKey(server)) ?? null;
  }

  /** Whether an action on this server row is in flight. */
  isBusy(server: IServer): boolean {
    return this._busy.has(rowKey(server));
  }

  /** Use profiles already fetched (by the availability probe). */
  setProfiles(profiles: readonly IProfile[]): void {
    this._profiles = [...profiles];
    this._profilesError = null;
    this.stateChanged.emit();
  }

  /** Fetch profiles (again). */
  async loadProfiles(): Promise<void> {
    try {
      const { profiles } = await this.client.listProfiles();
      this.setProfiles(profiles);
    } catch (error) {
      this._profilesError = errorMessage(error);
      this.stateChanged.emit();
    }
  }

  /** The create form's request: in flight, and the error (with its field) to show. */
  readonly creation = new RequestState<IServer>(() => this.stateChanged.emit());

  /** Create a server; returns whether it was created (else see `creation.error`). */
  async create(name: string, profile: string): Promise<boolean> {
    const server = await this.creation.run(() =>
      this.client.create(name, profile)
    );
    if (server) {
      this._upsert(server);
      this.stateChanged.emit();
    }
    this.pollNow();
    return server !== null;
  }

  /** Stop or start a server; errors land in `rowError(server)`. */
  setStopped(server: IServer, stopped: boolean): Promise<void> {
    return this._rowAction(server, async () => {
      const owner = this._owner(server);
      this._upsert(await this.client.setStopped(server.name, stopped, owner));
    });
  }

  /** Delete a server; errors land in `rowError(server)`. */
  remove(server: IServer): Promise<void> {
    return this._rowAction(server, async () => {
      await this.client.remove(server.name, this._owner(server));
      const key = rowKey(server);
      this._servers = this._servers.filter(s => rowKey(s) !== key);
    });
  }

  /** Record a row error from outside (e.g. the tab Connect opens was blocked). */
  setRowError(server: IServer, message: string | null): void {
    if (message === null) {
      this._rowErrors.delete(rowKey(server));
    } else {
      this._rowErrors.set(rowKey(server), message);
    }
    this.stateChanged.emit();
  }

  /** Fetch the list; poll faster while a server is between states. */
  protected async poll(): Promise<void> {
    try {
      const list = await this.fetchInScope(all => this.client.list(all));
      if (list === null) {
        return;
      }
      this._servers = list.notebooks;
      this._user = list.user;
      this.isAdmin = list.is_admin;
      this._listError = null;
      this._loaded = true;
      const keys = new Set(list.notebooks.map(rowKey));
      for (const key of [...this._rowErrors.keys()]) {
        if (!keys.has(key)) {
          this._rowErrors.delete(key);
        }
      }
    } catch (error) {
      this._listError = errorMessage(error);
      throw error;
    } finally {
      this.stateChanged.emit();
    }
    const moving = this._servers.some(s => TRANSITIONAL.has(s.status));
    this.interval = moving ? TRANSITION_INTERVAL : SETTLED_INTERVAL;
  }

  /** Shown: the profiles too, the first time (unless the probe brought them). */
  protected onVisibilityChanged(): void {
    if (this.visible && this._profiles === null) {
      void this.loadProfiles();
    }
    super.onVisibilityChanged();
  }

  /** The `user` to name in a request: only when acting on someone else's server. */
  private _owner(server: IServer): string | undefined {
    return this._user !== null && server.user !== this._user
      ? server.user
      : undefined;
  }

  private async _rowAction(
    server: IServer,
    action: () => Promise<void>
  ): Promise<void> {
    const key = rowKey(server);
    this._busy.add(key);
    this._rowErrors.delete(key);
    this.stateChanged.emit();
    try {
      await action();
    } catch (error) {
      this._rowErrors.set(key, errorMessage(error));
    } finally {
      this._busy.delete(key);
      this.stateChanged.emit();
      this.pollNow();
    }
  }

  private _upsert(server: IServer): void {
    const key = rowKey(server);
    const index = this._servers.findIndex(s => rowKey(s) === key);
    if (index === -1) {
      this._servers = [...this._servers, server];
    } else {
      this._servers = this._servers.map((s, i) => (i === index ? server : s));
    }
  }

  private _servers: IServer[] = [];
  private _user: string | null = null;
  private _profiles: IProfile[] | null = null;
  private _loaded = false;
  private _listError: string | null = null;
  private _profilesError: string | null = null;
  private _rowErrors = new Map<string, string>();
  private _busy = new Set<string>();
}
