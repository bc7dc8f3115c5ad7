/**
 * The caller's jobs, newest first: name, kind, status, ready/total replicas, GPUs and
 * age. Clicking a row shows that job.
 */
import * as React from 'react';

import { StatusBadge } from '../../common/components/StatusBadge';
import { QueuePlace } from './QueuePlace';
import { Table } from '../../common/components/Table';
import { jobAge, jobKey, localTime, replicaCount } from '../format';
import type { IJob } from '../types';

export interface IJobListProps {
  jobs: readonly IJob[];
  /** The key (`user/name`) of the job shown. */
  selected: string | null;
  /** Whether to show each job's owner (an admin looking at every user's jobs). */
  showUser: boolean;
  now: number;
  onSelect: (job: IJob) => void;
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
    <Table
      className="cube-JobList"
      testid="cube-jobs-list"
      columns={[
        'Name',
        props.showUser && 'User',
        'Kind',
        'Status',
        { label: 'Replicas', title: 'Replicas running or done, of all' },
        'GPUs',
        'Age'
      ]}
    >
      {props.jobs.map(job => {
        const selected = jobKey(job) === props.selected;
        return (
          <tr
            key={jobKey(job)}
            className={`cube-JobList-row${selected ? ' cube-mod-selected' : ''}`}
            data-testid="cube-jobs-row"
            data-name={job.name}
            data-user={job.user}
            data-kind={job.kind}
            data-phase={job.phase}
            tabIndex={0}
            aria-selected={selected}
            onClick={() => props.onSelect(job)}
            onKeyDown={event => {
              if (event.key === 'Enter' || event.key === ' ') {
                event.preventDefault();
                props.onSelect(job);
              }
            }}
          >
            <td className="cube-JobList-name" title={job.name}>
              {job.name}
            </td>
            {props.showUser && <td>{job.user}</td>}
            <td data-testid="cube-job-kind">
              {job.kind}
              {job.framework && (
                <span className="cube-JobList-framework">
                  {' '}
                  · {job.framework}
                </span>
              )}
            </td>
            <td className="cube-JobList-status">
              <StatusBadge
                status={job.phase.toLowerCase()}
                testid="cube-job-phase"
              />
              <QueuePlace job={job} />
            </td>
            <td className="cube-JobList-count" data-testid="cube-job-replicas">
              {replicaCount(job)}
            </td>
            <td className="cube-JobList-count" data-testid="cube-job-gpus">
              {job.gpus}
            </td>
            <td
              data-testid="cube-job-age"
              title={localTime(job.created)}
              className="cube-JobList-count cube-JobList-age"
            >
              {jobAge(job, props.now)}
            </td>
          </tr>
        );
      })}
    </Table>
  );
}
