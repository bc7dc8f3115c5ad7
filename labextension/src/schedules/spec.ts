/**
 * What the schedule form sends for what was typed: the text as typed, numbers as numbers
 * when they are ones; never checked here (the server names the field that is wrong).
 * Pure, so the form's rules are tested without a browser.
 */
import { compact, numberOrText, textOrNothing } from '../common/form/values';
import { parameterText } from '../pipeline/format';
import type { IParameter } from '../pipeline/types';
import { ITimingText, timingFields, timingOf, wallTime } from './format';
import type { ISchedule } from './types';

/** The form's text, one key per input (the timing and parameters apart). */
export interface IScheduleText {
  name: string;
  timezone: string;
  start: string;
  end: string;
  catchup: string;
  max_concurrency: string;
  concurrency_policy: string;
  retries: string;
  retry_backoff_seconds: string;
  depends_on: string;
  depends_timeout_seconds: string;
  paused: string;
}

/** A new schedule's text: empty fields take the server's defaults. */
export function newScheduleText(timezone: string): IScheduleText {
  return {
    name: '',
    timezone,
    start: '',
    end: '',
    catchup: '',
    max_concurrency: '',
    concurrency_policy: '',
    retries: '',
    retry_backoff_seconds: '',
    depends_on: '',
    depends_timeout_seconds: '',
    paused: ''
  };
}

/** A saved schedule's text and timing, for editing it. */
export function scheduleText(schedule: ISchedule): {
  text: IScheduleText;
  timing: ITimingText;
} {
  const zone = schedule.timezone;
  return {
    text: {
      name: schedule.name,
      timezone: zone,
      start: wallTime(schedule.start, zone),
      end: wallTime(schedule.end, zone),
      catchup: schedule.catchup,
      max_concurrency: String(schedule.max_concurrency),
      concurrency_policy: schedule.concurrency_policy,
      retries: String(schedule.retries),
      retry_backoff_seconds: String(schedule.retry_backoff_seconds),
      depends_on: schedule.depends_on ?? '',
      depends_timeout_seconds: String(schedule.depends_timeout_seconds),
      paused: schedule.paused ? 'true' : ''
    },
    timing: timingOf(schedule.cron, schedule.interval_seconds)
  };
}

/** The text a parameter's input starts with: the saved value, else the notebook's default. */
export function parameterStart(
  parameter: IParameter,
  saved: Record<string, unknown> | null
): string {
  if (saved && parameter.name in saved) {
    const value = saved[parameter.name];
    return typeof value === 'string' && typeof parameter.default === 'string'
      ? value
      : JSON.stringify(value);
  }
  return parameterText(parameter);
}

/**
 * The body of `POST /schedules` (`editing` false) or `PATCH /schedules/{name}`. A new
 * schedule leaves empty fields out (the server's defaults); an edit clears an emptied
 * start, end or dependency (null) and leaves an emptied number as it was.
 */
export function scheduleBody(
  text: IScheduleText,
  timing: ITimingText,
  path: string,
  parameters: Record<string, unknown>,
  editing: boolean
): Record<string, unknown> {
  const cleared = editing ? null : undefined;
  const when = timingFields(timing);
  const timingBody =
    'cron' in when
      ? { cron: when.cron, interval_seconds: cleared }
      : {
          interval_seconds: numberOrText(when.interval_seconds) ?? '',
          cron: cleared
        };
  const body = compact({
    name: editing ? undefined : text.name.trim(),
    kind: editing ? undefined : 'notebook',
    path,
    ...timingBody,
    timezone: textOrNothing(text.timezone),
    start: textOrNothing(text.start) ?? cleared,
    end: textOrNothing(text.end) ?? cleared,
    parameters: editing ? undefined : compactOrNothing(parameters),
    catchup: textOrNothing(text.catchup),
    max_concurrency: numberOrText(text.max_concurrency),
    concurrency_policy: textOrNothing(text.concurrency_policy),
    retries: numberOrText(text.retries),
    retry_backoff_seconds: numberOrText(text.retry_backoff_seconds),
    depends_on: textOrNothing(text.depends_on) ?? cleared,
    depends_timeout_seconds: numberOrText(text.depends_timeout_seconds),
    paused: text.paused === 'true'
  });
  if (editing) {
    body.parameters = parameters; // all of them: an emptied set clears them
  }
  return body;
}

function compactOrNothing(
  value: Record<string, unknown>
): Record<string, unknown> | undefined {
  return Object.keys(value).length ? value : undefined;
}
