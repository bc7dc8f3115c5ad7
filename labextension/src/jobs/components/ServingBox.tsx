/**
 * A served model's endpoint and a test-request box: JSON inputs sent to the model
 * through `/jobs/{name}/predict`, and its answer shown as it came.
 */
import { Button, HTMLSelect } from '@jupyterlab/ui-components';
import * as React from 'react';

import { ErrorMessage } from '../../common/components/ErrorMessage';
import { IFieldError, isInvalid, placed } from '../../common/fieldError';
import type {
  IChoice,
  IJob,
  IPredictResponse,
  PredictProtocol
} from '../types';

export interface IServingBoxProps {
  job: IJob;
  /** The protocols a served model speaks (the server's list). */
  protocols: readonly IChoice[];
  predicting: boolean;
  prediction: IPredictResponse | null;
  error: IFieldError | null;
  onPredict: (inputs: string, protocol: PredictProtocol) => void;
}

const V1_EXAMPLE = '[[5.1, 3.5, 1.4, 0.2]]';
/** Answers shorter than this show on one line. */
const ONE_LINE = 100;

/** The model's answer as JSON: on one line when short, indented when not. */
function predictionText(predictions: unknown): string {
  const flat = JSON.stringify(predictions);
  return flat.length <= ONE_LINE ? flat : JSON.stringify(predictions, null, 2);
}

export function ServingBox(props: IServingBoxProps): JSX.Element {
  const { job } = props;
  // The protocol the model was deployed to speak (the spec as the server normalized it).
  const specProtocol = (job.spec.protocol_version ?? 'v1') as PredictProtocol;
  const [protocol, setProtocol] = React.useState<PredictProtocol>(specProtocol);
  const [inputs, setInputs] = React.useState('');
  const ready = job.phase === 'Ready' && !!job.endpoint;
  const inputsInvalid = isInvalid(placed(['inputs'], props.error), 'inputs');
  return (
    <div className="cube-ServingBox">
      <div className="cube-ServingBox-endpoint">
        <span className="cube-CreateForm-label">Endpoint</span>
        {job.endpoint ? (
          <code data-testid="cube-job-endpoint">{job.endpoint}</code>
        ) : (
          <span className="cube-Jobs-empty">not serving yet</span>
        )}
      </div>
      <form
        className="cube-ServingBox-form"
        data-testid="cube-job-predict-form"
        onSubmit={event => {
          event.preventDefault();
          // An empty box sends the example it shows, put in the box so what was sent is seen.
          const sent = inputs.trim() ? inputs : V1_EXAMPLE;
          setInputs(sent);
          props.onPredict(sent, protocol);
        }}
      >
        <label
          className="cube-CreateForm-label"
          htmlFor="cube-job-predict-inputs"
        >
          Test request: inputs (JSON;{' '}
          {protocol === 'v1'
            ? 'the instances'
            : 'the V2 inputs, or the instances'}
          ; empty: the example)
        </label>
        <textarea
          id="cube-job-predict-inputs"
          className={`jp-mod-styled cube-ServingBox-inputs${inputsInvalid ? ' cube-mod-invalid' : ''}`}
          data-testid="cube-job-predict-inputs"
          spellCheck={false}
          rows={4}
          placeholder={V1_EXAMPLE}
          aria-invalid={inputsInvalid}
          value={inputs}
          onChange={event => setInputs(event.target.value)}
        />
        <div className="cube-ServingBox-actions">
          <HTMLSelect
            aria-label="Protocol"
            data-testid="cube-job-predict-protocol"
            value={protocol}
            onChange={event =>
              setProtocol(event.target.value as PredictProtocol)
            }
            options={[...props.protocols]}
          />
          <Button
            type="submit"
            className="cube-Button cube-mod-accept"
            data-testid="cube-job-predict-send"
            disabled={!ready || props.predicting}
            title={ready ? undefined : 'The model is not ready yet'}
          >
            {props.predicting ? 'Sending…' : 'Send'}
          </Button>
        </div>
      </form>
      <ErrorMessage
        message={props.error?.message}
        testid="cube-job-predict-error"
        field={props.error?.field}
      />
      {props.prediction && (
        <pre
          className="cube-ServingBox-response"
          data-testid="cube-job-predict-response"
        >
          {predictionText(props.prediction.predictions)}
        </pre>
      )}
    </div>
  );
}
