/**
 * One schedule in the panel: its name, words and state, the next fire time, the last
 * run and what is running or waiting, its runs by logical time, and its actions.
 */
import { Button } from '@jupyterlab/ui-components';
import * as React from 'react';

import { ErrorMessage } from '../../common/components/ErrorMessage';
import { StatusBadge } from '../../common/components/StatusBadge';
import { formatFireTime } from '../format';
import type { ISchedule, IScheduleRun } from '../types';
import { RunGrid } from './RunGrid';

export interface IScheduleCardProps {
  schedule: ISchedule;
  runs: readonly IScheduleRun[];
  busy: boolean;
  error: string | null;
  /** The backfill box, when it is open for this schedule. */
  backfill: React.ReactNode;
  onPause: (paused: boolean) => void;
  onRunNow: () => void;
  onBackfill: () => void;
  onEdit: () => void;
  onDelete: () => void;
  /** Opens a run of the grid (null: none can be shown). */
  onOpenRun: ((run: IScheduleRun) => void) | null;
}

export function ScheduleCard(props: IScheduleCardProps): JSX.Element {
  const { schedule } = props;
  const zone = schedule.timezone;
  const last = schedule.last_run;
  return (
    <li
      className="cube-ScheduleCard"
      data-testid="cube-schedule"
      data-name={schedule.name}
      data-state={schedule.state}
    >
      <div className="cube-ScheduleCard-head">
        <span
          className="cube-ScheduleCard-name"
          data-testid="cube-schedule-name"
          title={schedule.path ?? undefined}
        >
          {schedule.name}
        </span>
        <StatusBadge status={schedule.state} testid="cube-schedule-state" />
      </div>
      <div
        className="cube-ScheduleCard-words"
        data-testid="cube-schedule-describe"
      >
        {schedule.describe}
      </div>
      <dl className="cube-ScheduleCard-facts">
        <dt>{schedule.kind === 'training' ? 'Job' : 'Notebook'}</dt>
        <dd className="cube-ScheduleCard-path" title={runsWhat(schedule)}>
          {runsWhat(schedule)}
        </dd>
        <dt>Next</dt>
        <dd
          data-testid="cube-schedule-next-fire"
          data-time={schedule.next_fire ?? ''}
          title={schedule.next_fire ?? ''}
        >
          {schedule.next_fire ? formatFireTime(schedule.next_fire, zone) : '—'}
        </dd>
        <dt>Last</dt>
        <dd data-testid="cube-schedule-last-run" data-state={last?.state ?? ''}>
          {last ? (
            <>
              <StatusBadge
                status={last.state}
                testid="cube-schedule-last-state"
              />{' '}
              <span title={last.logical_date}>
                {formatFireTime(last.logical_date, zone)}
              </span>
            </>
          ) : (
            'none yet'
          )}
        </dd>
        <dt>Now</dt>
        <dd
          data-testid="cube-schedule-counts"
          data-running={schedule.running}
          data-pending={schedule.pending}
        >
          {schedule.running} running, {schedule.pending} pending
        </dd>
      </dl>
      <RunGrid runs={props.runs} timezone={zone} onOpen={props.onOpenRun} />
      <div className="cube-ScheduleCard-actions">
        <Button
          className="cube-Button"
          minimal
          small
          data-testid="cube-schedule-pause"
          disabled={props.busy}
          onClick={() => props.onPause(!schedule.paused)}
        >
          {schedule.paused ? 'Resume' : 'Pause'}
        </Button>
        <Button
          className="cube-Button"
          minimal
          small
          data-testid="cube-schedule-run-now"
          disabled={props.busy}
          onClick={props.onRunNow}
        >
          Run now
        </Button>
        <Button
          className="cube-Button"
          minimal
          small
          data-testid="cube-schedule-backfill"
          onClick={props.onBackfill}
        >
          Backfill…
        </Button>
        <Button
          className="cube-Button"
          minimal
          small
          data-testid="cube-schedule-edit"
          disabled={schedule.kind !== 'notebook' || !schedule.path}
          onClick={props.onEdit}
        >
          Edit
        </Button>
        <Button
          className="cube-Button cube-mod-danger"
          minimal
          small
          data-testid="cube-schedule-delete"
          disabled={props.busy}
          onClick={props.onDelete}
        >
          Delete
        </Button>
      </div>
      <ErrorMessage message={props.error} testid="cube-schedule-action-error" />
      {props.backfill}
    </li>
  );
}

/** What a schedule runs: its notebook, or its training job's name. */
function runsWhat(schedule: ISchedule): string {
  if (schedule.kind === 'training') {
    const name = schedule.job?.name;
    return typeof name === 'string' ? name : schedule.name;
  }
  return schedule.path ?? '';
}
