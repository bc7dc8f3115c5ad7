/**
 * Display formatting of jobs only: short text from what the server sent.
 */
import { formatAge, formatDate } from '../format';
import type { IJob } from './types';

/** An ISO date from the API's unix seconds. */
export function isoFromSeconds(seconds: number | null): string | null {
  return seconds === null ? null : new Date(seconds * 1000).toISOString();
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
