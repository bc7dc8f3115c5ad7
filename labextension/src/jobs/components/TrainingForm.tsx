/**
 * The training launch form: framework, name, image, replicas per role, the code to
 * run, arguments and resources per replica. It sends what was typed as a training spec;
 * the server checks it and its error shows by the field it names.
 */
import * as React from 'react';

import { argsText, overFile, section, textOf } from '../specText';
import {
  compact,
  example,
  FieldGroup,
  IFieldSpec,
  ILaunchFormProps,
  LaunchFormShell,
  pathsOf,
  queueFields,
  queueSpec,
  resourceFields,
  resourcesSpec,
  SelectField,
  TextField,
  textOrNothing,
  useFormText,
  useRoleCounts
} from './form';

const RESOURCES = resourceFields({ cpu: '2', memory: '8Gi' });
/** The training spec's keys this form shows (a file's others are sent as written). */
const SHOWN = [
  'name',
  'framework',
  'image',
  'replicas',
  'command',
  'script',
  'notebook',
  'function',
  'args',
  'resources',
  'restart_policy',
  'queue',
  'priority'
];

export function TrainingForm(props: ILaunchFormProps): JSX.Element {
  const { frameworks, code_kinds, restart_policies, defaults } =
    props.vocabulary.training;
  const file = props.file?.spec;
  const resources = section(file, 'resources');
  const written = code_kinds.find(k => file?.[k.value] !== undefined)?.value;
  const form = useFormText(
    {
      framework: textOf(file?.framework) || defaults.framework,
      name: textOf(file?.name),
      image: textOf(file?.image),
      codeKind: written ?? defaults.code_kind,
      code: written ? argsText(file?.[written]) : '',
      args: argsText(file?.args),
      restartPolicy: textOf(file?.restart_policy) || defaults.restart_policy,
      cpu: textOf(resources.cpu),
      memory: textOf(resources.memory),
      gpu: textOf(resources.gpu),
      queue: textOf(file?.queue),
      priority: textOf(file?.priority)
    },
    props.onEdit
  );
  const { text, bind } = form;
  const { framework, codeKind } = text;
  const roles = useRoleCounts(
    frameworks,
    framework,
    '',
    file?.replicas,
    props.onEdit
  );

  const code = code_kinds.find(k => k.value === codeKind);
  type Key = keyof typeof text;
  const job: IFieldSpec<Key>[] = [
    {
      key: 'framework',
      label: 'Framework',
      path: 'framework',
      options: frameworks
    },
    {
      key: 'name',
      label: 'Name',
      path: 'name',
      placeholder: example('mnist-ddp')
    },
    {
      key: 'image',
      label: 'Image',
      path: 'image',
      hint: "the admin's default when empty",
      placeholder: example(
        'docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime'
      )
    }
  ];
  const perReplica: IFieldSpec<Key>[] = [
    ...RESOURCES,
    {
      key: 'restartPolicy',
      label: 'Restart policy',
      path: 'restart_policy',
      options: restart_policies
    }
  ];

  const queue = queueFields(props.vocabulary, 'training');

  const spec = () =>
    overFile(
      file,
      compact({
        name: text.name.trim(),
        framework,
        image: textOrNothing(text.image),
        replicas: roles.spec(file?.replicas),
        // Sent even when empty, so the server names this field.
        [codeKind]: text.code.trim(),
        args: textOrNothing(text.args),
        resources: resourcesSpec(text),
        restart_policy: text.restartPolicy,
        ...queueSpec(text)
      }),
      SHOWN
    );

  return (
    <LaunchFormShell
      kind="training"
      form={props}
      text={form}
      paths={[
        ...pathsOf(job),
        ...pathsOf(roles.fields),
        codeKind,
        'args',
        ...pathsOf(perReplica),
        ...pathsOf(queue)
      ]}
      spec={spec}
      shown={SHOWN}
    >
      <FieldGroup fields={job} bind={bind} />
      <FieldGroup
        legend="Replicas per role"
        fields={roles.fields}
        bind={roles.bind}
      />
      <fieldset className="cube-JobForm-group">
        <legend>Code</legend>
        <div className="cube-JobForm-row">
          <SelectField
            label="Run"
            path="code-kind"
            options={code_kinds}
            {...bind('codeKind')}
          />
          <div className="cube-JobForm-wide">
            <TextField
              label={code?.label ?? codeKind}
              path={codeKind}
              hint={code?.hint}
              placeholder={code && example(code.example)}
              {...bind('code')}
            />
          </div>
        </div>
        <TextField
          label="Arguments"
          path="args"
          placeholder={example('--epochs 3 --lr 0.01')}
          {...bind('args')}
        />
      </fieldset>
      <FieldGroup
        legend="Resources per replica"
        fields={perReplica}
        bind={bind}
      />
      {queue.length > 0 && (
        <FieldGroup legend="Queue" fields={queue} bind={bind} />
      )}
    </LaunchFormShell>
  );
}
