/**
 * A tuning job's trials: each one's parameter assignment, state and objective, the best
 * trial highlighted, and the best parameters found so far above the table.
 */
import * as React from 'react';

import { Table } from '../../common/components/Table';
import { formatValue } from '../format';
import type { IJob, IJobTrial } from '../types';

/** The objective's name and direction, as the job's spec gives them. */
export function objectiveOf(job: IJob): { metric: string; type: string } {
  const objective = (job.spec.objective ?? {}) as Record<string, unknown>;
  return {
    metric: typeof objective.metric === 'string' ? objective.metric : '',
    type: typeof objective.type === 'string' ? objective.type : ''
  };
}

/** Parameter names in the spec's order, then any others the trials carry. */
function parameterNames(job: IJob): string[] {
  const names = Object.keys(
    (job.spec.parameters ?? {}) as Record<string, unknown>
  );
  for (const trial of job.trials) {
    for (const name of Object.keys(trial.parameters)) {
      if (!names.includes(name)) {
        names.push(name);
      }
    }
  }
  return names;
}

export function BestTrial(props: { job: IJob }): JSX.Element | null {
  const { job } = props;
  const best = job.trials.find(t => t.name === job.best_trial);
  if (!best) {
    return null;
  }
  const { metric } = objectiveOf(job);
  return (
    <div
      className="cube-BestTrial"
      data-testid="cube-job-best"
      data-trial={best.name}
    >
      <span className="cube-BestTrial-label">Best</span>
      <span className="cube-BestTrial-name">{best.name}</span>
      {best.objective !== null && (
        <span className="cube-BestTrial-objective">
          {metric || 'objective'} = {formatValue(best.objective)}
        </span>
      )}
      <span className="cube-BestTrial-parameters">
        {Object.entries(best.parameters).map(([name, value]) => (
          <code key={name} data-testid="cube-job-best-parameter">
            {name}={formatValue(value)}
          </code>
        ))}
      </span>
    </div>
  );
}

export function TrialTable(props: { job: IJob }): JSX.Element {
  const { job } = props;
  const names = parameterNames(job);
  const { metric, type } = objectiveOf(job);
  if (job.trials.length === 0) {
    return <div className="cube-Jobs-empty">No trials yet.</div>;
  }
  return (
    <Table
      className="cube-JobTable"
      testid="cube-job-trials"
      columns={[
        'Trial',
        'State',
        ...names,
        {
          label: `${metric || 'objective'}${type === 'maximize' ? ' ↑' : type === 'minimize' ? ' ↓' : ''}`,
          title: type ? `${type} ${metric}` : undefined
        }
      ]}
    >
      {job.trials.map((trial: IJobTrial) => {
        const best = trial.name === job.best_trial;
        return (
          <tr
            key={trial.name}
            className={best ? 'cube-mod-best' : undefined}
            data-testid="cube-job-trial"
            data-trial={trial.name}
            data-state={trial.state}
            data-best={best ? 'true' : undefined}
          >
            <td>{trial.name}</td>
            <td>
              <span
                className={`cube-TrialState cube-mod-${trial.state.toLowerCase()}`}
              >
                {trial.state}
              </span>
            </td>
            {names.map(name => (
              <td key={name} className="cube-JobTable-number">
                {name in trial.parameters
                  ? formatValue(trial.parameters[name])
                  : ''}
              </td>
            ))}
            <td className="cube-JobTable-number">
              {trial.objective === null ? '' : formatValue(trial.objective)}
            </td>
          </tr>
        );
      })}
    </Table>
  );
}
