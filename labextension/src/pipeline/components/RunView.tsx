/**
 * One run: its status, its steps with state, duration and cache hits, the error that
 * failed it (a step's under that step, not again at the top), Cancel while it runs and Resume when it stopped with steps left (a failure,
 * a cancel, a workbench restart). A queued step says why it waits (GPUs, the GPU
 * quota), a running GPU step which GPUs it holds and (with the GPU plugin) how much
 * GPU memory its kernel holds, lately. A step with an executed notebook
 * opens it; the data files a step read (whose contents its cache key saw) are listed
 * under it.
 */
import { Button } from '@jupyterlab/ui-components';
import * as React from 'react';

import { ErrorMessage } from '../../common/components/ErrorMessage';
import { GpuMemory } from '../../common/components/GpuMemory';
import { StatusBadge } from '../../common/components/StatusBadge';
import { formatDate } from '../../common/format';
import {
  describeError,
  formatFiles,
  runError,
  stepInfo,
  stepNote
} from '../format';
import type { IGpuUsage } from '../../tokens';
import type { IRun, IRunStep } from '../types';

export interface IRunViewProps {
  run: IRun;
  ended: boolean;
  error: string | null;
  onCancel: () => void;
  onResume: () => void;
  onOpenStep: (step: IRunStep) => void;
  /** The GPU plugin's step history: a running GPU step's memory sparkline; null: none. */
  gpuUsage?: IGpuUsage | null;
}

export function RunView(props: IRunViewProps): JSX.Element {
  const { run } = props;
  const error = runError(run);
  return (
    <div
      className="cube-RunView"
      data-testid="cube-run"
      data-run={run.id}
      data-status={run.status}
    >
      <div className="cube-RunView-head">
        <span className="cube-RunView-id" title={`Run ${run.id}`}>
          {run.id}
        </span>
        <span className="cube-RunView-target">{run.target}</span>
        <StatusBadge status={run.status} testid="cube-run-status" />
      </div>
      <div className="cube-RunView-meta" title={formatDate(run.created)}>
        {formatDate(run.started ?? run.created)}
        {Object.keys(run.parameters).length > 0 && (
          <span className="cube-RunView-params">
            {Object.entries(run.parameters)
              .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
              .join(' ')}
          </span>
        )}
      </div>
      {Object.keys(run.metrics).length > 0 && (
        <div className="cube-RunView-metrics" data-testid="cube-run-metrics">
          {Object.entries(run.metrics)
            .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
            .join('  ')}
        </div>
      )}
      <ErrorMessage message={error} testid="cube-run-error" />
      {run.link && (
        <a
          className="cube-RunView-link"
          data-testid="cube-run-link"
          href={run.link}
          target="_blank"
          rel="noopener noreferrer"
          title="The run in the Kubeflow Pipelines UI: its graph, artifacts, lineage and logs"
        >
          Open in Kubeflow Pipelines
        </a>
      )}
      <ul className="cube-RunSteps" data-testid="cube-run-steps">
        {run.steps.map(step => {
          const stepError = describeError(step.error);
          const canOpen = !!step.notebook;
          // Runs recorded before steps listed their files have none.
          const files = step.files ?? [];
          // A queued step says why it waits; a running GPU step which GPUs it holds.
          const note = stepNote(step);
          const reason = step.status === 'queued' ? note : '';
          const gpus = step.status === 'running' ? note : '';
          return (
            <li
              key={step.name}
              className="cube-RunStep"
              data-testid="cube-run-step"
              data-step={step.name}
              data-status={step.status}
              data-started={step.started ?? ''}
            >
              <button
                type="button"
                className="cube-RunStep-head"
                disabled={!canOpen}
                title={
                  canOpen
                    ? `Open the executed notebook of ${step.name}`
                    : 'No executed notebook yet'
                }
                onClick={() => props.onOpenStep(step)}
              >
                <span
                  className="cube-RunStep-name"
                  data-testid="cube-run-step-name"
                >
                  {step.name}
                </span>
                <span className="cube-RunStep-info">{stepInfo(step)}</span>
                {gpus && (
                  <span
                    className="cube-RunStep-gpus"
                    data-testid="cube-run-step-gpus"
                    data-gpus={(step.gpus ?? []).join(',')}
                    title={`${step.name} runs with CUDA_VISIBLE_DEVICES=${(step.gpus ?? []).join(',')}`}
                  >
                    {gpus}
                  </span>
                )}
                <StatusBadge
                  status={step.status}
                  testid="cube-run-step-status"
                />
              </button>
              {gpus && props.gpuUsage && (
                <GpuMemory
                  usage={props.gpuUsage}
                  series={`step:${run.id}/${step.name}`}
                  whose={`step ${step.name}'s kernel`}
                />
              )}
              {reason && (
                <div
                  className="cube-RunStep-reason"
                  data-testid="cube-run-step-reason"
                >
                  {reason}
                </div>
              )}
              {files.length > 0 && (
                <div
                  className="cube-RunStep-files"
                  data-testid="cube-run-step-files"
                  data-files={files.join('\n')}
                  title={`Data files ${step.name} read; their contents are part of its cache key:\n${files.join('\n')}`}
                >
                  Reads: <code>{formatFiles(files)}</code>
                </div>
              )}
              {stepError && (
                <div
                  className="cube-RunStep-error"
                  data-testid="cube-run-step-error"
                >
                  {stepError}
                </div>
              )}
            </li>
          );
        })}
      </ul>
      {!props.ended && (
        <div className="cube-RunView-actions">
          <Button
            small
            minimal
            className="cube-Button cube-mod-danger"
            data-testid="cube-run-cancel"
            onClick={props.onCancel}
          >
            Cancel run
          </Button>
        </div>
      )}
      {props.ended && run.resumable && (
        <div className="cube-RunView-actions">
          <Button
            small
            minimal
            className="cube-Button"
            data-testid="cube-run-resume"
            title="Run the steps that did not finish; finished steps are kept"
            onClick={props.onResume}
          >
            Resume run
          </Button>
        </div>
      )}
      <ErrorMessage message={props.error} testid="cube-run-action-error" />
    </div>
  );
}
