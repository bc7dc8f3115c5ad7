/**
 * Backfill a range of logical times: start, end and how many at once; first a dry run
 * lists the times that would run and those already succeeded, then Confirm queues them.
 */
import { Button } from '@jupyterlab/ui-components';
import * as React from 'react';

import { ErrorMessage } from '../../common/components/ErrorMessage';
import { IFieldError, placed } from '../../common/fieldError';
import {
  numberOrText,
  PlacedErrorContext,
  TextField,
  useFormText
} from '../../common/form';
import { plural } from '../../common/format';
import { formatFireTime } from '../format';
import type { IBackfillState } from '../model';
import type { IBackfillRequest } from '../types';
import { WhenField } from './WhenInput';

export interface IBackfillBoxProps {
  state: IBackfillState;
  timezone: string;
  busy: boolean;
  error: IFieldError | null;
  onPlan: (request: IBackfillRequest) => void;
  onConfirm: () => void;
  onEdit: () => void;
  onClose: () => void;
}

const PATHS = ['start', 'end', 'parallel'];

function Times(props: {
  title: string;
  times: readonly string[];
  testid: string;
  timezone: string;
}): JSX.Element | null {
  if (props.times.length === 0) {
    return null;
  }
  return (
    <div className="cube-Backfill-times">
      <div className="cube-Backfill-title">
        {props.title}: {props.times.length}
      </div>
      <ul>
        {props.times.map(time => (
          <li key={time} data-testid={props.testid} data-time={time}>
            {formatFireTime(time, props.timezone)}
          </li>
        ))}
      </ul>
    </div>
  );
}

export function BackfillBox(props: IBackfillBoxProps): JSX.Element {
  const form = useFormText({ start: '', end: '', parallel: '' }, props.onEdit);
  const { text, bind } = form;
  const { plan, queued } = props.state;
  const error = placed(PATHS, props.error);
  const request = (): IBackfillRequest => {
    const parallel = numberOrText(text.parallel);
    return {
      start: text.start,
      end: text.end,
      ...(parallel === undefined ? {} : { parallel })
    };
  };
  const zone = props.timezone;
  return (
    <form
      className="cube-Backfill"
      data-testid="cube-backfill"
      onSubmit={event => {
        event.preventDefault();
        props.onPlan(request());
      }}
    >
      <PlacedErrorContext.Provider value={error}>
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
          <TextField
            label="At once"
            path="parallel"
            type="number"
            min={1}
            placeholder="1"
            {...bind('parallel')}
          />
        </div>
      </PlacedErrorContext.Provider>
      <div className="cube-Backfill-hint">Times are read in {zone}.</div>
      {plan && (
        <div className="cube-Backfill-plan" data-testid="cube-backfill-plan">
          {plan.logical_dates.length === 0 && (
            <div className="cube-Schedules-empty">
              The schedule does not fire in that range.
            </div>
          )}
          <Times
            title="Will run"
            times={plan.to_run}
            testid="cube-backfill-to-run"
            timezone={zone}
          />
          <Times
            title="Already succeeded (kept)"
            times={plan.already_succeeded}
            testid="cube-backfill-done"
            timezone={zone}
          />
          <Times
            title="In progress"
            times={plan.in_progress}
            testid="cube-backfill-going"
            timezone={zone}
          />
        </div>
      )}
      {queued && (
        <div
          className="cube-Backfill-queued"
          data-testid="cube-backfill-queued"
        >
          Queued {plural(queued.to_run.length, 'run')}.
        </div>
      )}
      <div className="cube-CreateForm-actions">
        {plan && plan.to_run.length > 0 ? (
          <Button
            className="cube-Button cube-mod-accept"
            data-testid="cube-backfill-confirm"
            disabled={props.busy}
            onClick={props.onConfirm}
          >
            Confirm {plural(plan.to_run.length, 'run')}
          </Button>
        ) : (
          <Button
            type="submit"
            className="cube-Button cube-mod-accept"
            data-testid="cube-backfill-plan-button"
            disabled={props.busy}
          >
            {props.busy ? 'Asking…' : 'Dry run'}
          </Button>
        )}
        <Button
          className="cube-Button"
          minimal
          data-testid="cube-backfill-close"
          onClick={props.onClose}
        >
          {queued ? 'Close' : 'Cancel'}
        </Button>
      </div>
      {error && error.at === null && (
        <ErrorMessage message={error.message} testid="cube-backfill-error" />
      )}
    </form>
  );
}
