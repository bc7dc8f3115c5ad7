/**
 * Typed client of `/cube/api/v1/profiles` and `/cube/api/v1/notebooks`, on top of the
 * workbench's one HTTP client.
 */
import { URLExt } from '@jupyterlab/coreutils';

import { CubeClient, itemPath, withQuery } from '../common/api';
import type { IProfileList, IServer, IServerList } from './types';

export class NotebooksClient {
  constructor(readonly cube: CubeClient) {}

  /** The admin-defined notebook profiles. */
  listProfiles(): Promise<IProfileList> {
    return this.cube.request<IProfileList>('profiles');
  }

  /** The caller's notebook servers, or (admins only) every user's. */
  list(allUsers = false): Promise<IServerList> {
    return this.cube.request<IServerList>(
      withQuery('notebooks', { all: allUsers })
    );
  }

  /** Create a server; the server validates the name, profile and quotas. */
  create(name: string, profile: string): Promise<IServer> {
    return this.cube.send<IServer>('notebooks', 'POST', { name, profile });
  }

  /** Stop (`true`) or start again (`false`) a server; `user` for an admin acting on another's. */
  setStopped(name: string, stopped: boolean, user?: string): Promise<IServer> {
    return this.cube.send<IServer>(serverPath(name, user), 'PATCH', {
      stopped
    });
  }

  /** Delete a server and what belongs to it. */
  async remove(name: string, user?: string): Promise<void> {
    await this.cube.request<null>(serverPath(name, user), {
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
    return URLExt.join(this.cube.settings.baseUrl, url);
  }
}

function serverPath(name: string, user?: string): string {
  return itemPath('notebooks', name, user);
}
