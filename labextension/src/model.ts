/**
 * State of the Notebook Servers panel: what the server last said, plus the errors to
 * show next to where the user acted. Polls while the panel is visible, faster while
 * any server is between states, so a status change shows up without a click.
 */
import { VDomModel } from '@jupyterlab/ui-components';
import { Poll } from '@lumino/polling';

import { CubeClient, errorMessage } from './api';
import type { IProfile, IServer, ServerStatus } from './types';

/** Poll interval while every server is settled (ms). */
export const SETTLED_INTERVAL = 5000;
/** Poll interval while a server is pending, stopping or terminating (ms). */
export const TRANSITION_INTERVAL = 1000;

const TRANSITIONAL: ReadonlySet<ServerStatus> = new Set<ServerStatus>([
  'pending',
  'stopping',
  'terminating'
]);

/** Identifies a row: server names are unique per user. */
export function rowKey(server: IServer): string {
  return `${server.user}/${server.name}`;
}

/** The panel's model; emits `stateChanged` after every change or poll. */
export class NotebookServersModel extends VDomModel {
  constructor(readonly client: CubeClient = new CubeClient()) {
    super();
    this._poll = new Poll({
      auto: false,
      factory: () => this._pollOnce(),
      frequency: { interval: SETTLED_INTERVAL, backoff: true, max: 60_000 },
      name: 'cube-jupyter:notebook-servers',
      standby: () => (this._visible ? 'when-hidden' : true)
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

  /** Whether the caller is an admin (and may list every user's servers). */
  get isAdmin(): boolean {
    return this._isAdmin;
  }

  /** Whether an admin asked to see every user's servers. */
  get allUsers(): boolean {
    return this._allUsers;
  }

  set allUsers(value: boolean) {
    if (value !== this._allUsers) {
      this._allUsers = value;
      this.stateChanged.emit();
      void this._poll.refresh();
    }
  }

  /** The admin-defined profiles, once loaded. */
  get profiles(): readonly IProfile[] {
    return this._profiles;
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

  /** The last create error, shown by the form. */
  get formError(): string | null {
    return this._formError;
  }

  /** The field the last create error names, if any. */
  get formErrorField(): string | null {
    return this._formErrorField;
  }

  /** Whether a create request is in flight. */
  get creating(): boolean {
    return this._creating;
  }

  /** The last error of an action on a server row. */
  rowError(server: IServer): string | null {
    return this._rowErrors.get(rowKey(server)) ?? null;
  }

  /** Whether an action on this server row is in flight. */
  isBusy(server: IServer): boolean {
    return this._busy.has(rowKey(server));
  }

  /** The panel tells the model when it is shown, so hidden panels do not poll. */
  setVisible(visible: boolean): void {
    this._visible = visible;
    if (!visible) {
      return;
    }
    if (!this._profilesLoaded) {
      void this.loadProfiles();
    }
    if (!this._started) {
      this._started = true;
      void this._poll.start();
    } else {
      void this._poll.refresh();
    }
  }

  /** Fetch profiles (again). */
  async loadProfiles(): Promise<void> {
    try {
      const { profiles } = await this.client.listProfiles();
      this._profiles = profiles;
      this._profilesError = null;
      this._profilesLoaded = true;
    } catch (error) {
      this._profilesError = errorMessage(error);
    }
    this.stateChanged.emit();
  }

  /** Fetch the server list now; errors land in `listError`, never thrown. */
  async refresh(): Promise<void> {
    try {
      await this._fetch();
    } catch {
      // Already recorded in listError and shown by the panel.
    }
  }

  /** Create a server; returns whether it was created (else see `formError`). */
  async create(name: string, profile: string): Promise<boolean> {
    this._creating = true;
    this._formError = null;
    this._formErrorField = null;
    this.stateChanged.emit();
    try {
      const server = await this.client.createNotebook(name, profile);
      this._upsert(server);
      return true;
    } catch (error) {
      this._formError = errorMessage(error);
      this._formErrorField = (error as { field?: string | null }).field ?? null;
      return false;
    } finally {
      this._creating = false;
      this.stateChanged.emit();
      void this._poll.refresh();
    }
  }

  /** Clear the form's error (the user is typing again). */
  clearFormError(): void {
    if (this._formError !== null) {
      this._formError = null;
      this._formErrorField = null;
      this.stateChanged.emit();
    }
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
      await this.client.deleteNotebook(server.name, this._owner(server));
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

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._poll.dispose();
    super.dispose();
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
      void this._poll.refresh();
    }
  }

  private async _pollOnce(): Promise<void> {
    await this._fetch();
    const moving = this._servers.some(s => TRANSITIONAL.has(s.status));
    const interval = moving ? TRANSITION_INTERVAL : SETTLED_INTERVAL;
    if (this._poll.frequency.interval !== interval) {
      this._poll.frequency = { ...this._poll.frequency, interval };
    }
  }

  private async _fetch(): Promise<void> {
    try {
      const list = await this.client.listNotebooks(this._allUsers);
      this._servers = list.notebooks;
      this._user = list.user;
      this._isAdmin = list.is_admin;
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

  private _poll: Poll;
  private _visible = false;
  private _started = false;
  private _servers: IServer[] = [];
  private _user: string | null = null;
  private _isAdmin = false;
  private _allUsers = false;
  private _profiles: IProfile[] = [];
  private _profilesLoaded = false;
  private _loaded = false;
  private _listError: string | null = null;
  private _profilesError: string | null = null;
  private _formError: string | null = null;
  private _formErrorField: string | null = null;
  private _creating = false;
  private _rowErrors = new Map<string, string>();
  private _busy = new Set<string>();
}
