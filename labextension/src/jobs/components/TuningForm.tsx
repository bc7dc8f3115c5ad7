/**
 * The tuning launch form: the objective, the search algorithm, one row per parameter,
 * the trial (a notebook run with each trial's parameters, or a training script given
 * them as `--NAME=VALUE`) and the trial budget. It sends a tuning spec as typed; the
 * server checks it and its error shows by the field it names.
 */
import { addIcon, Button, closeIcon } from '@jupyterlab/ui-components';
import * as React from 'react';

import { ErrorMessage } from '../../common/components/ErrorMessage';
import { Table } from '../../common/components/Table';
import { isWithin } from '../../common/fieldError';
import {
  argsText,
  IParameterText,
  overFile,
  parameterTexts,
  section,
  textOf
} from '../specText';
import type { IJobsConfig } from '../types';
import {
  compact,
  example,
  FieldError,
  FieldGroup,
  IFieldSpec,
  ILaunchFormProps,
  LaunchFormShell,
  numberOrText,
  pathsOf,
  queueFields,
  queueSpec,
  SelectInput,
  TextInput,
  textOrNothing,
  useFormText,
  usePlacedError,
  useRoleCounts
} from './form';

type IValueTypes = IJobsConfig['tuning']['value_types'];

interface IParameterRow extends IParameterText {
  key: number;
}

/** The tuning spec's keys this form shows (a file's others are sent as written). */
const SHOWN = [
  'name',
  'objective',
  'algorithm',
  'parameters',
  'trial',
  'max_trials',
  'parallel_trials',
  'queue',
  'priority'
];
/** The keys of a script trial's training spec this form shows. */
const TRIAL_SHOWN = ['framework', 'replicas', 'script', 'args'];
const TRIAL_KINDS = [
  { value: 'notebook', label: 'A notebook' },
  { value: 'script', label: 'A training script' }
];

function newRow(key: number, type: string, name = ''): IParameterRow {
  return {
    key,
    name,
    type,
    min: '',
    max: '',
    step: '',
    values: '',
    log: false
  };
}

/**
 * A row as the spec's `parameters.NAME` entry: a range, or for the types the server takes
 * as a list (`valueTypes`) the values typed, numbers sent as numbers where it wants them.
 */
function parameterSpec(
  row: IParameterRow,
  valueTypes: IValueTypes
): Record<string, unknown> {
  const values = valueTypes[row.type];
  if (values) {
    const items = row.values
      .split(',')
      .map(v => v.trim())
      .filter(v => v !== '');
    return {
      type: row.type,
      values: values === 'number' ? items.map(v => numberOrText(v)) : items
    };
  }
  return compact({
    type: row.type,
    min: numberOrText(row.min),
    max: numberOrText(row.max),
    step: numberOrText(row.step),
    log: row.log ? true : undefined
  });
}

export function TuningForm(props: ILaunchFormProps): JSX.Element {
  const vocabulary = props.vocabulary.tuning;
  const training = props.vocabulary.training;
  const { defaults, value_types: valueTypes } = vocabulary;
  const file = props.file?.spec;
  const objectiveFile = section(file, 'objective');
  const algorithmFile = section(file, 'algorithm');
  const trialFile = section(file, 'trial');
  const trainingFile = section(trialFile, 'training');
  const form = useFormText(
    {
      name: textOf(file?.name),
      metric: textOf(objectiveFile.metric),
      goalType: textOf(objectiveFile.type) || defaults.objective_type,
      goal: textOf(objectiveFile.goal),
      algorithm: textOf(algorithmFile.name) || defaults.algorithm,
      trialKind: trialFile.training !== undefined ? 'script' : 'notebook',
      notebook: textOf(trialFile.notebook),
      framework: textOf(trainingFile.framework) || training.defaults.framework,
      script: textOf(trainingFile.script),
      args: argsText(trainingFile.args),
      // A file's budget as written (left out: the server's defaults).
      maxTrials: file ? textOf(file.max_trials) : '12',
      parallelTrials: file ? textOf(file.parallel_trials) : '2',
      queue: textOf(file?.queue),
      priority: textOf(file?.priority)
    },
    props.onEdit
  );
  const { text, bind } = form;
  const roles = useRoleCounts(
    training.frameworks,
    text.framework,
    'trial.training.',
    file ? trainingFile.replicas : undefined,
    props.onEdit
  );
  const [rows, setRows] = React.useState<IParameterRow[]>(() =>
    file
      ? parameterTexts(file.parameters, defaults.parameter_type).map(
          (row, key) => ({ ...row, key })
        )
      : [newRow(0, defaults.parameter_type, 'lr')]
  );
  const nextKey = React.useRef(rows.length);

  const editRows = (next: IParameterRow[]) => {
    setRows(next);
    props.onEdit();
  };
  const editRow = (key: number, change: Partial<IParameterRow>) =>
    editRows(rows.map(row => (row.key === key ? { ...row, ...change } : row)));

  const rowPaths = (row: IParameterRow) => {
    const at = `parameters.${row.name.trim()}`;
    const keys = valueTypes[row.type]
      ? ['type', 'values']
      : ['type', 'min', 'max', 'step', 'log'];
    return [at, ...keys.map(k => `${at}.${k}`)];
  };
  type Key = keyof typeof text;
  const job: IFieldSpec<Key>[] = [
    {
      key: 'name',
      label: 'Name',
      path: 'name',
      placeholder: example('tune-mnist')
    },
    {
      key: 'trialKind',
      label: 'Each trial runs',
      path: 'trial',
      options: TRIAL_KINDS
    }
  ];
  const trialFields: IFieldSpec<Key>[] =
    text.trialKind === 'notebook'
      ? [
          {
            key: 'notebook',
            label: 'Trial notebook',
            path: 'trial.notebook',
            hint: "its parameters cell gets each trial's values",
            placeholder: example('train.ipynb')
          }
        ]
      : [
          {
            key: 'framework',
            label: 'Framework',
            path: 'trial.training.framework',
            options: training.frameworks
          },
          {
            key: 'script',
            label: 'Script',
            path: 'trial.training.script',
            hint: "given each trial's values as --NAME=VALUE",
            placeholder: example('train.py')
          },
          {
            key: 'args',
            label: 'Arguments',
            path: 'trial.training.args',
            hint: 'before the parameters',
            placeholder: example('--epochs 1')
          }
        ];
  const objective: IFieldSpec<Key>[] = [
    {
      key: 'metric',
      label: 'Metric',
      path: 'objective.metric',
      hint: 'name=value',
      placeholder: example('accuracy')
    },
    {
      key: 'goalType',
      label: 'Type',
      path: 'objective.type',
      options: vocabulary.objective_types
    },
    {
      key: 'goal',
      label: 'Goal',
      path: 'objective.goal',
      hint: 'optional',
      placeholder: example('0.99')
    },
    {
      key: 'algorithm',
      label: 'Algorithm',
      path: 'algorithm.name',
      options: vocabulary.algorithms
    }
  ];
  const trials: IFieldSpec<Key>[] = [
    { key: 'maxTrials', label: 'Max trials', path: 'max_trials', min: 1 },
    {
      key: 'parallelTrials',
      label: 'In parallel',
      path: 'parallel_trials',
      min: 1
    }
  ];
  const queue = queueFields(props.vocabulary, 'tuning');
  const paths = [
    ...pathsOf([...job, ...trialFields, ...objective, ...trials, ...queue]),
    ...pathsOf(roles.fields),
    'parameters',
    ...rows.flatMap(rowPaths)
  ];

  const trial = () =>
    text.trialKind === 'notebook'
      ? overFile(
          trialFile.notebook !== undefined ? trialFile : undefined,
          { notebook: text.notebook.trim() },
          ['notebook']
        )
      : {
          training: overFile(
            trainingFile,
            compact({
              framework: text.framework,
              replicas: roles.spec(trainingFile.replicas),
              script: text.script.trim(),
              args: textOrNothing(text.args)
            }),
            TRIAL_SHOWN
          )
        };
  const spec = () => {
    const parameters: Record<string, unknown> = {};
    for (const row of rows) {
      parameters[row.name.trim()] = parameterSpec(row, valueTypes);
    }
    // An algorithm's settings are its own: kept while it stays the file's.
    const sameAlgorithm = text.algorithm === algorithmFile.name;
    return overFile(
      file,
      compact({
        name: text.name.trim(),
        objective: overFile(
          objectiveFile,
          compact({
            metric: text.metric.trim(),
            type: text.goalType,
            goal: numberOrText(text.goal)
          }),
          ['metric', 'type', 'goal']
        ),
        algorithm: sameAlgorithm
          ? { ...algorithmFile, name: text.algorithm }
          : { name: text.algorithm },
        parameters,
        trial: trial(),
        max_trials: numberOrText(text.maxTrials),
        parallel_trials: numberOrText(text.parallelTrials),
        ...queueSpec(text)
      }),
      SHOWN
    );
  };

  return (
    <LaunchFormShell
      kind="tuning"
      form={props}
      text={form}
      paths={paths}
      spec={spec}
      shown={SHOWN}
    >
      <FieldGroup fields={job} bind={bind} />
      <FieldGroup legend="Trial" fields={trialFields} bind={bind} />
      {text.trialKind === 'script' && (
        <FieldGroup
          legend="Trial replicas per role"
          fields={roles.fields}
          bind={roles.bind}
        />
      )}
      <FieldGroup legend="Objective" fields={objective} bind={bind} />
      <fieldset
        className="cube-JobForm-group"
        data-testid="cube-job-field"
        data-field="parameters"
      >
        <legend>Parameters</legend>
        <Table
          className="cube-JobForm-parameters"
          columns={['Name', 'Type', 'Min', 'Max', 'Step', 'Values', 'Log', '']}
        >
          {rows.map(row => (
            <ParameterRow
              key={row.key}
              row={row}
              types={vocabulary.parameter_types}
              values={valueTypes[row.type]}
              removable={rows.length > 1}
              onChange={change => editRow(row.key, change)}
              onRemove={() => editRows(rows.filter(r => r.key !== row.key))}
            />
          ))}
        </Table>
        <div>
          <Button
            className="cube-Button"
            minimal
            small
            data-testid="cube-tuning-add-parameter"
            onClick={() =>
              editRows([
                ...rows,
                newRow(nextKey.current++, defaults.parameter_type)
              ])
            }
          >
            <addIcon.react tag="span" elementSize="small" /> Parameter
          </Button>
        </div>
        <FieldError path="parameters" />
      </fieldset>
      <FieldGroup legend="Trials" fields={trials} bind={bind} />
      {queue.length > 0 && (
        <FieldGroup legend="Queue" fields={queue} bind={bind} />
      )}
    </LaunchFormShell>
  );
}

interface IParameterRowProps {
  row: IParameterRow;
  /** The parameter types the server knows. */
  types: readonly string[];
  /** What the row's type takes a list of (none: a range). */
  values: 'number' | 'any' | undefined;
  removable: boolean;
  onChange: (change: Partial<IParameterRow>) => void;
  onRemove: () => void;
}

/** One search dimension; the server's error about it shows under the row. */
function ParameterRow(props: IParameterRowProps): JSX.Element {
  const { row } = props;
  const error = usePlacedError();
  const at = `parameters.${row.name.trim()}`;
  const mine = isWithin(error, at);
  const values = !!props.values;
  const cell = (key: 'min' | 'max' | 'step' | 'values', placeholder = '') => (
    <td>
      <TextInput
        path={`${at}.${key}`}
        value={row[key]}
        placeholder={placeholder}
        onChange={value => props.onChange({ [key]: value })}
      />
    </td>
  );
  return (
    <>
      <tr
        className={mine ? 'cube-mod-invalid-row' : undefined}
        data-testid="cube-tuning-parameter"
        data-name={row.name.trim()}
      >
        <td>
          <TextInput
            path={at}
            testid="cube-job-input-parameter-name"
            ariaLabel="Parameter name"
            value={row.name}
            placeholder={example('lr')}
            onChange={name => props.onChange({ name })}
          />
        </td>
        <td>
          <SelectInput
            path={`${at}.type`}
            value={row.type}
            options={props.types}
            onChange={type => props.onChange({ type })}
          />
        </td>
        {values ? (
          <>
            <td className="cube-mod-disabled">—</td>
            <td className="cube-mod-disabled">—</td>
            <td className="cube-mod-disabled">—</td>
            {cell(
              'values',
              example(props.values === 'number' ? '16, 32, 64' : 'sgd, adam')
            )}
          </>
        ) : (
          <>
            {cell('min', example('0.0001'))}
            {cell('max', example('0.1'))}
            {cell('step', 'optional')}
            <td className="cube-mod-disabled">—</td>
          </>
        )}
        <td>
          <input
            type="checkbox"
            aria-label="Log scale"
            data-testid={`cube-job-input-${at}.log`}
            disabled={values}
            checked={row.log && !values}
            onChange={event => props.onChange({ log: event.target.checked })}
          />
        </td>
        <td>
          {props.removable && (
            <Button
              className="cube-Button"
              minimal
              small
              title="Remove this parameter"
              onClick={props.onRemove}
            >
              <closeIcon.react tag="span" elementSize="small" />
            </Button>
          )}
        </td>
      </tr>
      {mine && (
        <tr>
          <td colSpan={8}>
            <ErrorMessage
              message={error?.message}
              testid="cube-job-field-error"
              field={error?.at}
            />
          </td>
        </tr>
      )}
    </>
  );
}
