/**
 * `jobs`: the Jobs panel (main area; command palette, launcher card, restored with the
 * layout) listing the caller's training, tuning and serving jobs, with the forms that
 * launch them, live replica logs, tuning trials and a served model's test box. A YAML
 * job spec in the file browser opens into its form: "Run as Job" in its context menu,
 * or a double-click, which opens it in the editor as always and, when the server
 * recognises a job spec, its form beside it.
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { ILauncher } from '@jupyterlab/launcher';
import type { Contents } from '@jupyterlab/services';
import type { Widget } from '@lumino/widgets';

import { CubeClient, probe } from '../common/api';
import { JobsClient } from '../jobs/client';
import { jobsIcon } from '../jobs/icons';
import { JobsModel } from '../jobs/model';
import { JobsPanel } from '../jobs/panel';
import type { JobKind } from '../jobs/types';
import { IGpuUsage, IJobsPanel, JobsCommandIDs } from '../tokens';
import { offerIfAvailable } from './catalog';
import { MainAreaPanel } from './mainAreaPanel';

/** The file browser's command that opens a spec file's form. */
const RUN_SPEC_FILE = 'cube:run-job-spec-file';
const YAML = /\.ya?ml$/i;

/** What the default file browser (`filebrowser`, a FileBrowser) offers: its selection. */
interface ISelecting extends Widget {
  selectedItems(): IterableIterator<Contents.IModel>;
}

/** The default file browser, found among the left area's widgets (no dependency on its package). */
function fileBrowser(app: JupyterFrontEnd): ISelecting | null {
  for (const widget of app.shell.widgets('left')) {
    if (widget.id === 'filebrowser' && 'selectedItems' in widget) {
      return widget as ISelecting;
    }
  }
  return null;
}

/** The YAML file selected in the file browser (the one right-clicked or double-clicked). */
function selectedYaml(app: JupyterFrontEnd): string | null {
  const first = fileBrowser(app)?.selectedItems().next();
  const item = first && !first.done ? first.value : null;
  return item && item.type !== 'directory' && YAML.test(item.name)
    ? item.path
    : null;
}

/** The main-area widget showing `path` (a document's), once it is the current one. */
function whenCurrent(app: JupyterFrontEnd, path: string): Promise<Widget> {
  const shell = app.shell;
  const showing = (widget: Widget | null): widget is Widget =>
    (widget as { context?: { path?: string } } | null)?.context?.path === path;
  return new Promise(resolve => {
    const check = () => {
      if (showing(shell.currentWidget)) {
        shell.currentChanged?.disconnect(check);
        resolve(shell.currentWidget);
      }
    };
    shell.currentChanged?.connect(check);
    check();
  });
}

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
    const model = new JobsModel(client, app.serviceManager.contents);
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
    app.commands.addCommand(RUN_SPEC_FILE, {
      label: 'Run as Job',
      caption: "Open this YAML job spec in the Jobs panel's launch form",
      icon: jobsIcon,
      isVisible: () => selectedYaml(app) !== null,
      execute: async args => {
        const path = (args.path as string | undefined) ?? selectedYaml(app);
        if (path && (await available)) {
          panel.show();
          await model.openSpecFile(path);
        }
      }
    });
    app.contextMenu.addItem({
      command: RUN_SPEC_FILE,
      selector: '.jp-DirListing-item[data-isdir="false"]',
      rank: 3
    });
    // A double-click opens the file in the editor (JupyterLab's own handler, which stops the
    // event: hence the capture phase, the item already selected by the first click); a job
    // spec's form opens beside it. Any other YAML only opens in the editor: the server says no.
    void app.restored.then(() =>
      fileBrowser(app)?.node.addEventListener(
        'dblclick',
        () => {
          const path = selectedYaml(app);
          if (!path) {
            return;
          }
          const editor = whenCurrent(app, path);
          void available.then(async ok => {
            const file = ok
              ? await client.readSpecFile(path).catch(() => null)
              : null;
            if (file) {
              panel.show('split-right', (await editor).id);
              model.showSpecFile(file);
            }
          });
        },
        true
      )
    );
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
