/**
 * How a schedule's runs behave: catch-up of missed fire times, concurrency, retries and
 * a dependency on another of the user's schedules. Left empty, a new schedule takes the
 * server's defaults.
 */
import * as React from 'react';

import { FieldGroup, IBound, IFieldSpec, Option } from '../../common/form';
import type { IScheduleText } from '../spec';

type Key = keyof IScheduleText;

export interface IPolicyFieldsProps {
  bind: (key: Key) => IBound;
  /** The user's other schedules (what `depends_on` may name). */
  others: readonly string[];
  /** A new schedule: empty choices read "Default". */
  creating: boolean;
}

const DEFAULT = 'default';

export function PolicyFields(props: IPolicyFieldsProps): JSX.Element {
  const choice = (values: string[]): Option[] => [
    ...(props.creating ? [{ value: '', label: 'Default' }] : []),
    ...values
  ];
  const runs: IFieldSpec<Key>[] = [
    {
      key: 'catchup',
      label: 'Catch up',
      path: 'catchup',
      hint: 'missed fire times that run',
      options: choice(['none', 'latest', 'all'])
    },
    {
      key: 'concurrency_policy',
      label: 'Overlap',
      path: 'concurrency_policy',
      hint: 'when a run is still going',
      options: choice(['Allow', 'Forbid', 'Replace'])
    },
    {
      key: 'max_concurrency',
      label: 'Max concurrent',
      path: 'max_concurrency',
      placeholder: DEFAULT,
      min: 1
    }
  ];
  const retries: IFieldSpec<Key>[] = [
    {
      key: 'retries',
      label: 'Retries',
      path: 'retries',
      placeholder: DEFAULT,
      min: 0
    },
    {
      key: 'retry_backoff_seconds',
      label: 'Backoff (s)',
      path: 'retry_backoff_seconds',
      placeholder: DEFAULT,
      min: 0
    }
  ];
  const depends: IFieldSpec<Key>[] = [
    {
      key: 'depends_on',
      label: 'After schedule',
      path: 'depends_on',
      hint: 'its run of the same logical time succeeded',
      options: [{ value: '', label: 'None' }, ...props.others]
    },
    {
      key: 'depends_timeout_seconds',
      label: 'Wait at most (s)',
      path: 'depends_timeout_seconds',
      placeholder: DEFAULT,
      min: 0
    }
  ];
  return (
    <>
      <FieldGroup legend="Runs" fields={runs} bind={props.bind} />
      <FieldGroup legend="Retries" fields={retries} bind={props.bind} />
      <FieldGroup legend="Depends on" fields={depends} bind={props.bind} />
    </>
  );
}
