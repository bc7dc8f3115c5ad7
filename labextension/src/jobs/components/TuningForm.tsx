/**
 * The tuning launch form: the objective, the search algorithm, one row per parameter,
 * the trial notebook and the trial budget. It sends a tuning spec as typed; the server
 * checks it and its error shows by the field it names.
 */
import { addIcon, Button, closeIcon } from '@jupyterlab/ui-components';
import * as React from 'react';

import { ErrorMessage } from '../../components/ErrorMessage';
import {
  compact,
  FieldRow,
  FieldError,
  ILaunchFormProps,
  isInvalid,
  LaunchFormShell,
  NumberField,
  numberOrText,
  SelectField,
  SelectInput,
  TextField,
  TextInput,
  useFormText,
  usePlacedError
} from './form';

/** Katib's algorithm names (Optuna runs them locally). */
const ALGORITHMS = [
  { value: 'random', label: 'Random search' },
  { value: 'grid', label: 'Grid' },
  { value: 'bayesianoptimization', label: 'Bayesian optimization' },
  { value: 'tpe', label: 'TPE' },
  { value: 'cmaes', label: 'CMA-ES' },
  { value: 'hyperband', label: 'Hyperband' }
];
const PARAMETER_TYPES = ['double', 'int', 'categorical', 'discrete'];

interface IParameterRow {
  key: number;
  name: string;
  type: string;
  min: string;
  max: string;
  step: string;
  values: string;
  log: boolean;
}

function newRow(key: number, name = ''): IParameterRow {
  return {
    key,
    name,
    type: 'double',
    min: '',
    max: '',
    step: '',
    values: '',
    log: false
  };
}

function hasValues(type: string): boolean {
  return type === 'categorical' || type === 'discrete';
}

/** A row as the spec's `parameters.NAME` entry: a range, or a list of values. */
function parameterSpec(row: IParameterRow): Record<string, unknown> {
  if (hasValues(row.type)) {
    const items = row.values
      .split(',')
      .map(v => v.trim())
      .filter(v => v !== '');
    return {
      type: row.type,
      values: row.type === 'discrete' ? items.map(v => numberOrText(v)) : items
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
  const { text, bind, set } = useFormText(
    {
      name: '',
      metric: '',
      goalType: 'maximize',
      goal: '',
      algorithm: 'tpe',
      notebook: '',
      maxTrials: '12',
      parallelTrials: '2'
    },
    props.onEdit
  );
  const [rows, setRows] = React.useState<IParameterRow[]>([newRow(0, 'lr')]);
  const nextKey = React.useRef(1);

  const editRows = (next: IParameterRow[]) => {
    setRows(next);
    props.onEdit();
  };
  const editRow = (key: number, change: Partial<IParameterRow>) =>
    editRows(rows.map(row => (row.key === key ? { ...row, ...change } : row)));

  const rowPaths = (row: IParameterRow) => {
    const at = `parameters.${row.name.trim()}`;
    const keys = hasValues(row.type)
      ? ['type', 'values']
      : ['type', 'min', 'max', 'step', 'log'];
    return [at, ...keys.map(k => `${at}.${k}`)];
  };
  const paths = [
    'name',
    'objective.metric',
    'objective.type',
    'objective.goal',
    'algorithm.name',
    'parameters',
    ...rows.flatMap(rowPaths),
    'trial.notebook',
    'max_trials',
    'parallel_trials'
  ];

  const spec = () => {
    const parameters: Record<string, unknown> = {};
    for (const row of rows) {
      parameters[row.name.trim()] = parameterSpec(row);
    }
    return compact({
      name: text.name.trim(),
      objective: compact({
        metric: text.metric.trim(),
        type: text.goalType,
        goal: numberOrText(text.goal)
      }),
      algorithm: { name: text.algorithm },
      parameters,
      trial: { notebook: text.notebook.trim() },
      max_trials: numberOrText(text.maxTrials),
      parallel_trials: numberOrText(text.parallelTrials)
    });
  };

  return (
    <LaunchFormShell
      kind="tuning"
      form={props}
      paths={paths}
      spec={spec}
      onLaunched={() => set('name', '')}
    >
      <div className="cube-JobForm-grid">
        <TextField
          label="Name"
          path="name"
          placeholder="tune-mnist"
          {...bind('name')}
        />
        <TextField
          label="Trial notebook"
          path="trial.notebook"
          hint="run with each trial's parameters"
          placeholder="train.ipynb"
          {...bind('notebook')}
        />
      </div>
      <FieldRow legend="Objective">
        <TextField
          label="Metric"
          path="objective.metric"
          hint="name=value"
          placeholder="accuracy"
          {...bind('metric')}
        />
        <SelectField
          label="Type"
          path="objective.type"
          options={['maximize', 'minimize']}
          {...bind('goalType')}
        />
        <TextField
          label="Goal"
          path="objective.goal"
          hint="optional"
          placeholder="0.99"
          {...bind('goal')}
        />
        <SelectField
          label="Algorithm"
          path="algorithm.name"
          options={ALGORITHMS}
          {...bind('algorithm')}
        />
      </FieldRow>
      <fieldset
        className="cube-JobForm-group"
        data-testid="cube-job-field"
        data-field="parameters"
      >
        <legend>Parameters</legend>
        <table className="cube-JobForm-parameters">
          <thead>
            <tr>
              <th>Name</th>
              <th>Type</th>
              <th>Min</th>
              <th>Max</th>
              <th>Step</th>
              <th>Values</th>
              <th>Log</th>
              <th />
            </tr>
          </thead>
          <tbody>
            {rows.map(row => (
              <ParameterRow
                key={row.key}
                row={row}
                removable={rows.length > 1}
                onChange={change => editRow(row.key, change)}
                onRemove={() => editRows(rows.filter(r => r.key !== row.key))}
              />
            ))}
          </tbody>
        </table>
        <div>
          <Button
            className="cube-Button"
            minimal
            small
            data-testid="cube-tuning-add-parameter"
            onClick={() => editRows([...rows, newRow(nextKey.current++)])}
          >
            <addIcon.react tag="span" elementSize="small" /> Parameter
          </Button>
        </div>
        <FieldError path="parameters" />
      </fieldset>
      <FieldRow legend="Trials">
        <NumberField
          label="Max trials"
          path="max_trials"
          min={1}
          {...bind('maxTrials')}
        />
        <NumberField
          label="In parallel"
          path="parallel_trials"
          min={1}
          {...bind('parallelTrials')}
        />
      </FieldRow>
    </LaunchFormShell>
  );
}

interface IParameterRowProps {
  row: IParameterRow;
  removable: boolean;
  onChange: (change: Partial<IParameterRow>) => void;
  onRemove: () => void;
}

/** One search dimension; the server's error about it shows under the row. */
function ParameterRow(props: IParameterRowProps): JSX.Element {
  const { row } = props;
  const error = usePlacedError();
  const at = `parameters.${row.name.trim()}`;
  const mine =
    !!error &&
    error.at !== null &&
    (error.at === at || error.at.startsWith(`${at}.`));
  const values = hasValues(row.type);
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
          <input
            className={`jp-mod-styled cube-CreateForm-input${isInvalid(error, at) ? ' cube-mod-invalid' : ''}`}
            data-testid="cube-job-input-parameter-name"
            aria-label="Parameter name"
            spellCheck={false}
            value={row.name}
            placeholder="lr"
            onChange={event => props.onChange({ name: event.target.value })}
          />
        </td>
        <td>
          <SelectInput
            path={`${at}.type`}
            value={row.type}
            options={PARAMETER_TYPES}
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
              row.type === 'discrete' ? '16, 32, 64' : 'sgd, adam'
            )}
          </>
        ) : (
          <>
            {cell('min', '0.0001')}
            {cell('max', '0.1')}
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
