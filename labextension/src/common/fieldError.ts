/**
 * The server's 4xx answer is `{message, reason, field}`: what went wrong and the dotted
 * field of the request it is about (`name`, `replicas.worker`, `parameters.lr`,
 * `cells[3].tags`). Every panel keeps it as an `IFieldError` and shows it by the input
 * that wrote that field, or where the user acted when no input did: `placeError` decides.
 */

/** An error the server answered, with the field it names (null: none). */
export interface IFieldError {
  message: string;
  field: string | null;
}

/** The `IFieldError` of whatever was thrown (an API error names its field). */
export function fieldError(error: unknown): IFieldError {
  if (error instanceof Error) {
    const field = (error as { field?: unknown }).field;
    return {
      message: error.message,
      field: typeof field === 'string' ? field : null
    };
  }
  return { message: String(error), field: null };
}

/**
 * Which of a form's fields (dotted paths its inputs write) an error naming `field`
 * belongs to: the field itself, else the one field inside it (`replicas.worker` →
 * `replicas.worker.replicas`; when several are, none of them is singled out), else the
 * closest field around it (`parameters.lr.max` → `parameters.lr`, `cells[3].tags` →
 * `cells[3]`). Null when none matches: the error then shows where the user acted.
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
  const inside = paths.filter(path => path.startsWith(`${field}.`));
  if (inside.length) {
    return inside.length === 1 ? inside[0] : null;
  }
  const around = paths
    .filter(path => field.startsWith(`${path}.`))
    .sort((a, b) => b.length - a.length);
  return around[0] ?? null;
}

/** An error split into the field it shows at (null: none of the form's) and the message. */
export interface IPlacedError {
  at: string | null;
  message: string;
}

/** `error` placed among the form's `paths`. */
export function placed(
  paths: readonly string[],
  error: IFieldError | null | undefined
): IPlacedError | null {
  return error
    ? { at: placeError(paths, error.field), message: error.message }
    : null;
}

/** Whether the placed error belongs to the input writing `path` (for `aria-invalid`). */
export function isInvalid(
  error: IPlacedError | null | undefined,
  path: string
): boolean {
  return !!error && error.at === path;
}

/** Whether the placed error is at `path` or a field inside it (e.g. a table row's inputs). */
export function isWithin(
  error: IPlacedError | null | undefined,
  path: string
): boolean {
  return !!error?.at && (error.at === path || error.at.startsWith(`${path}.`));
}

/** The message to show by the input writing `path`, if the error is about it. */
export function messageFor(
  error: IPlacedError | null | undefined,
  path: string
): string | null {
  return isInvalid(error, path) ? error!.message : null;
}
