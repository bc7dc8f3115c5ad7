/**
 * A schedule's runs by logical time, oldest to newest: one small square each, coloured
 * by its state; the tooltip says when, the state, the attempts and why. A square whose
 * run can be shown (a pipeline run; not a Workflow Argo's CronWorkflow started) opens it.
 */
import * as React from 'react';

import { plural } from '../../common/format';
import { formatFireTime } from '../format';
import type { IScheduleRun } from '../types';

export interface IRunGridProps {
  /** Newest first, as the server lists them. */
  runs: readonly IScheduleRun[];
  timezone: string;
  /** Opens a run (null: its runs cannot be shown here). */
  onOpen: ((run: IScheduleRun) => void) | null;
}

/** Whether a run can be opened here: a pipeline run of the workbench's (those Argo and KFP fired
 * themselves are their own: a Workflow, a KFP run). */
export function opensRun(run: IScheduleRun): boolean {
  return (
    Boolean(run.run_id) && run.origin !== 'cluster' && run.origin !== 'kfp'
  );
}

const FIRED_BY: Partial<Record<IScheduleRun['origin'], string>> = {
  cluster: 'Argo Workflow',
  kfp: 'KFP run'
};

export function tooltip(run: IScheduleRun, timezone: string): string {
  const lines = [
    `${formatFireTime(run.logical_date, timezone)} (${timezone})`,
    `${run.state}, ${plural(run.attempts, 'attempt')}, ${run.origin}`
  ];
  if (run.reason) {
    lines.push(run.reason);
  }
  if (run.run_id) {
    lines.push(`${FIRED_BY[run.origin] ?? 'run'} ${run.run_id}`);
  }
  return lines.join('\n');
}

export function RunGrid(props: IRunGridProps): JSX.Element {
  if (props.runs.length === 0) {
    return (
      <div className="cube-Schedules-empty" data-testid="cube-schedule-no-runs">
        No runs yet.
      </div>
    );
  }
  const oldestFirst = [...props.runs].reverse();
  return (
    <div className="cube-RunGrid" data-testid="cube-schedule-runs">
      {oldestFirst.map(run => {
        const open = props.onOpen && opensRun(run) ? props.onOpen : null;
        return (
          <button
            key={run.logical_date}
            type="button"
            className={`cube-RunGrid-cell cube-mod-${run.state}`}
            data-testid="cube-schedule-run"
            data-state={run.state}
            data-logical={run.logical_date}
            data-run={run.run_id ?? undefined}
            title={tooltip(run, props.timezone)}
            aria-label={`${run.logical_date} ${run.state}`}
            disabled={!open}
            onClick={() => open?.(run)}
          />
        );
      })}
    </div>
  );
}
