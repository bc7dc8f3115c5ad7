/**
 * What the GPU panel and the idle toast make of the server's idle warnings: the time left
 * before the culler stops what holds the GPU, and which warnings are worth a toast.
 */
import { formatElapsed } from '../common/format';
import type { IIdleWarning } from './types';

/** "stops in 25m" while the culler's limit is ahead; "stopping now" once it is reached. */
export function stopsIn(warning: IIdleWarning): string | null {
  const left = warning.stops_in_seconds;
  if (left === null || left === undefined) {
    return null;
  }
  return left >= 1 ? `stops in ${formatElapsed(left)}` : 'stopping now';
}

/**
 * A toast is for the user's own work: a notebook's kernel, and whatever of theirs the culler
 * is about to stop (a server pod, a training job). An admin looking at every user's GPUs
 * gets no toast for other users' servers and jobs.
 */
export function wantsToast(warning: IIdleWarning, allUsers: boolean): boolean {
  if (warning.kernel_id) {
    return true;
  }
  return !allUsers && stopsIn(warning) !== null;
}
