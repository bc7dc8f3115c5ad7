/**
 * Display formatting of notebook servers only: turns what the server sent into short
 * text. No decision about a server's state is taken here.
 */
import type { IResources } from './types';

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
