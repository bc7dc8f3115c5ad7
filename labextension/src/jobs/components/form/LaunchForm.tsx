/**
 * What every launch form shares: its props (the model's launch state and actions), the
 * form element with the Launch button and the YAML save and export actions, the server's
 * error for the fields inside, and that error at the bottom when it names no field of
 * the form.
 */
import { InputDialog } from '@jupyterlab/apputils';
import { PathExt } from '@jupyterlab/coreutils';
import { Button } from '@jupyterlab/ui-components';
import * as React from 'react';

import { ErrorMessage } from '../../../common/components/ErrorMessage';
import { IFieldError, placed } from '../../../common/fieldError';
import { PlacedErrorContext } from '../../../common/form';
import type { ISpecDraft } from '../../model';
import { keptKeys } from '../../specText';
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
  /** The spec file the form starts from (opened with "Run as Job"), if any. */
  file?: ISpecDraft;
  /** Saving the spec as a YAML file: in flight, its error, the path last written. */
  saving: { busy: boolean; error: IFieldError | null; saved: string | null };
  /** Writes the spec as YAML to `path`; true when written. */
  onSave: (spec: Record<string, unknown>, path: string) => Promise<boolean>;
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
  /** The spec keys the form shows: a file's others are sent as written. */
  shown: readonly string[];
  children: React.ReactNode;
}

/**
 * The form element around a kind's fields: it sends the spec, places the server's error
 * for the fields inside, and shows it at the bottom when it names none of them.
 */
export function LaunchFormShell(props: ILaunchFormShellProps): JSX.Element {
  const { form } = props;
  const error = placed(props.paths, form.error);
  const { file, saving } = form;
  const submit = async () => {
    if (await form.onLaunch(props.spec())) {
      props.text.set('name', ''); // a new job needs a new name
    }
  };
  const exportAs = async () => {
    const spec = props.spec();
    const name =
      typeof spec.name === 'string' && spec.name ? spec.name : props.kind;
    const answer = await InputDialog.getText({
      title: 'Export as YAML',
      label: 'Save the spec to (a path under the Lab root):',
      text: PathExt.join(
        file ? PathExt.dirname(file.path) : '',
        `${name}.yaml`
      ),
      okLabel: 'Save'
    });
    if (answer.button.accept && answer.value?.trim()) {
      await form.onSave(spec, answer.value.trim());
    }
  };
  const kept = keptKeys(file?.spec, props.shown);
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
      {file && (
        <div className="cube-JobForm-file" data-testid="cube-job-form-file">
          From <code>{file.path}</code>
          {kept.length > 0 && (
            <>; sent as the file writes them: {kept.join(', ')}</>
          )}
        </div>
      )}
      <PlacedErrorContext.Provider value={error}>
        {props.children}
      </PlacedErrorContext.Provider>
      <div className="cube-CreateForm-actions">
        <Button
          type="submit"
          className="cube-Button cube-mod-accept"
          data-testid="cube-job-launch"
          disabled={form.launching}
        >
          {form.launching ? 'Launching…' : 'Launch'}
        </Button>
        {file && (
          <Button
            type="button"
            className="cube-Button"
            data-testid="cube-job-save-yaml"
            title={`Write the spec as typed to ${file.path}`}
            disabled={saving.busy}
            onClick={() => void form.onSave(props.spec(), file.path)}
          >
            Save as YAML
          </Button>
        )}
        <Button
          type="button"
          className="cube-Button"
          minimal
          data-testid="cube-job-export-yaml"
          title="Write the spec as typed to a YAML file you name"
          disabled={saving.busy}
          onClick={() => void exportAs()}
        >
          Export as YAML…
        </Button>
      </div>
      {error && error.at === null && (
        <ErrorMessage message={error.message} testid="cube-job-form-error" />
      )}
      <ErrorMessage
        message={saving.error?.message}
        testid="cube-job-save-error"
        field={saving.error?.field}
      />
      {saving.saved && (
        <div className="cube-JobForm-saved" data-testid="cube-job-saved">
          Saved to <code>{saving.saved}</code>
        </div>
      )}
    </form>
  );
}
