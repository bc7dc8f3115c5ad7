/**
 * The Schedules sidebar panel: the caller's schedules with their runs by logical time
 * (live while shown), their actions, and the schedule form (a notebook's new schedule,
 * or an edit). It renders the model and turns clicks into model calls.
 */
import * as React from 'react';

import { ErrorMessage } from '../common/components/ErrorMessage';
import { PanelHeader, RefreshButton } from '../common/components/PanelHeader';
import { confirmAction } from '../common/dialogs';
import { VisibleRenderer } from '../common/visibleRenderer';
import { BackfillBox } from './components/BackfillBox';
import { ScheduleCard } from './components/ScheduleCard';
import { ScheduleForm } from './components/ScheduleForm';
import { scheduleIcon } from './icons';
import type { SchedulesModel } from './model';
import type { ISchedule, IScheduleRun } from './types';

/** Opens a schedule's run (a pipeline run of its notebook); errors are the caller's. */
export type RunOpener = (
  schedule: ISchedule,
  run: IScheduleRun
) => Promise<void>;

export class SchedulesPanel extends VisibleRenderer<SchedulesModel> {
  constructor(
    model: SchedulesModel,
    private readonly _openRun: RunOpener | null
  ) {
    super(model, {
      id: 'cube-schedules',
      className: 'cube-SchedulesPanel',
      icon: scheduleIcon,
      caption: 'Schedules',
      testid: 'cube-schedules'
    });
  }

  protected render(): JSX.Element {
    const model = this.model;
    const form = model.form;
    return (
      <div className="cube-Schedules">
        <PanelHeader title="Schedules">
          <RefreshButton
            tooltip="Fetch the schedules and their runs again"
            testid="cube-schedules-refresh"
            onClick={() => void model.refresh()}
          />
        </PanelHeader>
        {form ? (
          <section className="cube-Schedules-section">
            <ScheduleForm
              key={form.key}
              target={form}
              client={model.client}
              saving={model.saving.busy}
              error={model.saving.error}
              names={model.schedules.map(s => s.name)}
              onSave={body => void model.save(body)}
              onCancel={() => model.closeForm()}
              onEdit={() => model.saving.clearError()}
            />
          </section>
        ) : (
          this._renderList()
        )}
      </div>
    );
  }

  private _renderList(): JSX.Element {
    const model = this.model;
    const schedules = model.schedules;
    return (
      <section className="cube-Schedules-section">
        <ErrorMessage message={model.listError} testid="cube-schedules-error" />
        {model.loaded && schedules.length === 0 && !model.listError && (
          <div
            className="cube-Schedules-empty"
            data-testid="cube-schedules-none"
          >
            No schedules yet: use “Schedule…” in a notebook’s toolbar or the
            Pipeline panel.
          </div>
        )}
        <ul className="cube-ScheduleList" data-testid="cube-schedule-list">
          {schedules.map(schedule => this._card(schedule))}
        </ul>
      </section>
    );
  }

  private _card(schedule: ISchedule): JSX.Element {
    const model = this.model;
    const name = schedule.name;
    const backfill = model.backfill?.name === name ? model.backfill : null;
    const open = this._openRun;
    return (
      <ScheduleCard
        key={name}
        schedule={schedule}
        runs={model.runs(name)}
        busy={model.busy(name)}
        error={model.actionError(name)}
        onPause={paused => void model.setPaused(name, paused)}
        onRunNow={() => void model.runNow(name)}
        onBackfill={() => model.toggleBackfill(name)}
        onEdit={() => model.startEdit(name)}
        onDelete={() => void this._delete(schedule)}
        onOpenRun={
          open && schedule.kind === 'notebook'
            ? run => void this._open(schedule, run, open)
            : null
        }
        backfill={
          backfill && (
            <BackfillBox
              state={backfill}
              timezone={schedule.timezone}
              busy={model.backfilling.busy}
              error={model.backfilling.error}
              onPlan={request => void model.planBackfill(request)}
              onConfirm={() => void model.confirmBackfill()}
              onEdit={() => model.editBackfill()}
              onClose={() => model.toggleBackfill(name)}
            />
          )
        }
      />
    );
  }

  private async _open(
    schedule: ISchedule,
    run: IScheduleRun,
    open: RunOpener
  ): Promise<void> {
    try {
      this.model.setActionError(schedule.name, null);
      await open(schedule, run);
    } catch (error) {
      this.model.setActionError(
        schedule.name,
        `Cannot open run ${run.run_id}: ${(error as Error).message ?? error}`
      );
    }
  }

  private async _delete(schedule: ISchedule): Promise<void> {
    if (
      await confirmAction(
        'Delete',
        `Delete schedule ${schedule.name}?`,
        'It stops firing and its runs by logical time are forgotten; runs already going finish.'
      )
    ) {
      await this.model.remove(schedule.name);
    }
  }
}
