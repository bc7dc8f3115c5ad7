/**
 * Kueue's queue and priority for one job, among those the admin offers on the cluster
 * (`CubeQueues.user_queues` / `user_priority_classes`): no field when none are offered;
 * left empty, the admin's queue for the kind.
 */
import type { IFieldSpec } from '../../../common/form/fields';
import { compact, textOrNothing } from '../../../common/form/values';
import type { IJobsConfig } from '../../types';

export interface IQueueText {
  queue: string;
  priority: string;
}

export const NO_QUEUE: IQueueText = { queue: '', priority: '' };

export function queueFields(
  vocabulary: IJobsConfig,
  kind: 'training' | 'tuning'
): IFieldSpec<keyof IQueueText>[] {
  const queues = vocabulary.availability?.queues;
  if (!queues) {
    return [];
  }
  const admins = queues.defaults[kind];
  const fields: IFieldSpec<keyof IQueueText>[] = [];
  if (queues.offered.length) {
    fields.push({
      key: 'queue',
      label: 'Queue',
      path: 'queue',
      options: [
        { value: '', label: admins ? `${admins} (the admin's)` : 'none' },
        ...queues.offered.filter(queue => queue !== admins)
      ]
    });
  }
  if (queues.priorities.length) {
    fields.push({
      key: 'priority',
      label: 'Priority',
      path: 'priority',
      options: [{ value: '', label: "the admin's" }, ...queues.priorities]
    });
  }
  return fields;
}

/** The spec's `queue` and `priority`: left out when empty. */
export function queueSpec(text: IQueueText): Record<string, unknown> {
  return compact({
    queue: textOrNothing(text.queue),
    priority: textOrNothing(text.priority)
  });
}
