/**
 * `jobs`: the Jobs panel (main area; command palette, launcher card, restored with the
 * layout) listing the caller's training, tuning and serving jobs, with the forms that
 * launch them, live replica logs, tuning trials and a served model's test box.
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { ILauncher } from '@jupyterlab/launcher';

import { CubeClient, probe } from '../common/api';
import { JobsClient } from '../jobs/client';
import { jobsIcon } from '../jobs/icons';
import { JobsModel } from '../jobs/model';
import { JobsPanel } from '../jobs/panel';
import type { JobKind } from '../jobs/types';
import { IGpuUsage, IJobsPanel, JobsCommandIDs } from '../tokens';
import { offerIfAvailable } from './catalog';
import { MainAreaPanel } from './mainAreaPanel';

export const jobsPlugin: JupyterFrontEndPlugin<IJobsPanel> = {
  id: 'cube-jupyter:jobs',
  description:
    'The Jobs panel: launch and watch training, tuning and serving jobs.',
  autoStart: true,
  provides: IJobsPanel,
  optional: [ILayoutRestorer, ICommandPalette, ILauncher, IGpuUsage],
  activate: (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null,
    launcher: ILauncher | null,
    gpuUsage: IGpuUsage | null
  ): IJobsPanel => {
    const client = new JobsClient(
      new CubeClient(app.serviceManager.serverSettings)
    );
    const model = new JobsModel(client);
    // Every server that lists `jobs` in /info gets the panel (the workbench and the user
    // servers it starts); the first answer is the launch forms' vocabulary.
    const available = offerIfAvailable(
      probe(client.cube, 'jobs', () => client.config()),
      {
        parts: [model],
        ready: vocabulary => vocabulary && model.setVocabulary(vocabulary),
        palette,
        commands: Object.values(JobsCommandIDs),
        launcher,
        card: { command: JobsCommandIDs.open, rank: 12 }
      }
    );
    const panel = new MainAreaPanel(app, {
      id: 'cube-jobs',
      label: 'Jobs',
      caption: 'Training, tuning and serving jobs',
      icon: jobsIcon,
      create: () => new JobsPanel(model, gpuUsage)
    });

    const open = async (kind?: JobKind): Promise<void> => {
      if (!(await available)) {
        return;
      }
      panel.show();
      if (kind) {
        model.startLaunch(kind);
      }
    };

    app.commands.addCommand(JobsCommandIDs.open, {
      label: args => (args.isLauncher ? 'Jobs' : 'Open Jobs Panel'),
      caption: 'Launch and watch training, tuning and serving jobs',
      icon: jobsIcon,
      execute: () => open()
    });
    const launchers: [string, JobKind, string][] = [
      [JobsCommandIDs.newTraining, 'training', 'New Training Job…'],
      [JobsCommandIDs.newTuning, 'tuning', 'New Tuning Job…'],
      [JobsCommandIDs.newServing, 'serving', 'New Serving Job…']
    ];
    for (const [command, kind, label] of launchers) {
      app.commands.addCommand(command, {
        label,
        caption: `Open the Jobs panel's ${kind} form`,
        icon: jobsIcon,
        execute: () => open(kind)
      });
    }
    app.commands.addCommand(JobsCommandIDs.refresh, {
      label: 'Refresh Jobs',
      caption: 'Fetch the job list again',
      execute: () => model.refresh()
    });
    panel.restore(restorer, JobsCommandIDs.open);

    return {
      available,
      open,
      showJob: async (name: string) => {
        await open();
        await model.refresh();
        model.selectOwn(name);
      },
      refresh: () => model.refresh()
    };
  }
};
