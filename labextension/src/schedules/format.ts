/**
 * Pure helpers of the schedule form and panel: a preset ("daily at 09:30") as the cron
 * it stands for and back, and fire times written in the schedule's timezone. Whether a
 * cron parses and when it fires is the server's to say (`schedules/preview`).
 */

/** How the form writes when a schedule fires. */
export type Preset = 'hourly' | 'daily' | 'weekly' | 'cron' | 'interval';

/** The timing part of the form, as typed. */
export interface ITimingText {
  preset: Preset;
  /** `HH:MM` (daily, weekly). */
  time: string;
  /** Day of week, cron's numbering: `0` Sunday … `6` Saturday (weekly). */
  day: string;
  /** A cron expression (custom cron). */
  cron: string;
  /** Seconds (interval). */
  interval: string;
}

export const PRESET_LABELS: Record<Preset, string> = {
  hourly: 'Hourly',
  daily: 'Daily at',
  weekly: 'Weekly on',
  cron: 'Custom cron',
  interval: 'Every N seconds'
};

export const WEEKDAYS = [
  'Sunday',
  'Monday',
  'Tuesday',
  'Wednesday',
  'Thursday',
  'Friday',
  'Saturday'
] as const;

/** A new schedule's timing: daily at 02:00. */
export const DEFAULT_TIMING: ITimingText = {
  preset: 'daily',
  time: '02:00',
  day: '1',
  cron: '',
  interval: ''
};

/** `09:30` as cron's minute and hour fields (`30 9`); null when it is no time of day. */
function minuteHour(time: string): string | null {
  const match = /^(\d{1,2}):(\d{2})$/.exec(time.trim());
  if (!match) {
    return null;
  }
  const [hour, minute] = [Number(match[1]), Number(match[2])];
  if (hour > 23 || minute > 59) {
    return null;
  }
  return `${minute} ${hour}`;
}

/**
 * The cron expression a preset stands for (custom: as typed); null for an interval. A
 * preset without a time of day gives the text as typed, for the server to refuse.
 */
export function presetCron(timing: ITimingText): string | null {
  switch (timing.preset) {
    case 'hourly':
      return '0 * * * *';
    case 'daily':
      return `${minuteHour(timing.time) ?? timing.time.trim()} * * *`;
    case 'weekly':
      return `${minuteHour(timing.time) ?? timing.time.trim()} * * ${timing.day}`;
    case 'cron':
      return timing.cron.trim();
    case 'interval':
      return null;
  }
}

/** The request fields of the timing: `{cron}` or `{interval_seconds}` (as typed). */
export function timingFields(
  timing: ITimingText
): { cron: string } | { interval_seconds: string } {
  const cron = presetCron(timing);
  return cron === null
    ? { interval_seconds: timing.interval.trim() }
    : { cron };
}

function pad(value: number): string {
  return String(value).padStart(2, '0');
}

/** The form's timing for a saved schedule: its preset when the cron is one, else custom. */
export function timingOf(
  cron: string | null,
  intervalSeconds: number | null
): ITimingText {
  if (cron === null) {
    return {
      ...DEFAULT_TIMING,
      preset: 'interval',
      interval: intervalSeconds === null ? '' : String(intervalSeconds)
    };
  }
  if (cron === '0 * * * *') {
    return { ...DEFAULT_TIMING, preset: 'hourly' };
  }
  const match = /^(\d{1,2}) (\d{1,2}) \* \* (\*|[0-6])$/.exec(cron);
  if (match && Number(match[1]) < 60 && Number(match[2]) < 24) {
    const time = `${pad(Number(match[2]))}:${pad(Number(match[1]))}`;
    return match[3] === '*'
      ? { ...DEFAULT_TIMING, preset: 'daily', time }
      : { ...DEFAULT_TIMING, preset: 'weekly', time, day: match[3] };
  }
  return { ...DEFAULT_TIMING, preset: 'cron', cron };
}

/** The browser's IANA timezone (`Europe/Berlin`), UTC when it does not say. */
export function browserTimezone(): string {
  try {
    return Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC';
  } catch {
    return 'UTC';
  }
}

/** The IANA timezones the browser knows, with `extra` (the value shown) and UTC. */
export function timezones(...extra: string[]): string[] {
  const intl = Intl as unknown as {
    supportedValuesOf?: (key: string) => string[];
  };
  const known = intl.supportedValuesOf?.('timeZone') ?? [];
  return Array.from(new Set([...extra, 'UTC', ...known])).filter(Boolean);
}

/** The parts of an instant's wall-clock time in `timeZone`. */
function wallParts(iso: string, timeZone: string): Record<string, string> {
  const format = new Intl.DateTimeFormat('en-US', {
    timeZone,
    hourCycle: 'h23',
    year: 'numeric',
    month: '2-digit',
    day: '2-digit',
    hour: '2-digit',
    minute: '2-digit',
    second: '2-digit',
    weekday: 'short'
  });
  const parts: Record<string, string> = {};
  for (const part of format.formatToParts(new Date(iso))) {
    parts[part.type] = part.value;
  }
  return parts;
}

/**
 * An instant as `YYYY-MM-DDTHH:MM` on the wall clock of `timeZone`: what a
 * `datetime-local` input shows, and the server reads back in that zone. '' for none.
 */
export function wallTime(iso: string | null, timeZone: string): string {
  if (!iso || Number.isNaN(Date.parse(iso))) {
    return '';
  }
  try {
    const p = wallParts(iso, timeZone);
    return `${p.year}-${p.month}-${p.day}T${p.hour}:${p.minute}`;
  } catch {
    return iso;
  }
}

/**
 * A fire time as a person reads it in the schedule's timezone: `Sun 2026-11-29 09:30`
 * (seconds when it has some). The ISO text when it is none.
 */
export function formatFireTime(iso: string | null, timeZone: string): string {
  if (!iso || Number.isNaN(Date.parse(iso))) {
    return iso ?? '';
  }
  try {
    const p = wallParts(iso, timeZone);
    const seconds = p.second !== '00' ? `:${p.second}` : '';
    return `${p.weekday} ${p.year}-${p.month}-${p.day} ${p.hour}:${p.minute}${seconds}`;
  } catch {
    return iso;
  }
}
