/**
 * Display formatting of notebook servers only: turns what the server sent into short
 * text. No decision about a server's state is taken here.
 */
import type { IResources, IServer } from './types';

function given(value: string | number | null | undefined): boolean {
  return value !== null && value !== undefined && value !== '';
}

/** The parts of a resource request, e.g. `['2 CPU', '8Gi', '1 × nvidia.com/gpu']`. */
export function resourceParts(
  resources: IResources | null | undefined
): string[] {
  if (!resources) {
    return [];
  }
  const parts: string[] = [];
  if (given(resources.cpu)) {
    parts.push(`${resources.cpu} CPU`);
  }
  if (given(resources.memory)) {
    parts.push(`${resources.memory}`);
  }
  if (resources.gpu) {
    const kind = resources.gpu_resource || 'GPU';
    parts.push(`${resources.gpu} × ${kind}`);
  }
  return parts;
}

/** Why a queued server waits, as one line: `Queued · #2 · waiting for 1 GPU: 0 of 2 free`
 * (what the server said, its place only when known); null for a server not queued. */
export function queueLine(server: IServer): string | null {
  if (server.status !== 'queued') {
    return null;
  }
  const place = server.queue_position ? `#${server.queue_position}` : '';
  return ['Queued', place, server.queue_reason ?? 'waiting in the queue']
    .filter(part => part)
    .join(' · ');
}
