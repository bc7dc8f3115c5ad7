/**
 * Display formatting only: turns what the server sent into short text. No decision
 * about a server's, job's or run's state is taken here.
 */

/** `45s`, `5m`, `2h 10m`, `4d 3h`: a span of whole seconds, in its two largest units. */
export function formatElapsed(seconds: number): string {
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) {
    return `${s}s`;
  }
  const minutes = Math.floor(s / 60);
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

/** The time since `iso`, measured at `now` (ms), as `formatElapsed` writes it. */
export function formatAge(iso: string | null, now: number): string {
  if (!iso) {
    return '';
  }
  const then = Date.parse(iso);
  if (Number.isNaN(then)) {
    return '';
  }
  return formatElapsed((now - then) / 1000);
}

/** A local, readable date for tooltips. */
export function formatDate(iso: string | null): string {
  if (!iso) {
    return '';
  }
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : date.toLocaleString();
}

/** An ISO date from the API's unix seconds. */
export function isoFromSeconds(seconds: number | null): string | null {
  return seconds === null ? null : new Date(seconds * 1000).toISOString();
}

/** `1 GPU`, `2 GPUs`: a count with its noun, plural when not one. */
export function plural(count: number, noun: string): string {
  return `${count} ${noun}${count === 1 ? '' : 's'}`;
}

/** GPU memory: `512 MiB`, `1.5 GiB`, `79.6 GiB`. */
export function formatMebibytes(value: number): string {
  if (Math.abs(value) < 1024) {
    return `${Math.round(value)} MiB`;
  }
  return `${(value / 1024).toFixed(1)} GiB`;
}
