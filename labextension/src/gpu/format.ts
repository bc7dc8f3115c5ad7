/**
 * Display formatting of GPU figures only. `null` (the source did not report it) shows
 * as an en dash, never as 0.
 */

import { formatMebibytes } from '../common/format';

export const NOT_REPORTED = '–';

/** `37%`. */
export function formatPct(value: number | null | undefined): string {
  return value === null || value === undefined
    ? NOT_REPORTED
    : `${Math.round(value)}%`;
}

/** `512 MiB`, `1.5 GiB`, `79.6 GiB`; a dash when not reported. */
export function formatMiB(value: number | null | undefined): string {
  return value === null || value === undefined
    ? NOT_REPORTED
    : formatMebibytes(value);
}

/** `1.5 GiB / 80.0 GiB`. */
export function formatMemory(
  used: number | null | undefined,
  total: number | null | undefined
): string {
  if (total === null || total === undefined) {
    return formatMiB(used);
  }
  return `${formatMiB(used)} / ${formatMiB(total)}`;
}

/** A figure with its unit, e.g. `64 °C`, `210 W`. */
export function formatUnit(
  value: number | null | undefined,
  unit: string
): string {
  return value === null || value === undefined
    ? NOT_REPORTED
    : `${Math.round(value)} ${unit}`;
}

/** Fraction `part / whole` in 0..1 for a bar; 0 when either is unknown. */
export function fraction(
  part: number | null | undefined,
  whole: number | null | undefined
): number {
  if (part === null || part === undefined || !whole) {
    return 0;
  }
  return Math.min(1, Math.max(0, part / whole));
}

/** `GPU 0` for a device UUID the report lists, else a short UUID. */
export function gpuLabel(
  uuid: string,
  indexOf: ReadonlyMap<string, number>
): string {
  const index = indexOf.get(uuid);
  if (index !== undefined) {
    return `GPU ${index}`;
  }
  return uuid.length > 12 ? `${uuid.slice(0, 12)}…` : uuid;
}
