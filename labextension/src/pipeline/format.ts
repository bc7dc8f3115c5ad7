/**
 * Display formatting of pipeline runs: durations and the errors the server recorded;
 * the text a parameter's input starts with, and the values a parameters form sends.
 */
import { CubeApiError } from '../common/api';
import type { IParameter } from './types';

/**
 * The text a parameter's input starts with: strings bare, a number as the notebook wrote it
 * (`C = 1.0` stays 1.0: JSON would say 1, and the user would think it an integer), anything
 * else as JSON.
 */
export function parameterText(parameter: IParameter): string {
  if (typeof parameter.default === 'string') {
    return parameter.default;
  }
  if (parameter.default === null || parameter.default === undefined) {
    return parameter.default_source;
  }
  const source = parameter.default_source.trim();
  if (
    typeof parameter.default === 'number' &&
    jsonOrNull(source) === parameter.default
  ) {
    return source;
  }
  return JSON.stringify(parameter.default);
}

function jsonOrNull(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}

/**
 * The parameters to send: those that differ from the notebook's defaults; strings as
 * typed, others as JSON (a `CubeApiError` naming `parameters.NAME` when not JSON). JSON
 * has one kind of number: the server gives a float parameter a float.
 */
export function parametersToSend(
  parameters: readonly IParameter[],
  texts: ReadonlyMap<string, string>
): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const parameter of parameters) {
    const text = texts.get(parameter.name);
    if (text === undefined || text === parameterText(parameter)) {
      continue;
    }
    if (typeof parameter.default === 'string') {
      out[parameter.name] = text;
      continue;
    }
    try {
      out[parameter.name] = JSON.parse(text);
    } catch {
      throw new CubeApiError(
        400,
        `${parameter.name}: "${text}" is not a JSON value (e.g. 0.1, true, [1, 2] or "text")`,
        'BadRequest',
        `parameters.${parameter.name}`
      );
    }
  }
  return out;
}

/** `0.4s`, `12s`, `3m 05s`. */
export function formatDuration(seconds: number | null): string {
  if (seconds === null || seconds === undefined || Number.isNaN(seconds)) {
    return '';
  }
  if (seconds < 10) {
    return `${seconds.toFixed(1)}s`;
  }
  if (seconds < 60) {
    return `${Math.round(seconds)}s`;
  }
  const minutes = Math.floor(seconds / 60);
  const rest = Math.round(seconds % 60);
  return `${minutes}m ${String(rest).padStart(2, '0')}s`;
}

/**
 * One line for an error the server recorded: a string as is; a cell error
 * (`{ename, evalue, cell}`) as `ename: evalue (cell N)`; anything else as JSON.
 */
export function describeError(error: unknown): string | null {
  if (error === null || error === undefined || error === '') {
    return null;
  }
  if (typeof error === 'string') {
    return error;
  }
  if (typeof error === 'object') {
    const e = error as Record<string, unknown>;
    if (typeof e.message === 'string' && !e.ename) {
      return e.message;
    }
    if (e.ename || e.evalue) {
      const where = typeof e.cell === 'number' ? ` (cell ${e.cell})` : '';
      return `${String(e.ename ?? 'Error')}: ${String(e.evalue ?? '')}${where}`;
    }
  }
  return JSON.stringify(error);
}

/** The GPUs a step holds, for one line: `GPU 1`, `GPUs 0, 1`; '' for none. */
export function formatGpus(gpus: readonly string[] | null | undefined): string {
  if (!gpus || gpus.length === 0) {
    return '';
  }
  return `${gpus.length === 1 ? 'GPU' : 'GPUs'} ${gpus.join(', ')}`;
}

/**
 * What a run's step shows beside its name: how long it ran and its tries; nothing of a
 * cached step, whose state already says so.
 */
export function stepInfo(step: {
  cache_hit: boolean;
  duration: number | null;
  attempts: number;
}): string {
  if (step.cache_hit) {
    return '';
  }
  const tries = step.attempts > 1 ? ` · ${step.attempts} tries` : '';
  return `${formatDuration(step.duration)}${tries}`;
}

/**
 * The run's own error line, its failed steps' errors left to them (each is shown under
 * its step): which steps failed, and what else failed the run; null for none.
 */
export function runError(run: {
  error: unknown;
  steps: readonly { name: string; status: string; error: unknown }[];
}): string | null {
  let text = describeError(run.error);
  const failed = run.steps.filter(step => step.status === 'failed');
  if (text === null || failed.length === 0) {
    return text;
  }
  for (const step of failed) {
    const own = (step.error as { message?: unknown } | null)?.message;
    if (typeof own === 'string' && own) {
      text = text.split(own).join('');
    }
  }
  const rest = text
    .split(';')
    .map(part => part.trim())
    .filter(part => part !== '');
  const names = failed.map(step => step.name).join(', ');
  const head =
    failed.length === 1
      ? `Failed at step ${names}: see its error below`
      : `Failed at steps ${names}: see their errors below`;
  return [head, ...rest].join('; ');
}

/**
 * What a run's step shows beside its state: why a queued step waits, which GPUs a
 * running one holds; '' when there is nothing to say.
 */
export function stepNote(step: {
  status: string;
  reason?: string | null;
  gpus?: readonly string[] | null;
}): string {
  if (step.status === 'queued') {
    return step.reason ?? '';
  }
  if (step.status === 'running') {
    return formatGpus(step.gpus);
  }
  return '';
}

/**
 * The data files a run's step read (its cache key saw), for one line: the first `shown`
 * and how many more; '' for none.
 */
export function formatFiles(files: readonly string[], shown = 3): string {
  if (!files || files.length === 0) {
    return '';
  }
  const listed = files.slice(0, shown).join(', ');
  const more = files.length - shown;
  return more > 0 ? `${listed} and ${more} more` : listed;
}
