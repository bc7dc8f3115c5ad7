/**
 * `gpu`: the GPU panel (main area; command palette, launcher card, View menu, restored
 * with the layout), the status-bar item with the current notebook's kernel GPU use, and
 * a toast when a notebook's kernel holds a GPU idle for longer than the server allows.
 * All of it reads one shared model, polled from `/cube/api/v1/gpu`.
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { ILauncher } from '@jupyterlab/launcher';
import { IMainMenu } from '@jupyterlab/mainmenu';
import { INotebookTracker } from '@jupyterlab/notebook';
import { IStatusBar } from '@jupyterlab/statusbar';
import type { DockLayout } from '@lumino/widgets';

import { CubeClient } from '../common/api';
import { GpuClient } from '../gpu/client';
import { gpuIcon } from '../gpu/icons';
import { IdleNotifier } from '../gpu/idleNotifier';
import { GpuModel } from '../gpu/model';
import { GpuPanel } from '../gpu/panel';
import { KernelGpuStatus, KernelGpuStatusModel } from '../gpu/status';
import { GpuUsage } from '../gpu/usage';
import { GpuCommandIDs, IGpuUsage } from '../tokens';
import { offerIfAvailable } from './catalog';
import { MainAreaPanel } from './mainAreaPanel';

export const gpuPlugin: JupyterFrontEndPlugin<IGpuUsage> = {
  id: 'cube-jupyter:gpu',
  description:
    'The GPU panel, the status-bar item with the notebook kernel GPU use, and idle-GPU warnings.',
  autoStart: true,
  provides: IGpuUsage,
  optional: [
    ILayoutRestorer,
    ICommandPalette,
    ILauncher,
    IMainMenu,
    IStatusBar,
    INotebookTracker
  ],
  activate: (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null,
    launcher: ILauncher | null,
    mainMenu: IMainMenu | null,
    statusBar: IStatusBar | null,
    notebooks: INotebookTracker | null
  ): IGpuUsage => {
    const client = new GpuClient(
      new CubeClient(app.serviceManager.serverSettings)
    );
    const model = new GpuModel(client);
    const openNotebook = (path: string) =>
      void app.commands.execute('docmanager:open', { path });
    // Every server that lists `gpu` in /info gets the UI (the workbench and the user
    // servers it starts); the first answer is the first report.
    const available = offerIfAvailable(model.probe(), {
      parts: [model],
      ready: () => startGpu(app, model, mainMenu, statusBar, notebooks),
      palette,
      commands: Object.values(GpuCommandIDs),
      launcher,
      card: { command: GpuCommandIDs.open, rank: 11 }
    });
    const panel = new MainAreaPanel(app, {
      id: 'cube-gpu',
      label: 'GPU',
      caption: 'GPU use: devices, kernels, pods and quota',
      icon: gpuIcon,
      create: () => new GpuPanel(model, openNotebook)
    });

    const open = async (mode?: DockLayout.InsertMode): Promise<void> => {
      if (!(await available)) {
        return;
      }
      // Opened for a notebook (status bar, idle warning): beside it, unless already in view.
      const beside = notebooks?.currentWidget;
      panel.show(mode, beside?.isAttached ? beside.id : null);
    };

    app.commands.addCommand(GpuCommandIDs.open, {
      label: args => (args.isLauncher ? 'GPU' : 'Open GPU Panel'),
      caption: 'Show GPU use: per GPU, per kernel and per pod, and the quota',
      icon: gpuIcon,
      execute: args =>
        open((args.mode as DockLayout.InsertMode | undefined) ?? undefined)
    });
    app.commands.addCommand(GpuCommandIDs.refresh, {
      label: 'Refresh GPU Usage',
      caption: 'Read the GPUs again now',
      execute: () => model.refresh()
    });
    panel.restore(restorer, GpuCommandIDs.open);
    return new GpuUsage(client);
  }
};

/** Once the GPU API is known to be there: poll, the View menu, status bar and idle toasts. */
function startGpu(
  app: JupyterFrontEnd,
  model: GpuModel,
  mainMenu: IMainMenu | null,
  statusBar: IStatusBar | null,
  notebooks: INotebookTracker | null
): void {
  model.start();
  const openBeside = () =>
    void app.commands.execute(GpuCommandIDs.open, { mode: 'split-right' });
  if (mainMenu) {
    mainMenu.viewMenu.addGroup([{ command: GpuCommandIDs.open }], 100);
  }
  if (statusBar && notebooks) {
    const status = new KernelGpuStatusModel(model, notebooks);
    statusBar.registerStatusItem('cube-jupyter:gpu-status', {
      item: new KernelGpuStatus(status, openBeside),
      align: 'left',
      rank: 5,
      isActive: () => status.kernel !== null,
      activeStateChanged: status.activeChanged
    });
  }
  new IdleNotifier(model, openBeside);
}
