/**
 * The inputs of the launch forms, one per spec field: named and test-identified by the
 * field's dotted path, and marked invalid when the server's error (of the form around
 * them) names that field.
 */
import { HTMLSelect } from '@jupyterlab/ui-components';
import * as React from 'react';

import { isInvalid, usePlacedError } from './placement';

export interface ITextInputProps {
  path: string;
  value: string;
  onChange: (value: string) => void;
  placeholder?: string;
  type?: 'text' | 'number';
  min?: number;
}

/** A text (or number) input for one spec field. */
export function TextInput(props: ITextInputProps): JSX.Element {
  const invalid = isInvalid(usePlacedError(), props.path);
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
  options: readonly (string | { value: string; label: string })[];
  onChange: (value: string) => void;
}

/** A choice for one spec field. */
export function SelectInput(props: ISelectInputProps): JSX.Element {
  const invalid = isInvalid(usePlacedError(), props.path);
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
