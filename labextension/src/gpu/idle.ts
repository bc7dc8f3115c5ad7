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
 * A toast for a notebook's kernel (in either view), and for a server pod or training
 * job the culler counts down to stop, in the user's own view only: the every-user view an
 * admin may switch to is mostly other users' servers and jobs.
 */
export function wantsToast(warning: IIdleWarning, allUsers: boolean): boolean {
  if (warning.kernel_id) {
    return true;
  }
  return !allUsers && stopsIn(warning) !== null;
}
