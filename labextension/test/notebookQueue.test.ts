/** A queued notebook server's line in the panel: its place and what it waits for, as the server
 * said them; nothing for a server that is not queued. */
import { describe, expect, it } from 'vitest';

import { queueLine } from '../src/notebooks/format';
import type { IServer, ServerStatus } from '../src/notebooks/types';

function server(
  status: ServerStatus,
  position: number | null,
  reason: string | null
): IServer {
  return {
    user: 'alice',
    name: 'g1',
    profile: 'gpu',
    status,
    url: '/cube/notebook/alice/g1/',
    resources: { cpu: 1, memory: '1Gi', gpu: 1, gpu_resource: null },
    created: '2026-01-01T00:00:00Z',
    image: '',
    reason: null,
    last_activity: null,
    namespace: null,
    actions: ['stop', 'delete'],
    queue_position: position,
    queue_reason: reason
  };
}

describe('a queued server', () => {
  it('says its place and why it waits', () => {
    const reason = 'waiting for 1 GPU: 0 of 2 free';
    expect(queueLine(server('queued', 2, reason))).toBe(
      `Queued · #2 · ${reason}`
    );
  });

  it('never waits blank: without a reason yet it still says it is queued', () => {
    expect(queueLine(server('queued', null, null))).toBe(
      'Queued · waiting in the queue'
    );
  });

  it('has no queue line once it leaves the queue', () => {
    expect(queueLine(server('pending', null, null))).toBeNull();
    expect(queueLine(server('running', null, null))).toBeNull();
  });
});
