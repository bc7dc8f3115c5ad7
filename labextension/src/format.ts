/**
 * Display formatting only: turns what the server sent into short text. No decision
 * about a server's state is taken here.
 */
import type { IProfile, IResources } from './types';

/** `3s`, `5m`, `2h 10m`, `4d 3h` since `iso`, measured at `now` (ms). */
export function formatAge(iso: string | null, now: number): string {
  if (!iso) {
    return '';
  }
  const then = Date.parse(iso);
  if (Number.isNaN(then)) {
    return '';
  }
  const seconds = Math.max(0, Math.floor((now - then) / 1000));
  if (seconds < 60) {
    return `${seconds}s`;
  }
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) {
    return `${minutes}m`;
  }
  const hours = Math.floor(minutes / 60);
  if (hours < 24) {
    return minutes % 60 ? `${hours}h ${minutes % 60}m` : `${hours}h`;
  }
  const days = Math.floor(hours / 24);
  return hours % 24 ? `${days}d ${hours % 24}h` : `${days}d`;
}

/** A local, readable date for tooltips. */
export function formatDate(iso: string | null): string {
  if (!iso) {
    return '';
  }
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : date.toLocaleString();
}

/** The parts of a resource request, e.g. `['2 CPU', '8Gi', '1 × nvidia.com/gpu']`. */
export function resourceParts(
  resources: IResources | IProfile | null | undefined
): string[] {
  if (!resources) {
    return [];
  }
  const parts: string[] = [];
  if (
    resources.cpu !== null &&
    resources.cpu !== undefined &&
    resources.cpu !== ''
  ) {
    parts.push(`${resources.cpu} CPU`);
  }
  if (
    resources.memory !== null &&
    resources.memory !== undefined &&
    resources.memory !== ''
  ) {
    parts.push(`${resources.memory}`);
  }
  if (resources.gpu) {
    const kind = resources.gpu_resource || 'GPU';
    parts.push(`${resources.gpu} × ${kind}`);
  }
  return parts;
}
