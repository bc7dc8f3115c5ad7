/**
 * The training launch form: framework, name, image, replicas per role, the code to
 * run, arguments and resources per replica. It sends what was typed as a training spec;
 * the server checks it and its error shows by the field it names.
 */
import * as React from 'react';

import {
  compact,
  FieldRow,
  ILaunchFormProps,
  LaunchFormShell,
  NO_RESOURCES,
  NumberField,
  numberOrText,
  RESOURCE_PATHS,
  ResourceFields,
  resourcesSpec,
  SelectField,
  TextField,
  textOrNothing,
  useFormText
} from './form';

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

function rolePath(role: string): string {
  return `replicas.${role.toLowerCase()}.replicas`;
}

export function TrainingForm(props: ILaunchFormProps): JSX.Element {
  const { text, bind, set } = useFormText(
    {
      framework: 'pytorch',
      name: '',
      image: '',
      codeKind: 'script',
      code: '',
      args: '',
      restartPolicy: 'Never',
      ...NO_RESOURCES
    },
    props.onEdit
  );
  const [counts, setCounts] = React.useState<Record<string, string>>({});
  const { framework, codeKind } = text;

  const roles = FRAMEWORK_ROLES[framework];
  const count = (role: string, initial: number) =>
    counts[`${framework}.${role}`] ?? String(initial);
  const paths = [
    'name',
    'framework',
    'image',
    ...roles.map(([role]) => rolePath(role)),
    codeKind,
    'args',
    ...RESOURCE_PATHS,
    'restart_policy'
  ];

  const spec = () => {
    const replicas: Record<string, unknown> = {};
    for (const [role, initial] of roles) {
      const value = numberOrText(count(role, initial));
      if (value !== undefined) {
        replicas[role.toLowerCase()] = { replicas: value };
      }
    }
    return compact({
      name: text.name.trim(),
      framework,
      image: textOrNothing(text.image),
      replicas,
      // Sent even when empty, so the server names this field.
      [codeKind]: text.code.trim(),
      args: textOrNothing(text.args),
      resources: resourcesSpec(text),
      restart_policy: text.restartPolicy
    });
  };

  return (
    <LaunchFormShell
      kind="training"
      form={props}
      paths={paths}
      spec={spec}
      onLaunched={() => set('name', '')}
    >
      <div className="cube-JobForm-grid">
        <SelectField
          label="Framework"
          path="framework"
          options={Object.keys(FRAMEWORK_ROLES).map(value => ({
            value,
            label: FRAMEWORK_LABELS[value]
          }))}
          {...bind('framework')}
        />
        <TextField
          label="Name"
          path="name"
          placeholder="mnist-ddp"
          {...bind('name')}
        />
        <TextField
          label="Image"
          path="image"
          hint="the admin's default when empty"
          placeholder="docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
          {...bind('image')}
        />
      </div>
      <FieldRow legend="Replicas per role">
        {roles.map(([role, initial]) => (
          <NumberField
            key={`${framework}.${role}`}
            label={role}
            path={rolePath(role)}
            min={0}
            value={count(role, initial)}
            onChange={value => {
              setCounts({ ...counts, [`${framework}.${role}`]: value });
              props.onEdit();
            }}
          />
        ))}
      </FieldRow>
      <fieldset className="cube-JobForm-group">
        <legend>Code</legend>
        <div className="cube-JobForm-row">
          <SelectField
            label="Run"
            path="code-kind"
            options={CODE_KINDS}
            {...bind('codeKind')}
          />
          <div className="cube-JobForm-wide">
            <TextField
              label={CODE_KINDS.find(k => k.value === codeKind)?.label ?? ''}
              path={codeKind}
              hint={
                codeKind === 'command'
                  ? 'split into words, never run by a shell'
                  : 'relative to the Jupyter root'
              }
              placeholder={CODE_PLACEHOLDERS[codeKind]}
              {...bind('code')}
            />
          </div>
        </div>
        <TextField
          label="Arguments"
          path="args"
          placeholder="--epochs 3 --lr 0.01"
          {...bind('args')}
        />
      </fieldset>
      <FieldRow legend="Resources per replica">
        <ResourceFields
          bind={bind}
          placeholders={{ cpu: '2', memory: '8Gi' }}
        />
        <SelectField
          label="Restart policy"
          path="restart_policy"
          options={RESTART_POLICIES}
          {...bind('restartPolicy')}
        />
      </FieldRow>
    </LaunchFormShell>
  );
}
