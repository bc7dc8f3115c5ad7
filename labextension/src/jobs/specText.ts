/**
 * A spec file's fields as the text a launch form shows, and the form's spec laid back
 * over the file: what the form does not show (a role's resources, env, volumes, an
 * algorithm's settings) is sent as the file wrote it, never dropped.
 */

export type Spec = Record<string, unknown>;

function isSpec(value: unknown): value is Spec {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/** The object at `key` of a spec, or an empty one. */
export function section(spec: Spec | undefined, key: string): Spec {
  const value = spec?.[key];
  return isSpec(value) ? value : {};
}

/** A spec value as an input's text: empty when absent. */
export function textOf(value: unknown): string {
  return value === undefined || value === null ? '' : String(value);
}

/** An argument list as one line, quoted as a shell would split it back (as the server does). */
export function argsText(value: unknown): string {
  if (!Array.isArray(value)) {
    return textOf(value);
  }
  return value
    .map(word => {
      const text = String(word);
      return text === '' || /[\s'"\\$`]/.test(text)
        ? `'${text.replace(/'/g, `'"'"'`)}'`
        : text;
    })
    .join(' ');
}

/**
 * The spec as typed laid over the file's, in the file's order: the `shown` keys are the
 * form's (cleared in the form, left out), every other key of the file is kept as written.
 */
export function overFile(
  file: Spec | undefined,
  typed: Spec,
  shown: readonly string[]
): Spec {
  const merged: Spec = {};
  for (const [key, value] of Object.entries(file ?? {})) {
    if (!shown.includes(key)) {
      merged[key] = value;
    } else if (key in typed) {
      merged[key] = typed[key];
    }
  }
  return { ...merged, ...typed };
}

/** The file's keys a form does not show: kept as written, and said so by the form. */
export function keptKeys(
  file: Spec | undefined,
  shown: readonly string[]
): string[] {
  return Object.keys(file ?? {}).filter(key => !shown.includes(key));
}

/** Each role's replica count in a spec's `replicas` (`master: 1` or `worker: {replicas: 2}`). */
export function roleCounts(replicas: unknown): Record<string, string> {
  const counts: Record<string, string> = {};
  for (const [role, value] of Object.entries(
    isSpec(replicas) ? replicas : {}
  )) {
    counts[role] = textOf(isSpec(value) ? value.replicas : value);
  }
  return counts;
}

/** A spec's `replicas`: each role's count as typed, over the file's settings of that role. */
export function replicasSpec(
  counts: Record<string, number | string | undefined>,
  file: unknown
): Spec {
  const replicas: Spec = {};
  for (const [role, count] of Object.entries(counts)) {
    const written = isSpec(file) ? file[role] : undefined;
    if (count !== undefined) {
      replicas[role] = isSpec(written)
        ? { ...written, replicas: count }
        : { replicas: count };
    }
  }
  return replicas;
}

/** A parameter of a spec's `parameters`, as the tuning form's row shows it. */
export interface IParameterText {
  name: string;
  type: string;
  min: string;
  max: string;
  step: string;
  values: string;
  log: boolean;
}

/** The rows of a tuning spec's `parameters`; `defaultType` where a parameter names none. */
export function parameterTexts(
  parameters: unknown,
  defaultType: string
): IParameterText[] {
  return Object.entries(isSpec(parameters) ? parameters : {}).map(
    ([name, raw]) => {
      const body = isSpec(raw) ? raw : {};
      return {
        name,
        type: textOf(body.type) || defaultType,
        min: textOf(body.min),
        max: textOf(body.max),
        step: textOf(body.step),
        values: Array.isArray(body.values) ? body.values.join(', ') : '',
        log: body.log === true
      };
    }
  );
}
