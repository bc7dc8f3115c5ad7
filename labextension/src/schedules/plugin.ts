/**
 * `schedules`: the Schedules panel in the left sidebar (the caller's scheduled notebooks,
 * their runs by logical time, pause, run now, backfill, edit, delete) and the schedule
 * form of a notebook, opened by `cube:schedule-notebook` (the notebook toolbar's and the
 * Pipeline panel's "Schedule…"). Only where `GET /info` lists `schedules`: the central
 * workbench, which runs the scheduler; a user server does not.
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { INotebookTracker } from '@jupyterlab/notebook';

import { CubeClient, IProbe, serverInfo } from '../common/api';
import { PipelineClient } from '../pipeline/client';
import { offerIfAvailable } from '../plugins/catalog';
import { PipelineCommandIDs } from '../tokens';
import { ScheduleClient } from './client';
import { ScheduleCommandIDs } from './commands';
import { scheduleIcon } from './icons';
import { SchedulesModel } from './model';
import { SchedulesPanel } from './panel';

/** Whether the server lists `schedules` in `GET /info`. */
async function probeSchedules(cube: CubeClient): Promise<IProbe<null>> {
  const info = await serverInfo(cube);
  const features: readonly string[] = info?.features ?? [];
  return { available: features.includes('schedules'), value: null };
}

export const schedulesPlugin: JupyterFrontEndPlugin<void> = {
  id: 'cube-jupyter:schedules',
  description:
    'The Schedules panel and the schedule form of a notebook ("Schedule…").',
  autoStart: true,
  optional: [INotebookTracker, ILayoutRestorer, ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker | null,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null
  ): void => {
    const cube = new CubeClient(app.serviceManager.serverSettings);
    const model = new SchedulesModel(
      new ScheduleClient(cube),
      new PipelineClient(cube)
    );
    // A square of a notebook schedule opens its pipeline run in the Pipeline panel.
    const panel = new SchedulesPanel(model, async (schedule, run) => {
      if (!app.commands.hasCommand(PipelineCommandIDs.openRun)) {
        throw new Error('the Pipeline panel is not available');
      }
      await app.commands.execute(PipelineCommandIDs.openRun, {
        path: schedule.path,
        run: run.run_id
      });
    });
    const show = () => app.shell.activateById(panel.id);

    void offerIfAvailable(probeSchedules(cube), {
      parts: [panel, model],
      ready: () => {
        app.shell.add(panel, 'left', { rank: 300 });
        if (restorer) {
          restorer.add(panel, 'cube-schedules');
        }
        app.commands.addCommand(ScheduleCommandIDs.open, {
          label: 'Open Schedules',
          caption: 'Show your scheduled notebooks and their runs',
          icon: scheduleIcon,
          execute: show
        });
        app.commands.addCommand(ScheduleCommandIDs.create, {
          label: 'Schedule Notebook…',
          caption: 'Run the active notebook as a pipeline on a schedule',
          icon: scheduleIcon,
          isEnabled: args => !!(args.path || tracker?.currentWidget),
          execute: args => {
            const path =
              (args.path as string | undefined) ||
              tracker?.currentWidget?.context.path;
            if (path) {
              const open = tracker?.find(w => w.context.path === path);
              model.startCreate(path, !!open?.context.model.dirty);
            }
            show();
          }
        });
        app.commands.addCommand(ScheduleCommandIDs.refresh, {
          label: 'Refresh Schedules',
          caption: 'Fetch the schedules and their runs again',
          execute: () => model.refresh()
        });
      },
      palette,
      commands: Object.values(ScheduleCommandIDs)
    });
  }
};
