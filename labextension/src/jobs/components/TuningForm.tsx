/**
 * The tuning launch form: the objective, the search algorithm, one row per parameter,
 * the trial notebook and the trial budget. It sends a tuning spec as typed; the server
 * checks it and its error shows by the field it names.
 */
import { addIcon, Button, closeIcon } from '@jupyterlab/ui-components';
import * as React from 'react';

import { ErrorMessage } from '../../components/ErrorMessage';
import type { IFieldError } from '../model';
import {
  compact,
  Field,
  isInvalid,
  IPlacedError,
  numberOrText,
  placed,
  SelectInput,
  TextInput
} from './FormField';
import { LaunchButton } from './TrainingForm';

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

export interface ITuningFormProps {
  launching: boolean;
  error: IFieldError | null;
  onLaunch: (spec: Record<string, unknown>) => Promise<boolean>;
  onEdit: () => void;
}

export function TuningForm(props: ITuningFormProps): JSX.Element {
  const [name, setName] = React.useState('');
  const [metric, setMetric] = React.useState('');
  const [goalType, setGoalType] = React.useState('maximize');
  const [goal, setGoal] = React.useState('');
  const [algorithm, setAlgorithm] = React.useState('tpe');
  const [rows, setRows] = React.useState<IParameterRow[]>([newRow(0, 'lr')]);
  const [notebook, setNotebook] = React.useState('');
  const [maxTrials, setMaxTrials] = React.useState('12');
  const [parallelTrials, setParallelTrials] = React.useState('2');
  const nextKey = React.useRef(1);

  const edit =
    <T,>(set: (value: T) => void) =>
    (value: T) => {
      set(value);
      props.onEdit();
    };
  const editRow = (key: number, change: Partial<IParameterRow>) => {
    setRows(rows.map(row => (row.key === key ? { ...row, ...change } : row)));
    props.onEdit();
  };

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
  const error = placed(paths, props.error);

  const submit = async (event: React.FormEvent) => {
    event.preventDefault();
    const parameters: Record<string, unknown> = {};
    for (const row of rows) {
      parameters[row.name.trim()] = parameterSpec(row);
    }
    const spec = compact({
      name: name.trim(),
      objective: compact({
        metric: metric.trim(),
        type: goalType,
        goal: numberOrText(goal)
      }),
      algorithm: { name: algorithm },
      parameters,
      trial: { notebook: notebook.trim() },
      max_trials: numberOrText(maxTrials),
      parallel_trials: numberOrText(parallelTrials)
    });
    if (await props.onLaunch(spec)) {
      setName('');
    }
  };

  return (
    <form
      className="cube-JobForm"
      data-testid="cube-job-form"
      data-kind="tuning"
      onSubmit={event => void submit(event)}
    >
      <div className="cube-JobForm-grid">
        <Field label="Name" path="name" error={error}>
          <TextInput
            path="name"
            value={name}
            error={error}
            placeholder="tune-mnist"
            onChange={edit(setName)}
          />
        </Field>
        <Field
          label="Trial notebook"
          path="trial.notebook"
          error={error}
          hint="run with each trial's parameters"
        >
          <TextInput
            path="trial.notebook"
            value={notebook}
            error={error}
            placeholder="train.ipynb"
            onChange={edit(setNotebook)}
          />
        </Field>
      </div>
      <fieldset className="cube-JobForm-group">
        <legend>Objective</legend>
        <div className="cube-JobForm-row">
          <Field
            label="Metric"
            path="objective.metric"
            error={error}
            hint="name=value"
          >
            <TextInput
              path="objective.metric"
              value={metric}
              error={error}
              placeholder="accuracy"
              onChange={edit(setMetric)}
            />
          </Field>
          <Field label="Type" path="objective.type" error={error}>
            <SelectInput
              path="objective.type"
              value={goalType}
              error={error}
              options={['maximize', 'minimize']}
              onChange={edit(setGoalType)}
            />
          </Field>
          <Field
            label="Goal"
            path="objective.goal"
            error={error}
            hint="optional"
          >
            <TextInput
              path="objective.goal"
              value={goal}
              error={error}
              placeholder="0.99"
              onChange={edit(setGoal)}
            />
          </Field>
          <Field label="Algorithm" path="algorithm.name" error={error}>
            <SelectInput
              path="algorithm.name"
              value={algorithm}
              error={error}
              options={ALGORITHMS}
              onChange={edit(setAlgorithm)}
            />
          </Field>
        </div>
      </fieldset>
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
                error={error}
                removable={rows.length > 1}
                onChange={change => editRow(row.key, change)}
                onRemove={() => {
                  setRows(rows.filter(r => r.key !== row.key));
                  props.onEdit();
                }}
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
            onClick={() => {
              setRows([...rows, newRow(nextKey.current++)]);
              props.onEdit();
            }}
          >
            <addIcon.react tag="span" elementSize="small" /> Parameter
          </Button>
        </div>
        {error && error.at === 'parameters' && (
          <ErrorMessage
            message={error.message}
            testid="cube-job-field-error"
            field="parameters"
          />
        )}
      </fieldset>
      <fieldset className="cube-JobForm-group">
        <legend>Trials</legend>
        <div className="cube-JobForm-row">
          <Field label="Max trials" path="max_trials" error={error}>
            <TextInput
              path="max_trials"
              type="number"
              min={1}
              value={maxTrials}
              error={error}
              onChange={edit(setMaxTrials)}
            />
          </Field>
          <Field label="In parallel" path="parallel_trials" error={error}>
            <TextInput
              path="parallel_trials"
              type="number"
              min={1}
              value={parallelTrials}
              error={error}
              onChange={edit(setParallelTrials)}
            />
          </Field>
        </div>
      </fieldset>
      <LaunchButton launching={props.launching} />
      {error && error.at === null && (
        <ErrorMessage message={error.message} testid="cube-job-form-error" />
      )}
    </form>
  );
}

interface IParameterRowProps {
  row: IParameterRow;
  error: IPlacedError | null;
  removable: boolean;
  onChange: (change: Partial<IParameterRow>) => void;
  onRemove: () => void;
}

/** One search dimension; the server's error about it shows under the row. */
function ParameterRow(props: IParameterRowProps): JSX.Element {
  const { row, error } = props;
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
        error={error}
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
            error={error}
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
