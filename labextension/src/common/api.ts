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

/** What asking a feature's API once told about it. */
export interface IProbe<T> {
  /**
   * Whether the server offers the API. Only a 404 says it does not: a notebook server the
   * workbench spawned has the labextension but not the server extension. Any other
   * failure (a 503 while the feature's backend starts, a network error) leaves the
   * feature offered; its panel then says what went wrong.
   */
  available: boolean;
  /** The answer, when there was one. */
  value: T | null;
}

/**
 * The one availability probe of every feature: ask its API once (the answer is not wasted,
 * e.g. the forms' vocabulary) and tell from that whether the feature is offered here.
 */
export async function probe<T>(request: () => Promise<T>): Promise<IProbe<T>> {
  try {
    return { available: true, value: await request() };
  } catch (error) {
    const available = !isMissing(error);
    if (available) {
      console.warn('cube-jupyter: an API answered with an error', error);
    }
    return { available, value: null };
  }
}
