/**
 * The serving launch form: name, model format, where the model is, resources, the
 * replica range, the autoscaling metric and target, and the canary traffic share. It
 * sends a serving spec as typed; the server checks it and its error shows by the field.
 */
import * as React from 'react';

import { overFile, section, textOf } from '../specText';
import {
  compact,
  example,
  FieldGroup,
  IFieldSpec,
  ILaunchFormProps,
  LaunchFormShell,
  numberOrText,
  pathsOf,
  resourceFields,
  resourcesSpec,
  textOrNothing,
  useFormText
} from './form';

const RESOURCES = resourceFields({ cpu: '1', memory: '2Gi' });
/** The serving spec's keys this form shows (a file's others are sent as written). */
const SHOWN = [
  'name',
  'model_format',
  'storage_uri',
  'min_replicas',
  'max_replicas',
  'scale_metric',
  'scale_target',
  'canary_traffic_percent',
  'resources'
];

export function ServingForm(props: ILaunchFormProps): JSX.Element {
  const { model_formats, scale_metrics, defaults, default_utilization_target } =
    props.vocabulary.serving;
  const file = props.file?.spec;
  const resources = section(file, 'resources');
  // A new form asks for one replica; a file's spec leaves what it leaves out to the server.
  const replicas = file ? '' : '1';
  const form = useFormText(
    {
      name: textOf(file?.name),
      format: textOf(file?.model_format) || defaults.model_format,
      storage: textOf(file?.storage_uri),
      minReplicas: textOf(file?.min_replicas) || replicas,
      maxReplicas: textOf(file?.max_replicas) || replicas,
      metric: textOf(file?.scale_metric) || defaults.scale_metric,
      target: textOf(file?.scale_target),
      canary: textOf(file?.canary_traffic_percent),
      cpu: textOf(resources.cpu),
      memory: textOf(resources.memory),
      gpu: textOf(resources.gpu)
    },
    props.onEdit
  );
  const { text, bind } = form;
  type Key = keyof typeof text;
  const model: IFieldSpec<Key>[] = [
    { key: 'name', label: 'Name', path: 'name', placeholder: example('iris') },
    {
      key: 'format',
      label: 'Model format',
      path: 'model_format',
      options: model_formats
    },
    {
      key: 'storage',
      label: 'Storage URI',
      path: 'storage_uri',
      hint: 's3://, pvc:// or a path on this machine',
      placeholder: example('s3://models/iris')
    }
  ];
  const percent = scale_metrics.find(m => m.value === text.metric)?.percent;
  const scaling: IFieldSpec<Key>[] = [
    { key: 'minReplicas', label: 'Min replicas', path: 'min_replicas', min: 0 },
    { key: 'maxReplicas', label: 'Max replicas', path: 'max_replicas', min: 1 },
    {
      key: 'metric',
      label: 'Scale on',
      path: 'scale_metric',
      options: scale_metrics
    },
    {
      key: 'target',
      label: 'Target',
      path: 'scale_target',
      hint: 'per replica',
      min: 1,
      placeholder: percent ? String(default_utilization_target) : 'default'
    },
    {
      key: 'canary',
      label: 'Canary traffic %',
      path: 'canary_traffic_percent',
      min: 0,
      placeholder: 'none'
    }
  ];
  const spec = () =>
    overFile(
      file,
      compact({
        name: text.name.trim(),
        model_format: text.format,
        storage_uri: textOrNothing(text.storage),
        min_replicas: numberOrText(text.minReplicas),
        max_replicas: numberOrText(text.maxReplicas),
        scale_metric: text.metric,
        scale_target: numberOrText(text.target),
        canary_traffic_percent: numberOrText(text.canary),
        resources: resourcesSpec(text)
      }),
      SHOWN
    );

  return (
    <LaunchFormShell
      kind="serving"
      form={props}
      text={form}
      paths={pathsOf([...model, ...scaling, ...RESOURCES])}
      spec={spec}
      shown={SHOWN}
    >
      <FieldGroup fields={model} bind={bind} />
      <FieldGroup legend="Scaling" fields={scaling} bind={bind} />
      <FieldGroup
        legend="Resources per replica"
        fields={RESOURCES}
        bind={bind}
      />
    </LaunchFormShell>
  );
}
