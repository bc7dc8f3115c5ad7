/**
 * What the launch forms send for what was typed: the text as typed (trimmed), never
 * checked here; the server checks the spec and names the field that is wrong.
 */

/**
 * What a number field sends: a number when the text is one, else the text as typed
 * (the server then says what is wrong with it); nothing when empty.
 */
export function numberOrText(text: string): number | string | undefined {
  const trimmed = text.trim();
  if (!trimmed) {
    return undefined;
  }
  return /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(trimmed)
    ? Number(trimmed)
    : trimmed;
}

/** What a text field sends: the trimmed text, or nothing when empty. */
export function textOrNothing(text: string): string | undefined {
  const trimmed = text.trim();
  return trimmed ? trimmed : undefined;
}

/** A spec without the keys left empty. */
export function compact(
  body: Record<string, unknown>
): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(body)) {
    if (value === undefined) {
      continue;
    }
    if (
      value !== null &&
      typeof value === 'object' &&
      !Array.isArray(value) &&
      Object.keys(value).length === 0
    ) {
      continue;
    }
    out[key] = value;
  }
  return out;
}
