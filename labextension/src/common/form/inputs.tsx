/**
 * The inputs of the workbench's forms, one per request field: named and test-identified
 * by the field's dotted path, and marked invalid when the server's error (of the form
 * around them) names that field.
 */
import { HTMLSelect } from '@jupyterlab/ui-components';
import * as React from 'react';

import { isInvalid } from '../fieldError';
import { usePlacedError } from './context';

/** What every input shares: the field it writes, its value and how it changes. */
export interface IInputProps {
  /** The dotted request path the input writes, e.g. `resources.cpu`. */
  path: string;
  value: string;
  onChange: (value: string) => void;
  /** The element id (for a `<label htmlFor>`). */
  id?: string;
  /** `data-testid`; `cube-job-input-{path}` when left out. */
  testid?: string;
  /** `aria-label`, for an input without a `<label>`. */
  ariaLabel?: string;
  /** The id of the text that describes the input (its hint). */
  describedBy?: string;
  disabled?: boolean;
}

export interface ITextInputProps extends IInputProps {
  placeholder?: string;
  type?: 'text' | 'number';
  min?: number;
  inputRef?: React.Ref<HTMLInputElement>;
}

/** The attributes an input takes from its props and the form's error. */
function useInputAttributes(props: IInputProps) {
  const invalid = isInvalid(usePlacedError(), props.path);
  return {
    invalid,
    attributes: {
      id: props.id,
      'data-testid': props.testid ?? `cube-job-input-${props.path}`,
      name: props.path,
      'aria-label': props.ariaLabel,
      'aria-describedby': props.describedBy,
      'aria-invalid': invalid,
      disabled: props.disabled,
      value: props.value
    }
  };
}

/** A text (or number) input for one field. */
export function TextInput(props: ITextInputProps): JSX.Element {
  const { invalid, attributes } = useInputAttributes(props);
  return (
    <input
      {...attributes}
      ref={props.inputRef}
      className={`jp-mod-styled cube-CreateForm-input${invalid ? ' cube-mod-invalid' : ''}`}
      type={props.type ?? 'text'}
      min={props.min}
      autoComplete="off"
      spellCheck={false}
      placeholder={props.placeholder}
      onChange={event => props.onChange(event.target.value)}
    />
  );
}

/** A choice: its value, or its value and label. */
export type Option = string | { value: string; label: string };

export interface ISelectInputProps extends IInputProps {
  options: readonly Option[];
}

/** A choice for one field. */
export function SelectInput(props: ISelectInputProps): JSX.Element {
  const { invalid, attributes } = useInputAttributes(props);
  return (
    <HTMLSelect
      {...attributes}
      className={invalid ? 'cube-mod-invalid' : undefined}
      onChange={event => props.onChange(event.target.value)}
      options={props.options.map(o =>
        typeof o === 'string' ? { value: o, label: o } : o
      )}
    />
  );
}
