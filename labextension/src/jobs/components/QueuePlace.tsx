import * as React from 'react';

import { queueWhere } from '../format';
import type { IJob } from '../types';

/** A queued job's place (and Kueue's LocalQueue on the cluster) and what it waits for, beside its
 * phase (nothing once it is admitted). */
export function QueuePlace(props: { job: IJob }): JSX.Element | null {
  const queue = props.job.queue;
  if (!queue) {
    return null;
  }
  return (
    <span
      className="cube-JobQueuePlace"
      data-testid="cube-job-queue"
      title={queue.reason}
    >
      {queueWhere(queue)}
      {queue.reason}
    </span>
  );
}
