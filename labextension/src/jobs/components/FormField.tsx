/**
 * Form building blocks of the launch forms: a labelled input that shows the server's
 * error when the error names its spec field, and where an error goes when it names a
 * field no input writes (then it shows at the bottom of the form).
 */
import { HTMLSelect } from '@jupyterlab/ui-components';
import * as React from 'react';

import { ErrorMessage } from '../../components/ErrorMessage';
import type { IFieldError } from '../model';

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

export interface IFieldProps {
  label: string;
  /** The dotted spec path the input writes, e.g. `resources.cpu`. */
  path: string;
  error: IPlacedError | null;
  hint?: string;
  children: React.ReactNode;
}

/** A label, its input and, when the server's error names this field, the error. */
export function Field(props: IFieldProps): JSX.Element {
  const invalid = !!props.error && props.error.at === props.path;
  return (
    <div
      className={`cube-JobForm-field${invalid ? ' cube-mod-invalid-field' : ''}`}
      data-testid="cube-job-field"
      data-field={props.path}
    >
      <label className="cube-CreateForm-label">
        {props.label}
        {props.hint && <span className="cube-JobForm-hint">{props.hint}</span>}
      </label>
      {props.children}
      {invalid && (
        <ErrorMessage
          message={props.error?.message}
          testid="cube-job-field-error"
          field={props.path}
        />
      )}
    </div>
  );
}

/** Whether the error belongs to the input writing `path` (for `aria-invalid`). */
export function isInvalid(error: IPlacedError | null, path: string): boolean {
  return !!error && error.at === path;
}

export interface ITextInputProps {
  path: string;
  value: string;
  error: IPlacedError | null;
  onChange: (value: string) => void;
  placeholder?: string;
  type?: 'text' | 'number';
  min?: number;
}

/** A text (or number) input for one spec field. */
export function TextInput(props: ITextInputProps): JSX.Element {
  const invalid = isInvalid(props.error, props.path);
  return (
    <input
      className={`jp-mod-styled cube-CreateForm-input${invalid ? ' cube-mod-invalid' : ''}`}
      data-testid={`cube-job-input-${props.path}`}
      name={props.path}
      type={props.type ?? 'text'}
      min={props.min}
      autoComplete="off"
      spellCheck={false}
      placeholder={props.placeholder}
      aria-invalid={invalid}
      value={props.value}
      onChange={event => props.onChange(event.target.value)}
    />
  );
}

export interface ISelectInputProps {
  path: string;
  value: string;
  error: IPlacedError | null;
  options: readonly (string | { value: string; label: string })[];
  onChange: (value: string) => void;
}

/** A choice for one spec field. */
export function SelectInput(props: ISelectInputProps): JSX.Element {
  const invalid = isInvalid(props.error, props.path);
  return (
    <HTMLSelect
      className={invalid ? 'cube-mod-invalid' : undefined}
      data-testid={`cube-job-input-${props.path}`}
      name={props.path}
      aria-invalid={invalid}
      value={props.value}
      onChange={event => props.onChange(event.target.value)}
      options={props.options.map(o =>
        typeof o === 'string' ? { value: o, label: o } : o
      )}
    />
  );
}

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
