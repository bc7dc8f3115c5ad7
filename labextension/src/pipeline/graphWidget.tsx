/**
 * The pipeline graph, large, in the main area: the same model as the sidebar panel, so
 * it follows the same notebook, redraws as its cells change and colours each step by the
 * state of the run shown while that run goes on. A step of the run opens its notebook.
 */
import { PathExt } from '@jupyterlab/coreutils';
import * as React from 'react';

import { ErrorMessage } from '../common/components/ErrorMessage';
import { StatusBadge } from '../common/components/StatusBadge';
import { VisibleRenderer } from '../common/visibleRenderer';
import { DagCanvas } from './components/DagCanvas';
import { pipelineIcon } from './icons';
import type { PipelineModel } from './model';
import type { StepStatus } from './types';

/** The step states a run can show, in the order the legend lists them. */
const LEGEND: StepStatus[] = [
  'pending',
  'queued',
  'running',
  'succeeded',
  'cached',
  'failed',
  'skipped',
  'cancelled'
];

export class PipelineGraph extends VisibleRenderer<PipelineModel> {
  constructor(
    model: PipelineModel,
    private readonly _openStep: (step: string) => void
  ) {
    super(model, {
      className: 'cube-PipelineGraph',
      icon: pipelineIcon,
      caption: 'Pipeline graph of the active notebook',
      testid: 'cube-pipeline-graph'
    });
    this.title.label = 'Pipeline Graph';
  }

  protected render(): JSX.Element {
    const model = this.model;
    const path = model.path;
    this.title.label = path
      ? `Graph: ${PathExt.basename(path)}`
      : 'Pipeline Graph';
    const graph = model.graph;
    const run = model.selectedRun;
    const states = new Map<string, StepStatus>(
      (run?.steps ?? []).map(s => [s.name, s.status])
    );
    const shown = new Set(states.values());
    return (
      <div className="cube-PipelineGraph-body">
        <header className="cube-PipelineGraph-header">
          <span
            className="cube-PipelineGraph-path"
            data-testid="cube-pipeline-graph-path"
          >
            {path ?? 'Open a notebook to see it as a pipeline.'}
          </span>
          {model.graphLoading && (
            <span className="cube-PipelineGraph-note">updating…</span>
          )}
          {run && (
            <span className="cube-PipelineGraph-run" title={`Run ${run.id}`}>
              run {run.id}
              <StatusBadge status={run.status} testid="cube-graph-run-status" />
            </span>
          )}
          {run && (
            <ul className="cube-PipelineGraph-legend" aria-label="Step states">
              {LEGEND.filter(s => shown.has(s)).map(status => (
                <li key={status} className={`cube-mod-${status}`}>
                  {status}
                </li>
              ))}
            </ul>
          )}
        </header>
        <ErrorMessage
          message={model.graphError?.message}
          testid="cube-pipeline-graph-error"
          field={model.graphError?.field}
        />
        <ErrorMessage
          message={model.actionError}
          testid="cube-pipeline-graph-action-error"
        />
        {graph && graph.steps.length > 0 ? (
          <div
            className={`cube-PipelineGraph-canvas${model.graphError ? ' cube-mod-stale' : ''}`}
          >
            <DagCanvas
              steps={graph.steps}
              edges={graph.edges}
              states={states}
              onStepClick={this._openStep}
            />
          </div>
        ) : (
          path && (
            <div className="cube-Pipeline-empty cube-PipelineGraph-empty">
              {graph
                ? 'No steps yet: give a code cell the role “Starts step” in the Pipeline panel.'
                : !model.graphError && 'Building the graph…'}
            </div>
          )
        )}
      </div>
    );
  }
}
