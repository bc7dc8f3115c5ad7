/** The request helper's pure parts: query strings and the availability probe. */
import { describe, expect, it, vi } from 'vitest';

import {
  CubeApiError,
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

describe('probe', () => {
  it('finds an API there when it answers', async () => {
    expect(await probe(async () => 42)).toEqual({ available: true, value: 42 });
  });

  it('finds it missing only on a 404', async () => {
    vi.spyOn(console, 'warn').mockImplementation(() => undefined);
    const failing = (status: number) => async () => {
      throw new CubeApiError(status, 'no', null, null);
    };
    expect(await probe(failing(404))).toEqual({
      available: false,
      value: null
    });
    // A 503 while the backend starts, or no answer at all, still offers the feature.
    expect((await probe(failing(503))).available).toBe(true);
    expect((await probe(failing(0))).available).toBe(true);
    expect(isMissing(new CubeApiError(404, 'no', null, null))).toBe(true);
    expect(isMissing(new Error('404'))).toBe(false);
  });
});
