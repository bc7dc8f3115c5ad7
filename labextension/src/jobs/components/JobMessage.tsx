/**
 * Why a job failed (or is pending), cause first: the exception and the user's own
 * frames, then what ended; the whole traceback, with the workbench's frames, folded
 * behind "Show full traceback". Without a traceback, the job's message as sent.
 */
import * as React from 'react';

import type { IJob, IJobError } from '../types';

export function JobMessage(props: { job: IJob }): JSX.Element | null {
  const { job } = props;
  if (job.error) {
    return <JobFailure error={job.error} />;
  }
  if (!job.message) {
    return null;
  }
  return (
    <pre
      className={`cube-JobDetail-message${job.phase === 'Failed' ? ' cube-mod-failed' : ''}`}
      data-testid="cube-job-message"
    >
      {job.message}
    </pre>
  );
}

function JobFailure(props: { error: IJobError }): JSX.Element {
  const { error } = props;
  return (
    <div
      className="cube-JobDetail-message cube-mod-failed cube-JobFailure"
      data-testid="cube-job-message"
    >
      <div className="cube-JobFailure-cause" data-testid="cube-job-error-cause">
        {error.cause}
      </div>
      {error.frames.length > 0 && (
        <pre
          className="cube-JobFailure-frames"
          data-testid="cube-job-error-frames"
        >
          {error.frames.join('\n')}
        </pre>
      )}
      <div
        className="cube-JobFailure-context"
        data-testid="cube-job-error-context"
      >
        {error.context}
      </div>
      <details
        className="cube-JobFailure-details"
        data-testid="cube-job-error-details"
      >
        <summary>Show full traceback</summary>
        <pre
          className="cube-JobFailure-traceback"
          data-testid="cube-job-error-traceback"
        >
          {error.traceback}
        </pre>
      </details>
    </div>
  );
}
