/**
 * The Jobs panel: the caller's training, tuning and serving jobs on the left; on the
 * right the job picked, or the launch form of a kind. It renders the model and turns
 * clicks into model calls; the server validates every spec.
 */
import { Dialog, showDialog } from '@jupyterlab/apputils';
import {
  Button,
  refreshIcon,
  ToolbarButtonComponent
} from '@jupyterlab/ui-components';
import * as React from 'react';

import { ErrorMessage } from '../components/ErrorMessage';
import { VisibleRenderer } from '../visibleRenderer';
import { JobDetail } from './components/JobDetail';
import { JobList } from './components/JobList';
import { ServingForm } from './components/ServingForm';
import { TrainingForm } from './components/TrainingForm';
import { TuningForm } from './components/TuningForm';
import { jobsIcon } from './icons';
import type { JobsModel } from './model';
import type { IJob, JobKind } from './types';

const KIND_LABELS: Record<JobKind, string> = {
  training: 'Training',
  tuning: 'Tuning',
  serving: 'Serving'
};
const KINDS: JobKind[] = ['training', 'tuning', 'serving'];

export class JobsPanel extends VisibleRenderer<JobsModel> {
  constructor(model: JobsModel) {
    super(model);
    this.id = 'cube-jobs-panel';
    this.addClass('cube-JobsPanel');
    this.title.icon = jobsIcon;
    this.title.caption = 'Training, tuning and serving jobs';
    this.node.setAttribute('data-testid', 'cube-jobs');
  }

  protected render(): JSX.Element {
    const model = this.model;
    const now = Date.now();
    const job = model.selected;
    const showJob = model.view === 'job' && job !== null;
    return (
      <div className="cube-Jobs">
        <header className="cube-NotebookServers-header cube-Jobs-header">
          <h2 className="cube-NotebookServers-title">Jobs</h2>
          <div className="cube-Jobs-new">
            {KINDS.map(kind => (
              <Button
                key={kind}
                className={`cube-Button${model.view === 'launch' && model.launchKind === kind ? ' cube-mod-accept' : ''}`}
                minimal={
                  !(model.view === 'launch' && model.launchKind === kind)
                }
                small
                data-testid={`cube-jobs-new-${kind}`}
                onClick={() => model.startLaunch(kind)}
              >
                New {KIND_LABELS[kind].toLowerCase()} job
              </Button>
            ))}
            <ToolbarButtonComponent
              icon={refreshIcon}
              tooltip="Fetch the jobs again"
              dataset={{ testid: 'cube-jobs-refresh' }}
              onClick={() => void model.refresh()}
            />
          </div>
        </header>
        <div className="cube-Jobs-body">
          <section className="cube-Jobs-list">
            <ErrorMessage message={model.listError} testid="cube-jobs-error" />
            {model.loaded && (
              <JobList
                jobs={model.jobs}
                selected={showJob ? model.selectedName : null}
                now={now}
                onSelect={name => model.select(name)}
              />
            )}
          </section>
          <section className="cube-Jobs-side">
            <div hidden={showJob} data-testid="cube-jobs-launch">
              <h3 className="cube-NotebookServers-subtitle">
                New {KIND_LABELS[model.launchKind].toLowerCase()} job
              </h3>
              {KINDS.map(kind => (
                <div key={kind} hidden={kind !== model.launchKind}>
                  {this._form(kind)}
                </div>
              ))}
            </div>
            {showJob && job && (
              <JobDetail
                model={model}
                job={job}
                now={now}
                onDelete={target => void this._delete(target)}
              />
            )}
          </section>
        </div>
      </div>
    );
  }

  private _form(kind: JobKind): JSX.Element {
    const model = this.model;
    const props = {
      launching: model.launching,
      error: model.launchKind === kind ? model.launchError : null,
      onLaunch: (spec: Record<string, unknown>) => model.launch(kind, spec),
      onEdit: () => model.editLaunch()
    };
    if (kind === 'training') {
      return <TrainingForm {...props} />;
    }
    if (kind === 'tuning') {
      return <TuningForm {...props} />;
    }
    return <ServingForm {...props} />;
  }

  private async _delete(job: IJob): Promise<void> {
    const running = !job.finished;
    const result = await showDialog({
      title: `Delete ${job.kind} job ${job.name}?`,
      body: running
        ? 'Its replicas are stopped and its logs removed.'
        : 'Its logs and records are removed.',
      buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Delete' })]
    });
    if (result.button.accept) {
      await this.model.remove(job.name);
    }
  }
}
