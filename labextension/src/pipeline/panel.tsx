/**
 * The "Pipeline" sidebar panel for the active notebook: the cells' steps (editable),
 * the DAG, the parameters form, Run, the run being watched and the run history.
 * It renders the model and turns clicks into model calls or cell-tag edits.
 */
import {
  Button,
  HTMLSelect,
  ToolbarButtonComponent
} from '@jupyterlab/ui-components';
import * as React from 'react';

import { ErrorMessage } from '../common/components/ErrorMessage';
import {
  PanelHeader,
  RefreshButton,
  SectionTitle
} from '../common/components/PanelHeader';
import { placeError } from '../common/fieldError';
import { VisibleRenderer } from '../common/visibleRenderer';
import { CellSteps, ICellInfo } from './components/CellSteps';
import { DagView } from './components/DagView';
import { ParametersForm } from './components/ParametersForm';
import { RunHistory } from './components/RunHistory';
import type { IGpuUsage } from '../tokens';
import { RunView } from './components/RunView';
import { GraphWarnings } from './components/GraphWarnings';
import { pipelineIcon } from './icons';
import { isEnded, PipelineModel } from './model';
import {
  CellRole,
  ITagVocabulary,
  readRole,
  roleChoices,
  withRole
} from './tags';
import type { IRun, IRunStep, RunTarget, StepStatus } from './types';
import { warningsByCell } from './warnings';

/** Opens a step's executed notebook; errors are the caller's to show. */
export type StepOpener = (run: IRun, step: IRunStep) => Promise<void>;

const TARGET_LABELS: Record<RunTarget, string> = {
  local: 'This machine',
  cluster: 'Cluster (Argo)',
  kfp: 'Kubeflow Pipelines'
};

export class PipelinePanel extends VisibleRenderer<PipelineModel> {
  constructor(
    model: PipelineModel,
    private readonly _openStep: StepOpener,
    private readonly _openGraph: () => void,
    /** The GPU plugin's step history: a running GPU step's memory sparkline. */
    private readonly _gpuUsage: IGpuUsage | null = null
  ) {
    super(model, {
      id: 'cube-pipeline',
      className: 'cube-PipelinePanel',
      icon: pipelineIcon,
      caption: 'Pipeline',
      testid: 'cube-pipeline'
    });
  }

  /** "Schedule…" by Run, where the server offers schedules (null: not offered). */
  get scheduleAction(): (() => void) | null {
    return this._scheduleAction;
  }

  set scheduleAction(action: (() => void) | null) {
    this._scheduleAction = action;
    this.update();
  }

  protected render(): JSX.Element {
    const model = this.model;
    const notebook = model.notebook;
    return (
      <div className="cube-Pipeline">
        <PanelHeader title="Pipeline">
          <RefreshButton
            tooltip="Build the graph and fetch the runs again"
            testid="cube-pipeline-refresh"
            onClick={() => {
              void model.refreshGraph();
              void model.refreshHistory();
            }}
          />
        </PanelHeader>
        {notebook ? (
          this._renderNotebook()
        ) : (
          <div
            className="cube-Pipeline-section cube-Pipeline-empty"
            data-testid="cube-pipeline-none"
          >
            Open a notebook to see it as a pipeline.
          </div>
        )}
      </div>
    );
  }

  private _renderNotebook(): JSX.Element {
    const model = this.model;
    const graph = model.graph;
    const run = model.selectedRun;
    const states = new Map<string, StepStatus>(
      (run?.steps ?? []).map(s => [s.name, s.status])
    );
    const graphError = model.graphError;
    const runError = model.starting.error;
    const tags = model.config?.tags ?? null;
    const running = !!run && !isEnded(run);
    return (
      <>
        <div
          className="cube-Pipeline-notebook"
          data-testid="cube-pipeline-path"
        >
          {model.path}
        </div>
        <section className="cube-Pipeline-section">
          <SectionTitle>Cells</SectionTitle>
          {tags ? (
            <CellSteps
              cells={this._cells(tags)}
              roles={roleChoices(tags)}
              onRole={(index, role, step) =>
                this._setRole(index, role, step, tags)
              }
              onReveal={index => this._reveal(index)}
            />
          ) : (
            <div className="cube-Pipeline-empty">Loading…</div>
          )}
        </section>
        <section className="cube-Pipeline-section">
          <div className="cube-Dag-head">
            <SectionTitle note={model.graphLoading && 'updating…'}>
              Graph
            </SectionTitle>
            <ToolbarButtonComponent
              label="Open large"
              tooltip="Open the graph in the main area: pan, zoom, open a step's notebook"
              dataset={{ testid: 'cube-dag-open' }}
              enabled={!!graph}
              onClick={this._openGraph}
            />
          </div>
          {graphError && (
            <ErrorMessage
              message={graphError.message}
              testid="cube-graph-error"
              field={graphError.field ?? ''}
            />
          )}
          {graph && (
            <div
              className={`cube-Dag-frame${graphError ? ' cube-mod-stale' : ''}`}
            >
              <DagView
                steps={graph.steps}
                edges={graph.edges}
                states={states}
                onOpen={this._openGraph}
              />
            </div>
          )}
          {graph && graph.warnings.length > 0 && (
            <GraphWarnings
              warnings={graph.warnings}
              onReveal={index => this._reveal(index)}
            />
          )}
        </section>
        <section className="cube-Pipeline-section">
          <SectionTitle>Parameters</SectionTitle>
          <ParametersForm
            parameters={graph?.parameters ?? []}
            value={p => model.parameterValue(p)}
            error={runError}
            onChange={(name, text) => model.setParameterValue(name, text)}
          />
          <div className="cube-Pipeline-run">
            {model.targets.length > 1 && (
              <HTMLSelect
                aria-label="Where to run"
                data-testid="cube-run-target"
                value={model.target}
                onChange={event => {
                  model.target = event.target.value as RunTarget;
                }}
                options={model.targets.map(t => ({
                  value: t,
                  label: TARGET_LABELS[t] ?? t
                }))}
              />
            )}
            <label
              className="cube-Pipeline-nocache"
              title="Run every step again, even unchanged ones"
            >
              <input
                type="checkbox"
                data-testid="cube-run-nocache"
                checked={model.noCache}
                onChange={event => {
                  model.noCache = event.target.checked;
                }}
              />
              No cache
            </label>
            <Button
              className="cube-Button cube-mod-accept"
              data-testid="cube-run-start"
              disabled={model.starting.busy || !graph || running}
              onClick={() => void model.startRun()}
            >
              {model.starting.busy ? 'Starting…' : 'Run'}
            </Button>
            {this._scheduleAction && (
              <Button
                className="cube-Button"
                minimal
                data-testid="cube-pipeline-schedule"
                title="Run this notebook (as saved) as a pipeline on a schedule"
                onClick={this._scheduleAction}
              >
                Schedule…
              </Button>
            )}
          </div>
          {runError && (
            <ErrorMessage
              message={runError.message}
              testid="cube-run-start-error"
              field={runError.field ?? ''}
            />
          )}
        </section>
        {run && (
          <section className="cube-Pipeline-section">
            <SectionTitle>Run</SectionTitle>
            <RunView
              run={run}
              ended={isEnded(run)}
              error={model.actionError}
              onCancel={() => void model.cancelRun()}
              onResume={() => void model.resumeRun()}
              onOpenStep={step => void this._open(run, step)}
              gpuUsage={this._gpuUsage}
            />
          </section>
        )}
        <section className="cube-Pipeline-section">
          <SectionTitle>History</SectionTitle>
          <ErrorMessage
            message={model.historyError}
            testid="cube-history-error"
          />
          <RunHistory
            runs={model.runs}
            selected={run?.id ?? null}
            now={Date.now()}
            onSelect={id => model.selectRun(id)}
          />
        </section>
      </>
    );
  }

  /** Open the executed notebook of the shown run's step `name`, if it has one. */
  openRunStep(name: string): void {
    const run = this.model.selectedRun;
    const step = run?.steps.find(s => s.name === name);
    if (run && step?.notebook) {
      void this._open(run, step);
    }
  }

  /**
   * The notebook's code cells, with the step the server put each in (for a cell that
   * continues a step, untagged or with an empty `block:`, the step it continues), the
   * graph's error when it names the cell (`cells[3].tags`) and its warnings.
   */
  private _cells(vocabulary: ITagVocabulary): ICellInfo[] {
    const notebook = this.model.notebook;
    const cells = notebook?.content.model?.cells;
    if (!cells) {
      return [];
    }
    const graphError = this.model.graphError;
    const paths = Array.from({ length: cells.length }, (_, i) => `cells[${i}]`);
    const errorAt = placeError(paths, graphError?.field);
    const warned = warningsByCell(this.model.graph?.warnings ?? []);
    const stepOf = new Map<number, string>();
    const opening = new Set<number>();
    for (const step of this.model.graph?.steps ?? []) {
      for (const index of step.cells) {
        stepOf.set(index, step.name);
      }
      if (step.cells.length > 0) {
        opening.add(step.cells[0]);
      }
    }
    const infos: ICellInfo[] = [];
    for (let index = 0; index < cells.length; index++) {
      const cell = cells.get(index);
      if (cell.type !== 'code') {
        continue;
      }
      const tags = cellTags(cell.getMetadata('tags'));
      const { role, step } = readRole(tags, vocabulary);
      const source = cell.sharedModel.getSource();
      infos.push({
        index,
        preview: source.split('\n').find(line => line.trim()) ?? '',
        role,
        stepTag: step,
        step: stepOf.get(index) ?? null,
        opens: opening.has(index),
        error: errorAt === paths[index] ? (graphError?.message ?? null) : null,
        warnings: warned.get(index) ?? []
      });
    }
    return infos;
  }

  /** Rewrite one cell's tags in the notebook model (the notebook becomes unsaved). */
  private _setRole(
    index: number,
    role: CellRole,
    step: string,
    vocabulary: ITagVocabulary
  ): void {
    const cell = this.model.notebook?.content.model?.cells.get(index);
    if (!cell) {
      return;
    }
    const tags = withRole(
      cellTags(cell.getMetadata('tags')),
      role,
      step,
      vocabulary
    );
    if (tags.length) {
      cell.setMetadata('tags', tags);
    } else {
      cell.deleteMetadata('tags');
    }
  }

  /** Make cell `index` (over all cells) the notebook's active cell, scrolled into view. */
  private _reveal(index: number): void {
    const content = this.model.notebook?.content;
    if (!content) {
      return;
    }
    content.activeCellIndex = index;
    const cell = content.widgets[index];
    if (cell) {
      void content.scrollToCell(cell);
    }
  }

  private _scheduleAction: (() => void) | null = null;

  private async _open(run: IRun, step: IRunStep): Promise<void> {
    try {
      this.model.setActionError(null);
      await this._openStep(run, step);
    } catch (error) {
      this.model.setActionError(
        `Cannot open the notebook of ${step.name}: ${(error as Error).message ?? error}`
      );
    }
  }
}

function cellTags(value: unknown): string[] {
  return Array.isArray(value)
    ? value.filter((t): t is string => typeof t === 'string')
    : [];
}
