/**
 * The serving launch form: name, model format, where the model is, resources, the
 * replica range, the autoscaling metric and target, and the canary traffic share. It
 * sends a serving spec as typed; the server checks it and its error shows by the field.
 */
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
import { LaunchButton } from './TrainingForm';

const MODEL_FORMATS = ['sklearn', 'xgboost', 'pytorch', 'onnx', 'custom'];
const SCALE_METRICS = [
  { value: 'concurrency', label: 'Concurrency (requests in flight)' },
  { value: 'rps', label: 'Requests per second' },
  { value: 'cpu', label: 'CPU utilization (%)' },
  { value: 'gpu', label: 'GPU utilization (%)' }
];

export interface IServingFormProps {
  launching: boolean;
  error: IFieldError | null;
  onLaunch: (spec: Record<string, unknown>) => Promise<boolean>;
  onEdit: () => void;
}

export function ServingForm(props: IServingFormProps): JSX.Element {
  const [name, setName] = React.useState('');
  const [format, setFormat] = React.useState('sklearn');
  const [storage, setStorage] = React.useState('');
  const [minReplicas, setMinReplicas] = React.useState('1');
  const [maxReplicas, setMaxReplicas] = React.useState('1');
  const [metric, setMetric] = React.useState('concurrency');
  const [target, setTarget] = React.useState('');
  const [canary, setCanary] = React.useState('');
  const [cpu, setCpu] = React.useState('');
  const [memory, setMemory] = React.useState('');
  const [gpu, setGpu] = React.useState('');

  const edit =
    <T,>(set: (value: T) => void) =>
    (value: T) => {
      set(value);
      props.onEdit();
    };
  const paths = [
    'name',
    'model_format',
    'storage_uri',
    'min_replicas',
    'max_replicas',
    'scale_metric',
    'scale_target',
    'canary_traffic_percent',
    'resources.cpu',
    'resources.memory',
    'resources.gpu'
  ];
  const error = placed(paths, props.error);

  const submit = async (event: React.FormEvent) => {
    event.preventDefault();
    const spec = compact({
      name: name.trim(),
      model_format: format,
      storage_uri: textOrNothing(storage),
      min_replicas: numberOrText(minReplicas),
      max_replicas: numberOrText(maxReplicas),
      scale_metric: metric,
      scale_target: numberOrText(target),
      canary_traffic_percent: numberOrText(canary),
      resources: compact({
        cpu: textOrNothing(cpu),
        memory: textOrNothing(memory),
        gpu: numberOrText(gpu)
      })
    });
    if (await props.onLaunch(spec)) {
      setName('');
    }
  };

  return (
    <form
      className="cube-JobForm"
      data-testid="cube-job-form"
      data-kind="serving"
      onSubmit={event => void submit(event)}
    >
      <div className="cube-JobForm-grid">
        <Field label="Name" path="name" error={error}>
          <TextInput
            path="name"
            value={name}
            error={error}
            placeholder="iris"
            onChange={edit(setName)}
          />
        </Field>
        <Field label="Model format" path="model_format" error={error}>
          <SelectInput
            path="model_format"
            value={format}
            error={error}
            options={MODEL_FORMATS}
            onChange={edit(setFormat)}
          />
        </Field>
        <Field
          label="Storage URI"
          path="storage_uri"
          error={error}
          hint="s3://, pvc:// or a path on this machine"
        >
          <TextInput
            path="storage_uri"
            value={storage}
            error={error}
            placeholder="s3://models/iris"
            onChange={edit(setStorage)}
          />
        </Field>
      </div>
      <fieldset className="cube-JobForm-group">
        <legend>Scaling</legend>
        <div className="cube-JobForm-row">
          <Field label="Min replicas" path="min_replicas" error={error}>
            <TextInput
              path="min_replicas"
              type="number"
              min={0}
              value={minReplicas}
              error={error}
              onChange={edit(setMinReplicas)}
            />
          </Field>
          <Field label="Max replicas" path="max_replicas" error={error}>
            <TextInput
              path="max_replicas"
              type="number"
              min={1}
              value={maxReplicas}
              error={error}
              onChange={edit(setMaxReplicas)}
            />
          </Field>
          <Field label="Scale on" path="scale_metric" error={error}>
            <SelectInput
              path="scale_metric"
              value={metric}
              error={error}
              options={SCALE_METRICS}
              onChange={edit(setMetric)}
            />
          </Field>
          <Field
            label="Target"
            path="scale_target"
            error={error}
            hint="per replica"
          >
            <TextInput
              path="scale_target"
              type="number"
              min={1}
              value={target}
              error={error}
              placeholder={
                metric === 'cpu' || metric === 'gpu' ? '80' : 'default'
              }
              onChange={edit(setTarget)}
            />
          </Field>
          <Field
            label="Canary traffic %"
            path="canary_traffic_percent"
            error={error}
          >
            <TextInput
              path="canary_traffic_percent"
              type="number"
              min={0}
              value={canary}
              error={error}
              placeholder="none"
              onChange={edit(setCanary)}
            />
          </Field>
        </div>
      </fieldset>
      <fieldset className="cube-JobForm-group">
        <legend>Resources per replica</legend>
        <div className="cube-JobForm-row">
          <Field label="CPU" path="resources.cpu" error={error}>
            <TextInput
              path="resources.cpu"
              value={cpu}
              error={error}
              placeholder="1"
              onChange={edit(setCpu)}
            />
          </Field>
          <Field label="Memory" path="resources.memory" error={error}>
            <TextInput
              path="resources.memory"
              value={memory}
              error={error}
              placeholder="2Gi"
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
        </div>
      </fieldset>
      <LaunchButton launching={props.launching} />
      {error && error.at === null && (
        <ErrorMessage message={error.message} testid="cube-job-form-error" />
      )}
    </form>
  );
}
