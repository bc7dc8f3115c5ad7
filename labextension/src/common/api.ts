/**
 * The one place that talks HTTP to the cube-jupyter server extension.
 *
 * Every call goes through `ServerConnection.makeRequest`, which adds Jupyter's auth
 * token and XSRF header, so the panels never build requests of their own. The feature
 * clients (notebooks, pipelines, jobs, GPU) are thin typed layers on `CubeClient`.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import type { IFieldError } from './fieldError';

/** Body of every 4xx/5xx answer of the API. */
export interface IErrorBody {
  message?: string;
  reason?: string;
  field?: string | null;
}

/** An error answered by the API, carrying what the server said about it. */
export class CubeApiError extends Error implements IFieldError {
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

/** A query string's values; `undefined`, `false` and `''` leave the key out. */
export type Query = Record<string, string | number | boolean | undefined>;

/** `path?key=value&...` with the keys that have a value (`true` is sent as `1`). */
export function withQuery(path: string, query: Query = {}): string {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query)) {
    if (value === undefined || value === false || value === '') {
      continue;
    }
    params.set(key, value === true ? '1' : String(value));
  }
  const text = params.toString();
  return text ? `${path}?${text}` : path;
}

/** `collection/{name}`, with `?user=` when acting on another user's object. */
export function itemPath(
  collection: string,
  name: string,
  user?: string
): string {
  return withQuery(`${collection}/${encodeURIComponent(name)}`, { user });
}

/** Typed client of `/cube/api/v1`. */
export class CubeClient {
  constructor(
    readonly settings: ServerConnection.ISettings = ServerConnection.makeSettings()
  ) {}

  /** The full address of `/cube/api/v1/{endPoint}`. */
  url(endPoint: string): string {
    return URLExt.join(this.settings.baseUrl, 'cube', 'api', 'v1', endPoint);
  }

  /**
   * One call to `/cube/api/v1/{endPoint}`; the response when it is a success, else a
   * `CubeApiError` with what the server said (status 0 when it could not be reached).
   */
  async fetch(endPoint: string, init: RequestInit = {}): Promise<Response> {
    if (init.body !== undefined) {
      init.headers = { 'Content-Type': 'application/json', ...init.headers };
    }
    let response: Response;
    try {
      response = await ServerConnection.makeRequest(
        this.url(endPoint),
        init,
        this.settings
      );
    } catch (error) {
      throw new CubeApiError(
        0,
        `Cannot reach the Jupyter server: ${(error as Error).message}`,
        'NetworkError',
        null
      );
    }
    if (!response.ok) {
      const body = parseJson(await response.text()) as IErrorBody | null;
      throw new CubeApiError(
        response.status,
        body?.message || `${response.status} ${response.statusText}`.trim(),
        body?.reason ?? null,
        body?.field ?? null
      );
    }
    return response;
  }

  /** One call answered with JSON (null for an empty answer). */
  async request<T>(endPoint: string, init: RequestInit = {}): Promise<T> {
    const response = await this.fetch(endPoint, init);
    return parseJson(await response.text()) as T;
  }

  /** A JSON body sent with `method`. */
  send<T>(endPoint: string, method: string, body: unknown): Promise<T> {
    return this.request<T>(endPoint, { method, body: JSON.stringify(body) });
  }
}

function parseJson(text: string): unknown {
  if (!text) {
    return null;
  }
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}

/** A message fit to show a person, whatever was thrown. */
export function errorMessage(error: unknown): string {
  if (error instanceof Error) {
    return error.message;
  }
  return String(error);
}

/** Whether an error says the server has no such API (a 404). */
export function isMissing(error: unknown): boolean {
  return error instanceof CubeApiError && error.status === 404;
}

/** A feature of the workbench's API, as `GET /info` lists them. */
export type Feature = 'notebooks' | 'pipelines' | 'jobs' | 'gpu';

/** What `GET /cube/api/v1/info` says this server is. */
export interface IServerInfo {
  /** `workbench`: the central workbench; `user`: a notebook server the workbench started. */
  role: 'workbench' | 'user';
  user: string;
  is_admin: boolean;
  backend: string;
  features: Feature[];
  /** A user server's link back to the central workbench. */
  workbench_url: string | null;
}

const infoByServer = new Map<string, Promise<IServerInfo | null>>();

/**
 * What this server is, asked once per page whatever the number of features asking (null
 * when it has no workbench API: the server extension is not installed there).
 */
export function serverInfo(client: CubeClient): Promise<IServerInfo | null> {
  const key = client.settings.baseUrl;
  let info = infoByServer.get(key);
  if (!info) {
    info = client.request<IServerInfo>('info').catch(error => {
      if (!isMissing(error)) {
        console.warn(
          'cube-jupyter: the workbench API answered with an error',
          error
        );
      }
      return null;
    });
    infoByServer.set(key, info);
  }
  return info;
}

/** What asking a feature's API once told about it. */
export interface IProbe<T> {
  /**
   * Whether the server offers the feature: `GET /info` lists it. Any failure of the
   * feature's own first call (a 503 while its backend starts, a network error) leaves
   * the feature offered; its panel then says what went wrong.
   */
  available: boolean;
  /** The answer, when there was one. */
  value: T | null;
}

/**
 * The one availability probe of every feature: whether the server lists it in `GET /info`
 * (so a server without it is never asked, and logs no 404), then its API's first answer
 * (not wasted: e.g. the forms' vocabulary).
 */
export async function probe<T>(
  client: CubeClient,
  feature: Feature,
  request: () => Promise<T>
): Promise<IProbe<T>> {
  const info = await serverInfo(client);
  if (!info || !info.features.includes(feature)) {
    return { available: false, value: null };
  }
  try {
    return { available: true, value: await request() };
  } catch (error) {
    console.warn(
      `cube-jupyter: the ${feature} API answered with an error`,
      error
    );
    return { available: true, value: null };
  }
}
