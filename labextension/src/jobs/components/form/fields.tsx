/**
 * Labelled fields of the launch forms: a label, the input for one spec field and, when
 * the server's error names that field, the error under it.
 */
import * as React from 'react';

import { ErrorMessage } from '../../../components/ErrorMessage';
import {
  ISelectInputProps,
  ITextInputProps,
  SelectInput,
  TextInput
} from './inputs';
import { isInvalid, usePlacedError } from './placement';

/** What a labelled field adds to its input. */
export interface ILabelled {
  label: string;
  hint?: string;
}

export interface IFieldProps extends ILabelled {
  /** The dotted spec path the input writes, e.g. `resources.cpu`. */
  path: string;
  children: React.ReactNode;
}

/** A label, its input and, when the server's error names this field, the error. */
export function Field(props: IFieldProps): JSX.Element {
  const invalid = isInvalid(usePlacedError(), props.path);
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
      <FieldError path={props.path} />
    </div>
  );
}

/** The server's error, when it names the spec field at `path`. */
export function FieldError(props: { path: string }): JSX.Element | null {
  const error = usePlacedError();
  return isInvalid(error, props.path) ? (
    <ErrorMessage
      message={error?.message}
      testid="cube-job-field-error"
      field={props.path}
    />
  ) : null;
}

/** A labelled text (or number) input. */
export function TextField(props: ITextInputProps & ILabelled): JSX.Element {
  const { label, hint, ...input } = props;
  return (
    <Field label={label} path={input.path} hint={hint}>
      <TextInput {...input} />
    </Field>
  );
}

/** A labelled number input: sent as a number when it is one (see `numberOrText`). */
export function NumberField(
  props: Omit<ITextInputProps, 'type'> & ILabelled
): JSX.Element {
  return <TextField {...props} type="number" />;
}

/** A labelled choice. */
export function SelectField(props: ISelectInputProps & ILabelled): JSX.Element {
  const { label, hint, ...input } = props;
  return (
    <Field label={label} path={input.path} hint={hint}>
      <SelectInput {...input} />
    </Field>
  );
}

/** A titled group of fields laid out in a row (e.g. "Resources per replica"). */
export function FieldRow(props: {
  legend: string;
  children: React.ReactNode;
}): JSX.Element {
  return (
    <fieldset className="cube-JobForm-group">
      <legend>{props.legend}</legend>
      <div className="cube-JobForm-row">{props.children}</div>
    </fieldset>
  );
}
