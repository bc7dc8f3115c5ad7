/**
 * Display formatting of jobs only: short text from what the server sent.
 */
import { formatAge, formatDate, isoFromSeconds } from '../common/format';
import type { LogStreamState } from './logStream';
import type { IJob, IJobCondition, IJobReplica, IQueuePlace } from './types';

/** Identifies a job: names are unique per user. */
export function jobKey(job: { user: string; name: string }): string {
  return `${job.user}/${job.name}`;
}

/** `5m` since the job was created. */
export function jobAge(job: IJob, now: number): string {
  return formatAge(isoFromSeconds(job.created), now);
}

/** A local date for tooltips and the conditions table. */
export function localTime(seconds: number | null): string {
  return formatDate(isoFromSeconds(seconds));
}

/**
 * `ready/total`: replicas running or done, of all the job's replicas, as `kubectl get`
 * shows a workload's ready count.
 */
/** Where a queued job waits, before its reason: "#2 · " locally, "gpu-jobs · " on Kueue (with its
 * place when Kueue says), "" when neither is known. */
export function queueWhere(queue: IQueuePlace): string {
  const parts = [
    queue.position === null ? '' : `#${queue.position}`,
    queue.queue ?? ''
  ].filter(part => part);
  return parts.length ? `${parts.join(' ')} · ` : '';
}

export function replicaCount(job: IJob): string {
  const ready = job.replicas.filter(
    r => r.state === 'Running' || r.state === 'Succeeded'
  ).length;
  return `${ready}/${job.replicas.length}`;
}

/** A parameter value or objective as text: numbers to a few significant digits. */
export function formatValue(value: unknown): string {
  if (typeof value === 'number') {
    return Number.isInteger(value) ? String(value) : value.toPrecision(4);
  }
  if (typeof value === 'string') {
    return value;
  }
  return JSON.stringify(value);
}

/**
 * What the log's header says: `live` while the log streams; once the stream has ended,
 * `complete` when its replica has finished, else that the panel is reconnecting (it
 * follows a replica that still runs again on the next poll).
 */
export function logStateLabel(
  state: LogStreamState,
  replica: Pick<IJobReplica, 'state'> | undefined
): string {
  if (state === 'streaming') {
    return 'live';
  }
  if (state !== 'ended' || !replica) {
    return '';
  }
  const running = replica.state === 'Pending' || replica.state === 'Running';
  return running ? 'reconnecting…' : 'complete';
}

/**
 * The conditions that still describe the job: one no longer true (`Running` False once
 * the job ended, its message still "is running") is left out when a condition that
 * became true at the same time or later says what happened instead, as Kubeflow's UI
 * shows a job's current state; a false one nothing replaced (`Ready` False) stays.
 */
export function currentConditions(
  conditions: readonly IJobCondition[]
): IJobCondition[] {
  return conditions.filter(
    c =>
      c.status === 'True' ||
      !conditions.some(
        other =>
          other.status === 'True' &&
          other.type !== c.type &&
          other.last_transition_time >= c.last_transition_time
      )
  );
}
