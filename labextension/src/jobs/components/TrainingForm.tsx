/**
 * The training launch form: framework, name, image, replicas per role, the code to
 * run, arguments and resources per replica. It sends what was typed as a training spec;
 * the server checks it and its error shows by the field it names.
 */
import { Button } from '@jupyterlab/ui-components';
import * as React from 'react';

import { ErrorMessage } from '../../components/ErrorMessage';
import type { IFieldError } from '../model';
import {
  compact,
  Field,
  numberOrText,
  placed,
  SelectInput,
  TextInput,
  textOrNothing
} from './FormField';

/**
 * The replica types of each framework's operator (PyTorchJob, TFJob, XGBoostJob,
 * MPIJob) and the counts the form starts with; which counts are allowed is the
 * server's to say.
 */
const FRAMEWORK_ROLES: Record<string, [string, number][]> = {
  pytorch: [
    ['Master', 1],
    ['Worker', 1]
  ],
  tensorflow: [
    ['Chief', 1],
    ['PS', 0],
    ['Worker', 1],
    ['Evaluator', 0]
  ],
  xgboost: [
    ['Master', 1],
    ['Worker', 1]
  ],
  mpi: [
    ['Launcher', 1],
    ['Worker', 2]
  ]
};
const FRAMEWORK_LABELS: Record<string, string> = {
  pytorch: 'PyTorch (PyTorchJob)',
  tensorflow: 'TensorFlow (TFJob)',
  xgboost: 'XGBoost (XGBoostJob)',
  mpi: 'MPI / Horovod (MPIJob)'
};
const CODE_KINDS = [
  { value: 'script', label: 'Script' },
  { value: 'command', label: 'Command' },
  { value: 'notebook', label: 'Notebook' },
  { value: 'function', label: 'Function (module:function)' }
];
const CODE_PLACEHOLDERS: Record<string, string> = {
  script: 'train.py',
  command: 'python train.py --epochs 3',
  notebook: 'train.ipynb',
  function: 'train:main'
};
const RESTART_POLICIES = ['Never', 'OnFailure', 'Always', 'ExitCode'];

export interface ITrainingFormProps {
  launching: boolean;
  error: IFieldError | null;
  onLaunch: (spec: Record<string, unknown>) => Promise<boolean>;
  onEdit: () => void;
}

function rolePath(role: string): string {
  return `replicas.${role.toLowerCase()}.replicas`;
}

export function TrainingForm(props: ITrainingFormProps): JSX.Element {
  const [framework, setFramework] = React.useState('pytorch');
  const [name, setName] = React.useState('');
  const [image, setImage] = React.useState('');
  const [counts, setCounts] = React.useState<Record<string, string>>({});
  const [codeKind, setCodeKind] = React.useState('script');
  const [code, setCode] = React.useState('');
  const [args, setArgs] = React.useState('');
  const [cpu, setCpu] = React.useState('');
  const [memory, setMemory] = React.useState('');
  const [gpu, setGpu] = React.useState('');
  const [restartPolicy, setRestartPolicy] = React.useState('Never');

  const roles = FRAMEWORK_ROLES[framework];
  const count = (role: string, initial: number) =>
    counts[`${framework}.${role}`] ?? String(initial);
  const edit =
    <T,>(set: (value: T) => void) =>
    (value: T) => {
      set(value);
      props.onEdit();
    };

  const paths = [
    'name',
    'framework',
    'image',
    ...roles.map(([role]) => rolePath(role)),
    codeKind,
    'args',
    'resources.cpu',
    'resources.memory',
    'resources.gpu',
    'restart_policy'
  ];
  const error = placed(paths, props.error);

  const submit = async (event: React.FormEvent) => {
    event.preventDefault();
    const replicas: Record<string, unknown> = {};
    for (const [role, initial] of roles) {
      const value = numberOrText(count(role, initial));
      if (value !== undefined) {
        replicas[role.toLowerCase()] = { replicas: value };
      }
    }
    const spec = compact({
      name: name.trim(),
      framework,
      image: textOrNothing(image),
      replicas,
      // Sent even when empty, so the server names this field.
      [codeKind]: code.trim(),
      args: textOrNothing(args),
      resources: compact({
        cpu: textOrNothing(cpu),
        memory: textOrNothing(memory),
        gpu: numberOrText(gpu)
      }),
      restart_policy: restartPolicy
    });
    if (await props.onLaunch(spec)) {
      setName('');
    }
  };

  return (
    <form
      className="cube-JobForm"
      data-testid="cube-job-form"
      data-kind="training"
      onSubmit={event => void submit(event)}
    >
      <div className="cube-JobForm-grid">
        <Field label="Framework" path="framework" error={error}>
          <SelectInput
            path="framework"
            value={framework}
            error={error}
            options={Object.keys(FRAMEWORK_ROLES).map(value => ({
              value,
              label: FRAMEWORK_LABELS[value]
            }))}
            onChange={edit(setFramework)}
          />
        </Field>
        <Field label="Name" path="name" error={error}>
          <TextInput
            path="name"
            value={name}
            error={error}
            placeholder="mnist-ddp"
            onChange={edit(setName)}
          />
        </Field>
        <Field
          label="Image"
          path="image"
          error={error}
          hint="the admin's default when empty"
        >
          <TextInput
            path="image"
            value={image}
            error={error}
            placeholder="docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
            onChange={edit(setImage)}
          />
        </Field>
      </div>
      <fieldset className="cube-JobForm-group">
        <legend>Replicas per role</legend>
        <div className="cube-JobForm-row">
          {roles.map(([role, initial]) => (
            <Field
              key={`${framework}.${role}`}
              label={role}
              path={rolePath(role)}
              error={error}
            >
              <TextInput
                path={rolePath(role)}
                type="number"
                min={0}
                value={count(role, initial)}
                error={error}
                onChange={edit((value: string) =>
                  setCounts({ ...counts, [`${framework}.${role}`]: value })
                )}
              />
            </Field>
          ))}
        </div>
      </fieldset>
      <fieldset className="cube-JobForm-group">
        <legend>Code</legend>
        <div className="cube-JobForm-row">
          <Field label="Run" path="code-kind" error={null}>
            <SelectInput
              path="code-kind"
              value={codeKind}
              error={null}
              options={CODE_KINDS}
              onChange={edit(setCodeKind)}
            />
          </Field>
          <div className="cube-JobForm-wide">
            <Field
              label={CODE_KINDS.find(k => k.value === codeKind)?.label ?? ''}
              path={codeKind}
              error={error}
              hint={
                codeKind === 'command'
                  ? 'split into words, never run by a shell'
                  : 'relative to the Jupyter root'
              }
            >
              <TextInput
                path={codeKind}
                value={code}
                error={error}
                placeholder={CODE_PLACEHOLDERS[codeKind]}
                onChange={edit(setCode)}
              />
            </Field>
          </div>
        </div>
        <Field label="Arguments" path="args" error={error}>
          <TextInput
            path="args"
            value={args}
            error={error}
            placeholder="--epochs 3 --lr 0.01"
            onChange={edit(setArgs)}
          />
        </Field>
      </fieldset>
      <fieldset className="cube-JobForm-group">
        <legend>Resources per replica</legend>
        <div className="cube-JobForm-row">
          <Field label="CPU" path="resources.cpu" error={error}>
            <TextInput
              path="resources.cpu"
              value={cpu}
              error={error}
              placeholder="2"
              onChange={edit(setCpu)}
            />
          </Field>
          <Field label="Memory" path="resources.memory" error={error}>
            <TextInput
              path="resources.memory"
              value={memory}
              error={error}
              placeholder="8Gi"
              onChange={edit(setMemory)}
            />
          </Field>
          <Field label="GPUs" path="resources.gpu" error={error}>
            <TextInput
              path="resources.gpu"
              type="number"
              min={0}
              value={gpu}
              error={error}
              placeholder="0"
              onChange={edit(setGpu)}
            />
          </Field>
          <Field label="Restart policy" path="restart_policy" error={error}>
            <SelectInput
              path="restart_policy"
              value={restartPolicy}
              error={error}
              options={RESTART_POLICIES}
              onChange={edit(setRestartPolicy)}
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

/** The form's submit button. */
export function LaunchButton(props: { launching: boolean }): JSX.Element {
  return (
    <div className="cube-CreateForm-actions">
      <Button
        type="submit"
        className="cube-Button cube-mod-accept"
        data-testid="cube-job-launch"
        disabled={props.launching}
      >
        {props.launching ? 'Launching…' : 'Launch'}
      </Button>
    </div>
  );
}
