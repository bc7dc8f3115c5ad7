/**
 * The one place that talks HTTP to the cube-jupyter server extension.
 *
 * Every call goes through `ServerConnection.makeRequest`, which adds Jupyter's auth
 * token and XSRF header, so the panels never build requests of their own.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import type { IErrorBody, IProfileList, IServer, IServerList } from './types';

/** An error answered by the API, carrying what the server said about it. */
export class CubeApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly reason: string | null,
    readonly field: string | null
  ) {
    super(message);
    this.name = 'CubeApiError';
  }
}

/** Typed client of `/cube/api/v1`. */
export class CubeClient {
  constructor(
    readonly settings: ServerConnection.ISettings = ServerConnection.makeSettings()
  ) {}

  /** Whether this server offers the workbench API: only a 404 says it does not. */
  async isAvailable(): Promise<boolean> {
    try {
      await this.listProfiles();
      return true;
    } catch (error) {
      return !(error instanceof CubeApiError && error.status === 404);
    }
  }

  /** The admin-defined notebook profiles. */
  listProfiles(): Promise<IProfileList> {
    return this.request<IProfileList>('profiles');
  }

  /** The caller's notebook servers, or (admins only) every user's. */
  listNotebooks(allUsers = false): Promise<IServerList> {
    return this.request<IServerList>(
      allUsers ? 'notebooks?all=1' : 'notebooks'
    );
  }

  /** Create a server; the server validates the name, profile and quotas. */
  createNotebook(name: string, profile: string): Promise<IServer> {
    return this.request<IServer>('notebooks', {
      method: 'POST',
      body: JSON.stringify({ name, profile })
    });
  }

  /** Stop (`true`) or start again (`false`) a server; `user` for an admin acting on another's. */
  setStopped(name: string, stopped: boolean, user?: string): Promise<IServer> {
    return this.request<IServer>(serverPath(name, user), {
      method: 'PATCH',
      body: JSON.stringify({ stopped })
    });
  }

  /** Delete a server and what belongs to it. */
  async deleteNotebook(name: string, user?: string): Promise<void> {
    await this.request<null>(serverPath(name, user), {
      method: 'DELETE'
    });
  }

  /**
   * The address to open for a server's `url`: the API gives a path from the host
   * root; anything not starting with `/` is taken as relative to Jupyter's base URL.
   */
  connectUrl(url: string): string {
    if (/^https?:\/\//.test(url) || url.startsWith('/')) {
      return url;
    }
    return URLExt.join(this.settings.baseUrl, url);
  }

  /**
   * One call to `/cube/api/v1/{endPoint}`; the JSON answer, or a `CubeApiError` with
   * what the server said. Feature clients (e.g. the pipeline client) build on this.
   */
  async request<T>(endPoint: string, init: RequestInit = {}): Promise<T> {
    const url = URLExt.join(
      this.settings.baseUrl,
      'cube',
      'api',
      'v1',
      endPoint
    );
    if (init.body !== undefined) {
      init.headers = { 'Content-Type': 'application/json', ...init.headers };
    }
    let response: Response;
    try {
      response = await ServerConnection.makeRequest(url, init, this.settings);
    } catch (error) {
      throw new CubeApiError(
        0,
        `Cannot reach the Jupyter server: ${(error as Error).message}`,
        'NetworkError',
        null
      );
    }
    const text = await response.text();
    let data: unknown = null;
    if (text) {
      try {
        data = JSON.parse(text);
      } catch {
        data = null;
      }
    }
    if (!response.ok) {
      const body = (data ?? {}) as IErrorBody;
      const message =
        body.message || `${response.status} ${response.statusText}`.trim();
      throw new CubeApiError(
        response.status,
        message,
        body.reason ?? null,
        body.field ?? null
      );
    }
    return data as T;
  }
}

/** `notebooks/{name}`, with `?user=` when acting on another user's server. */
function serverPath(name: string, user?: string): string {
  const path = `notebooks/${encodeURIComponent(name)}`;
  return user ? `${path}?user=${encodeURIComponent(user)}` : path;
}

/** A message fit to show a person, whatever was thrown. */
export function errorMessage(error: unknown): string {
  if (error instanceof Error) {
    return error.message;
  }
  return String(error);
}
