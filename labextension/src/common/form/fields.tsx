/**
 * Labelled fields of the workbench's forms: a label above the input for one request
 * field, a hint under the input and, when the server's error names that field, the
 * error under them. The label holds nothing but its words, so the inputs of a row stay
 * level whatever hints their fields carry.
 */
import * as React from 'react';

import { ErrorMessage } from '../components/ErrorMessage';
import { isInvalid, messageFor } from '../fieldError';
import { usePlacedError } from './context';
import type { IBound } from './formText';
import {
  IInputProps,
  ISelectInputProps,
  ITextInputProps,
  Option,
  SelectInput,
  TextInput
} from './inputs';

/** What a labelled field adds to its input. */
export interface ILabelled {
  label: string;
  hint?: string;
}

export interface IFieldProps extends ILabelled {
  /** The dotted request path the input writes, e.g. `resources.cpu`. */
  path: string;
  /** The id of the input the label names (and the hint describes, as `{id}-hint`). */
  inputId?: string;
  children: React.ReactNode;
}

/** A label, its input, its hint and, when the server's error names this field, the error. */
export function Field(props: IFieldProps): JSX.Element {
  const invalid = isInvalid(usePlacedError(), props.path);
  return (
    <div
      className={`cube-JobForm-field${invalid ? ' cube-mod-invalid-field' : ''}`}
      data-testid="cube-job-field"
      data-field={props.path}
    >
      <label className="cube-CreateForm-label" htmlFor={props.inputId}>
        {props.label}
      </label>
      {props.children}
      {props.hint && (
        <span
          className="cube-Field-hint"
          id={props.inputId && `${props.inputId}-hint`}
        >
          {props.hint}
        </span>
      )}
      <FieldError path={props.path} />
    </div>
  );
}

/** The server's error, when it names the field at `path`. */
export function FieldError(props: { path: string }): JSX.Element | null {
  return (
    <ErrorMessage
      message={messageFor(usePlacedError(), props.path)}
      testid="cube-job-field-error"
      field={props.path}
    />
  );
}

/** An input with its label (and its hint and the server's error under it). */
function labelled<P extends IInputProps>(
  Input: (props: P) => JSX.Element
): (props: P & ILabelled) => JSX.Element {
  return function LabelledInput(props) {
    const { label, hint, ...input } = props;
    const generated = React.useId();
    const id = input.id ?? generated;
    return (
      <Field label={label} path={props.path} hint={hint} inputId={id}>
        <Input
          {...(input as unknown as P)}
          id={id}
          describedBy={hint ? `${id}-hint` : undefined}
        />
      </Field>
    );
  };
}

/** A labelled text (or number) input. */
export const TextField = labelled<ITextInputProps>(TextInput);

/** A labelled choice. */
export const SelectField = labelled<ISelectInputProps>(SelectInput);

/** A labelled number input: sent as a number when it is one (see `numberOrText`). */
export function NumberField(
  props: Omit<ITextInputProps, 'type'> & ILabelled
): JSX.Element {
  return <TextField {...props} type="number" />;
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

/**
 * One field of a form, as data: the key of the form's text it shows, its label, and the
 * request path it writes (where the server's error about it shows).
 */
export interface IFieldSpec<K extends string> {
  key: K;
  label: string;
  path: string;
  hint?: string;
  placeholder?: string;
  /** A number input, with this minimum. */
  min?: number;
  /** A choice among these (else a text or number input). */
  options?: readonly Option[];
}

/** The request paths the fields write. */
export function pathsOf<K extends string>(
  fields: readonly IFieldSpec<K>[]
): string[] {
  return fields.map(field => field.path);
}

/** The labelled inputs of `fields`, each bound to its key of the form's text. */
export function Fields<K extends string>(props: {
  fields: readonly IFieldSpec<K>[];
  bind: (key: K) => IBound;
}): JSX.Element {
  return (
    <>
      {props.fields.map(({ key, options, ...field }) =>
        options ? (
          <SelectField
            key={key}
            {...field}
            options={options}
            {...props.bind(key)}
          />
        ) : (
          <TextField
            key={key}
            {...field}
            type={field.min === undefined ? 'text' : 'number'}
            {...props.bind(key)}
          />
        )
      )}
    </>
  );
}

/** Fields laid out together: in a titled row with `legend`, else in the form's grid. */
export function FieldGroup<K extends string>(props: {
  fields: readonly IFieldSpec<K>[];
  bind: (key: K) => IBound;
  legend?: string;
}): JSX.Element {
  const fields = <Fields fields={props.fields} bind={props.bind} />;
  return props.legend ? (
    <FieldRow legend={props.legend}>{fields}</FieldRow>
  ) : (
    <div className="cube-JobForm-grid">{fields}</div>
  );
}
