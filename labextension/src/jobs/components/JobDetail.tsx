/**
 * One job: its status and why, conditions, per-replica live logs, and by kind the trial
 * table with the best parameters and the optimization history (tuning) or the endpoint
 * and a test-request box (serving); the spec it was submitted with at the end.
 */
import { Button } from '@jupyterlab/ui-components';
import * as React from 'react';

import { ErrorMessage } from '../../common/components/ErrorMessage';
import { GpuMemory } from '../../common/components/GpuMemory';
import { SectionTitle } from '../../common/components/PanelHeader';
import { StatusBadge } from '../../common/components/StatusBadge';
import { QueuePlace } from './QueuePlace';
import { jobAge, jobKey, localTime } from '../format';
import type { JobsModel } from '../model';
import type { IJob } from '../types';
import { Conditions } from './Conditions';
import { HistoryPlot } from './HistoryPlot';
import { JobMessage } from './JobMessage';
import { LogView } from './LogView';
import { ServingBox } from './ServingBox';
import { BestTrial, objectiveOf, TrialTable } from './TrialTable';
import type { IGpuUsage } from '../../tokens';

export interface IJobDetailProps {
  model: JobsModel;
  job: IJob;
  now: number;
  /** The GPU plugin's job history: a running job's GPU memory sparkline; null: none. */
  gpuUsage?: IGpuUsage | null;
  onDelete: (job: IJob) => void;
}

export function JobDetail(props: IJobDetailProps): JSX.Element {
  const { model, job } = props;
  const history = model.history;
  return (
    <div
      className="cube-JobDetail"
      data-testid="cube-job-detail"
      data-name={job.name}
      data-phase={job.phase}
    >
      <header className="cube-JobDetail-head">
        <h3 className="cube-JobDetail-name">{job.name}</h3>
        <StatusBadge
          status={job.phase.toLowerCase()}
          testid="cube-job-detail-phase"
        />
        <QueuePlace job={job} />
        <span className="cube-JobDetail-meta">
          {job.kind}
          {job.framework ? ` · ${job.framework}` : ''} · {job.backend} ·{' '}
          {job.gpus} GPU · started{' '}
          <span title={localTime(job.created)}>
            {jobAge(job, props.now)} ago
          </span>
          {job.completed !== null && (
            <> · finished {localTime(job.completed)}</>
          )}
        </span>
        {props.gpuUsage && !job.completed && (
          <GpuMemory
            usage={props.gpuUsage}
            series={`job:${job.user}/${job.name}`}
            whose="the job's processes"
          />
        )}
        <Button
          className="cube-Button cube-mod-danger"
          minimal
          small
          data-testid="cube-job-delete"
          onClick={() => props.onDelete(job)}
        >
          Delete
        </Button>
      </header>
      <ErrorMessage
        message={model.actionError}
        testid="cube-job-action-error"
      />
      <JobMessage job={job} />
      <section className="cube-JobDetail-section">
        <SectionTitle level={4}>Conditions</SectionTitle>
        <Conditions conditions={job.conditions} />
      </section>
      {job.kind === 'tuning' && (
        <section className="cube-JobDetail-section">
          <SectionTitle level={4}>Trials</SectionTitle>
          <BestTrial job={job} />
          <TrialTable job={job} />
          <SectionTitle level={4}>Optimization history</SectionTitle>
          <ErrorMessage
            message={model.historyError}
            testid="cube-job-history-error"
          />
          {history && (
            <HistoryPlot history={history} metric={objectiveOf(job).metric} />
          )}
        </section>
      )}
      {job.kind === 'serving' && (
        <section className="cube-JobDetail-section">
          <SectionTitle level={4}>Model</SectionTitle>
          <ServingBox
            key={jobKey(job)}
            job={job}
            protocols={model.vocabulary?.serving.protocols ?? []}
            predicting={model.prediction.busy}
            prediction={model.prediction.value}
            error={model.prediction.error}
            onPredict={(inputs, protocol) =>
              void model.predict(inputs, protocol)
            }
          />
        </section>
      )}
      {job.replicas.length > 0 && (
        <section className="cube-JobDetail-section">
          <SectionTitle level={4}>Logs</SectionTitle>
          <LogView
            replicas={job.replicas}
            log={model.logs.current}
            mine={model.logs.current.job === jobKey(job)}
            onPick={replica => model.pickReplica(replica)}
          />
        </section>
      )}
      <section className="cube-JobDetail-section">
        <details>
          <summary>
            <span className="cube-NotebookServers-subtitle">Spec</span>
          </summary>
          <pre className="cube-JobDetail-spec" data-testid="cube-job-spec">
            {JSON.stringify(job.spec, null, 2)}
          </pre>
        </details>
      </section>
    </div>
  );
}
