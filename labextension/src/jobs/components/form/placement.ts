/**
 * Where the server's error shows in a launch form: by the field (dotted spec path) it
 * names, or at the bottom of the form when it names a field no input writes.
 */
import * as React from 'react';

import type { IFieldError } from '../../model';

/**
 * Which of the form's fields (dotted spec paths) an error naming `field` belongs to:
 * the field itself, else the closest field inside it (`replicas.worker` →
 * `replicas.worker.replicas`), else the closest field around it (`parameters.lr.max` →
 * `parameters.lr`). Null when none matches.
 */
export function placeError(
  paths: readonly string[],
  field: string | null | undefined
): string | null {
  if (!field) {
    return null;
  }
  if (paths.includes(field)) {
    return field;
  }
  const inside = paths
    .filter(path => path.startsWith(`${field}.`))
    .sort((a, b) => a.length - b.length);
  if (inside.length) {
    return inside[0];
  }
  const around = paths
    .filter(path => field.startsWith(`${path}.`))
    .sort((a, b) => b.length - a.length);
  return around[0] ?? null;
}

/** The error of a form, split into the field it shows at and the message. */
export interface IPlacedError {
  at: string | null;
  message: string;
}

export function placed(
  paths: readonly string[],
  error: IFieldError | null
): IPlacedError | null {
  return error
    ? { at: placeError(paths, error.field), message: error.message }
    : null;
}

/** Whether the error belongs to the input writing `path` (for `aria-invalid`). */
export function isInvalid(error: IPlacedError | null, path: string): boolean {
  return !!error && error.at === path;
}

/** The form's placed error, for the fields inside it (given by `LaunchFormShell`). */
export const PlacedErrorContext = React.createContext<IPlacedError | null>(
  null
);

/** The placed error of the form around the caller. */
export function usePlacedError(): IPlacedError | null {
  return React.useContext(PlacedErrorContext);
}
