/**
 * The Jobs panel: the caller's training, tuning and serving jobs on the left; on the
 * right the job picked, or the launch form of a kind. It renders the model and turns
 * clicks into model calls; the server validates every spec.
 */
import { Button } from '@jupyterlab/ui-components';
import * as React from 'react';

import { AllUsersToggle } from '../common/components/AllUsersToggle';
import { ErrorMessage } from '../common/components/ErrorMessage';
import {
  PanelHeader,
  RefreshButton,
  SectionTitle
} from '../common/components/PanelHeader';
import { confirmAction } from '../common/dialogs';
import { VisibleRenderer } from '../common/visibleRenderer';
import type { IGpuUsage } from '../tokens';
import { JobDetail } from './components/JobDetail';
import { JobList } from './components/JobList';
import { ServingForm } from './components/ServingForm';
import { TrainingForm } from './components/TrainingForm';
import { TuningForm } from './components/TuningForm';
import { jobsIcon } from './icons';
import { jobKey } from './format';
import type { JobsModel } from './model';
import type { IJob, IJobsConfig, JobKind } from './types';

const KIND_LABELS: Record<JobKind, string> = {
  training: 'Training',
  tuning: 'Tuning',
  serving: 'Serving'
};
const KINDS: JobKind[] = ['training', 'tuning', 'serving'];

export class JobsPanel extends VisibleRenderer<JobsModel> {
  /** `gpuUsage`: the GPU plugin's history of jobs, for a running job's GPU sparkline. */
  constructor(
    model: JobsModel,
    private readonly gpuUsage: IGpuUsage | null = null
  ) {
    super(model, {
      id: 'cube-jobs-panel',
      className: 'cube-JobsPanel',
      icon: jobsIcon,
      caption: 'Training, tuning and serving jobs',
      testid: 'cube-jobs'
    });
  }

  protected render(): JSX.Element {
    const model = this.model;
    const now = Date.now();
    const job = model.selected;
    const showJob = model.view === 'job' && job !== null;
    return (
      <div className="cube-Jobs">
        <PanelHeader title="Jobs" className="cube-Jobs-header">
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
            <AllUsersToggle
              scope={model}
              label="All users"
              testid="cube-jobs-all-users"
            />
            <RefreshButton
              tooltip="Fetch the jobs again"
              testid="cube-jobs-refresh"
              onClick={() => void model.refresh()}
            />
          </div>
        </PanelHeader>
        <div className="cube-Jobs-body">
          <section className="cube-Jobs-list">
            <ErrorMessage message={model.listError} testid="cube-jobs-error" />
            {model.loaded && (
              <JobList
                jobs={model.jobs}
                selected={showJob ? model.selectedKey : null}
                showUser={model.allUsers}
                now={now}
                onSelect={job => model.select(jobKey(job))}
              />
            )}
          </section>
          <section className="cube-Jobs-side">
            <div hidden={showJob} data-testid="cube-jobs-launch">
              <SectionTitle>
                New {KIND_LABELS[model.launchKind].toLowerCase()} job
              </SectionTitle>
              <ErrorMessage
                message={model.vocabularyError}
                testid="cube-jobs-config-error"
              />
              <ErrorMessage
                message={model.opening.error?.message}
                testid="cube-jobs-open-error"
              />
              {model.vocabulary
                ? KINDS.map(kind => (
                    <div key={kind} hidden={kind !== model.launchKind}>
                      {this._form(kind, model.vocabulary!)}
                    </div>
                  ))
                : !model.vocabularyError && (
                    <div className="cube-Jobs-empty">Loading…</div>
                  )}
            </div>
            {showJob && job && (
              <JobDetail
                model={model}
                job={job}
                now={now}
                gpuUsage={this.gpuUsage}
                onDelete={target => void this._delete(target)}
              />
            )}
          </section>
        </div>
      </div>
    );
  }

  /** A kind's form; a spec file opened into it starts it afresh (a new `key`). */
  private _form(kind: JobKind, vocabulary: IJobsConfig): JSX.Element {
    const model = this.model;
    const current = model.launchKind === kind;
    const file = model.draft?.kind === kind ? model.draft : undefined;
    const key = file ? `${file.path}#${file.version}` : 'new';
    const props = {
      vocabulary,
      launching: model.launching.busy,
      error: current ? model.launching.error : null,
      file,
      saving: {
        busy: model.saving.busy,
        error: current ? model.saving.error : null,
        saved: current ? model.saving.value : null
      },
      onLaunch: (spec: Record<string, unknown>) => model.launch(kind, spec),
      onSave: (spec: Record<string, unknown>, path: string) =>
        model.saveSpec(kind, spec, path),
      onEdit: () => {
        model.launching.clearError();
        model.saving.clearError();
      }
    };
    if (kind === 'training') {
      return <TrainingForm key={key} {...props} />;
    }
    if (kind === 'tuning') {
      return <TuningForm key={key} {...props} />;
    }
    return <ServingForm key={key} {...props} />;
  }

  private async _delete(job: IJob): Promise<void> {
    if (
      await confirmAction(
        'Delete',
        `Delete ${job.kind} job ${job.name}?`,
        job.finished
          ? 'Its logs and records are removed.'
          : 'Its replicas are stopped and its logs removed.'
      )
    ) {
      await this.model.remove(job);
    }
  }
}
