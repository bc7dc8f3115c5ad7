/**
 * The schedule form of a notebook: name, when (with the server's words and next fire
 * times as you type), start and end, the notebook's parameters, and how runs behave.
 * Saving creates the schedule (or edits it); the server checks the spec and its error
 * shows by the field it names.
 */
import { Button } from '@jupyterlab/ui-components';
import * as React from 'react';

import type { Query } from '../../common/api';
import { ErrorMessage } from '../../common/components/ErrorMessage';
import { SectionTitle } from '../../common/components/PanelHeader';
import { IFieldError, placed } from '../../common/fieldError';
import {
  example,
  PlacedErrorContext,
  TextField,
  useFormText
} from '../../common/form';
import { ParametersForm } from '../../pipeline/components/ParametersForm';
import { parametersToSend } from '../../pipeline/format';
import type { IParameter } from '../../pipeline/types';
import type { ScheduleClient } from '../client';
import {
  browserTimezone,
  DEFAULT_TIMING,
  ITimingText,
  timezones,
  timingFields
} from '../format';
import type { IScheduleFormTarget } from '../model';
import { usePreview } from '../preview';
import {
  IScheduleText,
  newScheduleText,
  parameterStart,
  scheduleBody,
  scheduleText
} from '../spec';
import { PolicyFields } from './PolicyFields';
import { PreviewBox } from './PreviewBox';
import { TimingFields } from './TimingFields';
import { WhenField } from './WhenInput';

export interface IScheduleFormProps {
  target: IScheduleFormTarget;
  client: ScheduleClient;
  saving: boolean;
  error: IFieldError | null;
  /** The names of the user's schedules (what `depends_on` may name). */
  names: readonly string[];
  onSave: (body: () => Record<string, unknown>) => void;
  onCancel: () => void;
  /** An input changed (the error shown speaks of what was sent before). */
  onEdit: () => void;
}

const TIMING_PATHS = ['interval_seconds', 'cron', 'timezone', 'start'];
const PATHS = [
  'name',
  ...TIMING_PATHS,
  'end',
  'catchup',
  'concurrency_policy',
  'max_concurrency',
  'retries',
  'retry_backoff_seconds',
  'depends_on',
  'depends_timeout_seconds',
  'paused'
];

/** What the preview asks for the timing typed; null when there is nothing to ask yet. */
function previewQuery(timing: ITimingText, text: IScheduleText): Query | null {
  const when = timingFields(timing);
  const timezone = text.timezone;
  if ('cron' in when) {
    return when.cron ? { cron: when.cron, timezone } : null;
  }
  return when.interval_seconds
    ? { interval_seconds: when.interval_seconds, timezone, start: text.start }
    : null;
}

export function ScheduleForm(props: IScheduleFormProps): JSX.Element {
  const { target } = props;
  const editing = target.schedule;
  const start = React.useMemo(
    () =>
      editing
        ? scheduleText(editing)
        : { text: newScheduleText(browserTimezone()), timing: DEFAULT_TIMING },
    [target.key]
  );
  const form = useFormText<keyof IScheduleText>(start.text, props.onEdit);
  const { text, bind } = form;
  const [timing, setTiming] = React.useState(start.timing);
  const [texts, setTexts] = React.useState(new Map<string, string>());
  const preview = usePreview(props.client, previewQuery(timing, text));
  const zones = React.useMemo(() => timezones(text.timezone), [text.timezone]);

  const parameters = target.parameters ?? [];
  const saved = editing?.parameters ?? null;
  const parameterValue = (p: IParameter) =>
    texts.get(p.name) ?? parameterStart(p, saved);
  const paramPaths = parameters.map(p => `parameters.${p.name}`);
  // The save's error, else the preview's (about the timing typed).
  const previewError =
    preview.error && TIMING_PATHS.includes(preview.error.field ?? '')
      ? preview.error
      : null;
  const shown = props.error ?? previewError;
  const error = placed([...PATHS, ...paramPaths], shown);

  const body = () =>
    scheduleBody(
      text,
      timing,
      target.path,
      parametersToSend(
        parameters,
        new Map(parameters.map(p => [p.name, parameterValue(p)]))
      ),
      !!editing
    );
  const others = props.names.filter(name => name !== editing?.name);
  return (
    <form
      className="cube-JobForm cube-ScheduleForm"
      data-testid="cube-schedule-form"
      data-mode={editing ? 'edit' : 'create'}
      onSubmit={event => {
        event.preventDefault();
        props.onSave(body);
      }}
    >
      <SectionTitle>
        {editing ? `Edit schedule ${editing.name}` : 'New schedule'}
      </SectionTitle>
      <div
        className="cube-ScheduleForm-path"
        data-testid="cube-schedule-path"
        title="The notebook it runs, as saved"
      >
        {target.path}
      </div>
      {target.unsaved && (
        <div
          className="cube-ScheduleForm-note"
          data-testid="cube-schedule-unsaved"
        >
          The notebook has unsaved changes: a schedule runs the saved file.
        </div>
      )}
      <PlacedErrorContext.Provider value={error}>
        <TextField
          label="Name"
          path="name"
          placeholder={example('nightly-train')}
          disabled={!!editing}
          {...bind('name')}
        />
        <TimingFields
          timing={timing}
          onTiming={value => {
            setTiming(value);
            props.onEdit();
          }}
          timezone={bind('timezone')}
          timezones={zones}
        />
        <PreviewBox state={preview} />
        <fieldset className="cube-JobForm-group">
          <legend>Between (optional)</legend>
          <div className="cube-JobForm-row">
            <WhenField
              label="Start"
              path="start"
              type="datetime-local"
              {...bind('start')}
            />
            <WhenField
              label="End"
              path="end"
              type="datetime-local"
              {...bind('end')}
            />
          </div>
          <div className="cube-Backfill-hint">
            Read in the schedule’s timezone; empty: from now on, forever.
          </div>
        </fieldset>
        <fieldset className="cube-JobForm-group">
          <legend>Parameters</legend>
          <ErrorMessage
            message={target.parametersError}
            testid="cube-schedule-parameters-error"
          />
          {target.parameters === null ? (
            <div className="cube-Schedules-empty">Loading…</div>
          ) : (
            <ParametersForm
              parameters={parameters}
              value={parameterValue}
              error={shown}
              onChange={(name, value) => {
                setTexts(new Map(texts).set(name, value));
                props.onEdit();
              }}
            />
          )}
          {error?.at?.startsWith('parameters.') && (
            <ErrorMessage
              message={error.message}
              testid="cube-job-field-error"
              field={error.at}
            />
          )}
        </fieldset>
        <PolicyFields bind={bind} others={others} creating={!editing} />
        <label className="cube-ScheduleForm-check">
          <input
            type="checkbox"
            data-testid="cube-job-input-paused"
            checked={text.paused === 'true'}
            onChange={event =>
              bind('paused').onChange(event.target.checked ? 'true' : '')
            }
          />
          Paused (saved, but fires only once resumed)
        </label>
      </PlacedErrorContext.Provider>
      <div className="cube-CreateForm-actions">
        <Button
          type="submit"
          className="cube-Button cube-mod-accept"
          data-testid="cube-schedule-save"
          disabled={props.saving || target.parameters === null}
        >
          {props.saving ? 'Saving…' : editing ? 'Save changes' : 'Save'}
        </Button>
        <Button
          className="cube-Button"
          minimal
          data-testid="cube-schedule-cancel"
          onClick={props.onCancel}
        >
          Cancel
        </Button>
      </div>
      {error && error.at === null && (
        <ErrorMessage
          message={error.message}
          testid="cube-schedule-form-error"
        />
      )}
    </form>
  );
}
