/**
 * The caller's jobs, newest first: name, kind, status, ready/total replicas, GPUs and
 * age. Clicking a row shows that job.
 */
import * as React from 'react';

import { StatusBadge } from '../../components/StatusBadge';
import { jobAge, localTime, replicaCount } from '../format';
import type { IJob } from '../types';

export interface IJobListProps {
  jobs: readonly IJob[];
  selected: string | null;
  now: number;
  onSelect: (name: string) => void;
}

export function JobList(props: IJobListProps): JSX.Element {
  if (props.jobs.length === 0) {
    return (
      <div className="cube-Jobs-empty" data-testid="cube-jobs-empty">
        No jobs yet. Launch one with the buttons above.
      </div>
    );
  }
  return (
    <table className="cube-JobList" data-testid="cube-jobs-list">
      <thead>
        <tr>
          <th>Name</th>
          <th>Kind</th>
          <th>Status</th>
          <th title="Replicas running or done, of all">Replicas</th>
          <th>GPUs</th>
          <th>Age</th>
        </tr>
      </thead>
      <tbody>
        {props.jobs.map(job => (
          <tr
            key={job.name}
            className={`cube-JobList-row${job.name === props.selected ? ' cube-mod-selected' : ''}`}
            data-testid="cube-jobs-row"
            data-name={job.name}
            data-kind={job.kind}
            data-phase={job.phase}
            tabIndex={0}
            aria-selected={job.name === props.selected}
            onClick={() => props.onSelect(job.name)}
            onKeyDown={event => {
              if (event.key === 'Enter' || event.key === ' ') {
                event.preventDefault();
                props.onSelect(job.name);
              }
            }}
          >
            <td className="cube-JobList-name" title={job.name}>
              {job.name}
            </td>
            <td data-testid="cube-job-kind">
              {job.kind}
              {job.framework && (
                <span className="cube-JobList-framework">
                  {' '}
                  · {job.framework}
                </span>
              )}
            </td>
            <td>
              <StatusBadge
                status={job.phase.toLowerCase()}
                testid="cube-job-phase"
              />
            </td>
            <td data-testid="cube-job-replicas">{replicaCount(job)}</td>
            <td data-testid="cube-job-gpus">{job.gpus}</td>
            <td
              data-testid="cube-job-age"
              title={localTime(job.created)}
              className="cube-JobList-age"
            >
              {jobAge(job, props.now)}
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}
