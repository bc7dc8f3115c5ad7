/**
 * A labelled time-of-day or date-and-time input (`time`, `datetime-local`), named and
 * marked invalid by its request field like the form's other inputs.
 */
import * as React from 'react';

import { isInvalid } from '../../common/fieldError';
import { Field, usePlacedError } from '../../common/form';

export interface IWhenFieldProps {
  label: string;
  /** The dotted request path the input writes (`start`), or the form key (`at`). */
  path: string;
  type: 'time' | 'datetime-local';
  value: string;
  onChange: (value: string) => void;
  hint?: string;
}

export function WhenField(props: IWhenFieldProps): JSX.Element {
  const id = React.useId();
  const invalid = isInvalid(usePlacedError(), props.path);
  return (
    <Field label={props.label} path={props.path} hint={props.hint} inputId={id}>
      <input
        id={id}
        name={props.path}
        data-testid={`cube-job-input-${props.path}`}
        className={`jp-mod-styled cube-CreateForm-input${invalid ? ' cube-mod-invalid' : ''}`}
        type={props.type}
        aria-invalid={invalid}
        aria-describedby={props.hint ? `${id}-hint` : undefined}
        value={props.value}
        onChange={event => props.onChange(event.target.value)}
      />
    </Field>
  );
}
