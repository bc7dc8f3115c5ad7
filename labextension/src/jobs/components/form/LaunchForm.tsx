/**
 * What every launch form shares: its props (the model's launch state and actions), the
 * form element with the Launch button, the server's error for the fields inside, and
 * that error at the bottom when it names no field of the form.
 */
import { Button } from '@jupyterlab/ui-components';
import * as React from 'react';

import { ErrorMessage } from '../../../common/components/ErrorMessage';
import { IFieldError, placed } from '../../../common/fieldError';
import { PlacedErrorContext } from '../../../common/form';
import type { IJobsConfig, JobKind } from '../../types';

/** The props of each kind's launch form. */
export interface ILaunchFormProps {
  launching: boolean;
  error: IFieldError | null;
  /** What the server accepts: frameworks and their roles, formats, algorithms. */
  vocabulary: IJobsConfig;
  /** Sends the spec; true when the server accepted it. */
  onLaunch: (spec: Record<string, unknown>) => Promise<boolean>;
  onEdit: () => void;
}

export interface ILaunchFormShellProps {
  kind: JobKind;
  /** The form's own props, as the panel gives them. */
  form: ILaunchFormProps;
  /** The dotted spec paths the form's inputs write (where the server's error can show). */
  paths: readonly string[];
  /** The form's text: its name is cleared once the server accepted the spec. */
  text: { set: (key: 'name', value: string) => void };
  /** The spec as typed. */
  spec: () => Record<string, unknown>;
  children: React.ReactNode;
}

/**
 * The form element around a kind's fields: it sends the spec, places the server's error
 * for the fields inside, and shows it at the bottom when it names none of them.
 */
export function LaunchFormShell(props: ILaunchFormShellProps): JSX.Element {
  const { form } = props;
  const error = placed(props.paths, form.error);
  const submit = async () => {
    if (await form.onLaunch(props.spec())) {
      props.text.set('name', ''); // a new job needs a new name
    }
  };
  return (
    <form
      className="cube-JobForm"
      data-testid="cube-job-form"
      data-kind={props.kind}
      onSubmit={event => {
        event.preventDefault();
        void submit();
      }}
    >
      <PlacedErrorContext.Provider value={error}>
        {props.children}
      </PlacedErrorContext.Provider>
      <LaunchButton launching={form.launching} />
      {error && error.at === null && (
        <ErrorMessage message={error.message} testid="cube-job-form-error" />
      )}
    </form>
  );
}

/** The form's submit button. */
function LaunchButton(props: { launching: boolean }): JSX.Element {
  return (
    <div className="cube-CreateForm-actions">
      <Button
        type="submit"
        className="cube-Button cube-mod-accept"
        data-testid="cube-job-launch"
        disabled={props.launching}
      >
        {props.launching ? 'Launching…' : 'Launch'}
      </Button>
    </div>
  );
}
