/**
 * The training launch form: framework, name, image, replicas per role, the code to
 * run, arguments and resources per replica. It sends what was typed as a training spec;
 * the server checks it and its error shows by the field it names.
 */
import * as React from 'react';

import type { IFrameworkRole } from '../types';
import {
  compact,
  example,
  FieldGroup,
  IBound,
  IFieldSpec,
  ILaunchFormProps,
  LaunchFormShell,
  NO_QUEUE,
  NO_RESOURCES,
  numberOrText,
  pathsOf,
  queueFields,
  queueSpec,
  resourceFields,
  resourcesSpec,
  SelectField,
  TextField,
  textOrNothing,
  useFormText
} from './form';

const RESOURCES = resourceFields({ cpu: '2', memory: '8Gi' });

export function TrainingForm(props: ILaunchFormProps): JSX.Element {
  const { frameworks, code_kinds, restart_policies, defaults } =
    props.vocabulary.training;
  const form = useFormText(
    {
      framework: defaults.framework,
      name: '',
      image: '',
      codeKind: defaults.code_kind,
      code: '',
      args: '',
      restartPolicy: defaults.restart_policy,
      ...NO_RESOURCES,
      ...NO_QUEUE
    },
    props.onEdit
  );
  const { text, bind } = form;
  const [counts, setCounts] = React.useState<Record<string, string>>({});
  const { framework, codeKind } = text;

  const roles = frameworks.find(f => f.value === framework)?.roles ?? [];
  const code = code_kinds.find(k => k.value === codeKind);
  const count = (role: IFrameworkRole) =>
    counts[`${framework}.${role.key}`] ?? String(role.default);
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
  const replicas: IFieldSpec<string>[] = roles.map(role => ({
    key: role.key,
    label: role.name,
    path: `replicas.${role.key}.replicas`,
    min: 0
  }));
  const bindCount = (key: string): IBound => ({
    value: count(roles.find(role => role.key === key)!),
    onChange: value => {
      setCounts({ ...counts, [`${framework}.${key}`]: value });
      props.onEdit();
    }
  });
  const resources: IFieldSpec<Key>[] = [
    ...RESOURCES,
    {
      key: 'restartPolicy',
      label: 'Restart policy',
      path: 'restart_policy',
      options: restart_policies
    }
  ];

  const queue = queueFields(props.vocabulary, 'training');

  const spec = () => {
    const replicas: Record<string, unknown> = {};
    for (const role of roles) {
      const value = numberOrText(count(role));
      if (value !== undefined) {
        replicas[role.key] = { replicas: value };
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
      restart_policy: text.restartPolicy,
      ...queueSpec(text)
    });
  };

  return (
    <LaunchFormShell
      kind="training"
      form={props}
      text={form}
      paths={[
        ...pathsOf(job),
        ...pathsOf(replicas),
        codeKind,
        'args',
        ...pathsOf(resources),
        ...pathsOf(queue)
      ]}
      spec={spec}
    >
      <FieldGroup fields={job} bind={bind} />
      <FieldGroup
        legend="Replicas per role"
        fields={replicas}
        bind={bindCount}
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
        fields={resources}
        bind={bind}
      />
      {queue.length > 0 && (
        <FieldGroup legend="Queue" fields={queue} bind={bind} />
      )}
    </LaunchFormShell>
  );
}
