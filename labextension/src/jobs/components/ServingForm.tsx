/**
 * The serving launch form: name, model format, where the model is, resources, the
 * replica range, the autoscaling metric and target, and the canary traffic share. It
 * sends a serving spec as typed; the server checks it and its error shows by the field.
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

const MODEL_FORMATS = ['sklearn', 'xgboost', 'pytorch', 'onnx', 'custom'];
const SCALE_METRICS = [
  { value: 'concurrency', label: 'Concurrency (requests in flight)' },
  { value: 'rps', label: 'Requests per second' },
  { value: 'cpu', label: 'CPU utilization (%)' },
  { value: 'gpu', label: 'GPU utilization (%)' }
];
const PATHS = [
  'name',
  'model_format',
  'storage_uri',
  'min_replicas',
  'max_replicas',
  'scale_metric',
  'scale_target',
  'canary_traffic_percent',
  ...RESOURCE_PATHS
];

export function ServingForm(props: ILaunchFormProps): JSX.Element {
  const { text, bind, set } = useFormText(
    {
      name: '',
      format: 'sklearn',
      storage: '',
      minReplicas: '1',
      maxReplicas: '1',
      metric: 'concurrency',
      target: '',
      canary: '',
      ...NO_RESOURCES
    },
    props.onEdit
  );
  const spec = () =>
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
    });

  return (
    <LaunchFormShell
      kind="serving"
      form={props}
      paths={PATHS}
      spec={spec}
      onLaunched={() => set('name', '')}
    >
      <div className="cube-JobForm-grid">
        <TextField
          label="Name"
          path="name"
          placeholder="iris"
          {...bind('name')}
        />
        <SelectField
          label="Model format"
          path="model_format"
          options={MODEL_FORMATS}
          {...bind('format')}
        />
        <TextField
          label="Storage URI"
          path="storage_uri"
          hint="s3://, pvc:// or a path on this machine"
          placeholder="s3://models/iris"
          {...bind('storage')}
        />
      </div>
      <FieldRow legend="Scaling">
        <NumberField
          label="Min replicas"
          path="min_replicas"
          min={0}
          {...bind('minReplicas')}
        />
        <NumberField
          label="Max replicas"
          path="max_replicas"
          min={1}
          {...bind('maxReplicas')}
        />
        <SelectField
          label="Scale on"
          path="scale_metric"
          options={SCALE_METRICS}
          {...bind('metric')}
        />
        <NumberField
          label="Target"
          path="scale_target"
          hint="per replica"
          min={1}
          placeholder={
            text.metric === 'cpu' || text.metric === 'gpu' ? '80' : 'default'
          }
          {...bind('target')}
        />
        <NumberField
          label="Canary traffic %"
          path="canary_traffic_percent"
          min={0}
          placeholder="none"
          {...bind('canary')}
        />
      </FieldRow>
      <FieldRow legend="Resources per replica">
        <ResourceFields
          bind={bind}
          placeholders={{ cpu: '1', memory: '2Gi' }}
        />
      </FieldRow>
    </LaunchFormShell>
  );
}
