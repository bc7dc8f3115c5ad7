/** The request helper's pure parts: query strings and the availability probe. */
import { describe, expect, it, vi } from 'vitest';

import {
  CubeApiError,
  CubeClient,
  isMissing,
  itemPath,
  probe,
  withQuery
} from '../src/common/api';

describe('withQuery', () => {
  it('adds the keys that have a value', () => {
    expect(withQuery('jobs')).toBe('jobs');
    expect(withQuery('jobs', { all: false, user: undefined })).toBe('jobs');
    expect(withQuery('jobs', { all: true })).toBe('jobs?all=1');
    expect(withQuery('gpu', { history: 0, all: true })).toBe(
      'gpu?history=0&all=1'
    );
    expect(withQuery('jobs/a/logs', { replica: 'worker-0', tail: 10 })).toBe(
      'jobs/a/logs?replica=worker-0&tail=10'
    );
  });

  it("names another user's item", () => {
    expect(itemPath('notebooks', 'nb 1')).toBe('notebooks/nb%201');
    expect(itemPath('notebooks', 'nb', 'bob@example.com')).toBe(
      'notebooks/nb?user=bob%40example.com'
    );
  });
});

/** A client whose `GET /info` gives `info` (or throws it), on its own base URL. */
let servers = 0;
function fakeClient(info: unknown): { client: CubeClient; asked: string[] } {
  const asked: string[] = [];
  const client = {
    settings: { baseUrl: `http://server-${++servers}/` },
    request: async (endPoint: string) => {
      asked.push(endPoint);
      if (info instanceof Error) {
        throw info;
      }
      return info;
    }
  } as unknown as CubeClient;
  return { client, asked };
}

const userServer = {
  role: 'user',
  user: 'alice',
  is_admin: false,
  backend: 'local',
  features: ['pipelines', 'jobs', 'gpu'],
  workbench_url: '/lab'
};

describe('probe', () => {
  it('asks a feature listed in /info, and /info once per server', async () => {
    const { client, asked } = fakeClient(userServer);
    expect(await probe(client, 'jobs', async () => 42)).toEqual({
      available: true,
      value: 42
    });
    expect(await probe(client, 'gpu', async () => 'report')).toEqual({
      available: true,
      value: 'report'
    });
    expect(asked).toEqual(['info']);
  });

  it('never asks a feature the server does not list (no 404 in the console)', async () => {
    const { client } = fakeClient(userServer);
    const request = vi.fn(async () => 1);
    expect(await probe(client, 'notebooks', request)).toEqual({
      available: false,
      value: null
    });
    expect(request).not.toHaveBeenCalled();
  });

  it('offers nothing where the server has no workbench API', async () => {
    const { client } = fakeClient(new CubeApiError(404, 'no', null, null));
    expect((await probe(client, 'pipelines', async () => 1)).available).toBe(
      false
    );
  });

  it('keeps a listed feature when its first call fails (its panel says why)', async () => {
    vi.spyOn(console, 'warn').mockImplementation(() => undefined);
    const { client } = fakeClient(userServer);
    const failing = (status: number) => async () => {
      throw new CubeApiError(status, 'no', null, null);
    };
    expect(await probe(client, 'jobs', failing(503))).toEqual({
      available: true,
      value: null
    });
    expect((await probe(client, 'jobs', failing(0))).available).toBe(true);
    expect(isMissing(new CubeApiError(404, 'no', null, null))).toBe(true);
    expect(isMissing(new Error('404'))).toBe(false);
  });
});
