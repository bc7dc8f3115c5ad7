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
import {
  ICommandPalette,
  MainAreaWidget,
  WidgetTracker
} from '@jupyterlab/apputils';
import { ILauncher } from '@jupyterlab/launcher';
import { IMainMenu } from '@jupyterlab/mainmenu';
import { INotebookTracker } from '@jupyterlab/notebook';
import { IStatusBar } from '@jupyterlab/statusbar';
import type { DockLayout } from '@lumino/widgets';

import { CubeClient } from '../api';
import { GpuClient } from '../gpu/client';
import { gpuIcon } from '../gpu/icons';
import { IdleNotifier } from '../gpu/idleNotifier';
import { GpuModel } from '../gpu/model';
import { GpuPanel } from '../gpu/panel';
import { KernelGpuStatus, KernelGpuStatusModel } from '../gpu/status';
import { GpuCommandIDs } from '../tokens';

const CATEGORY = 'Cube Workbench';
const PANEL_ID = 'cube-gpu';

export const gpuPlugin: JupyterFrontEndPlugin<void> = {
  id: 'cube-jupyter:gpu',
  description:
    'The GPU panel, the status-bar item with the notebook kernel GPU use, and idle-GPU warnings.',
  autoStart: true,
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
  ): void => {
    const model = new GpuModel(
      new GpuClient(new CubeClient(app.serviceManager.serverSettings))
    );
    // Only a server with the workbench's GPU API gets the UI (not a spawned child).
    const available = model.probe();
    const tracker = new WidgetTracker<MainAreaWidget<GpuPanel>>({
      namespace: 'cube-gpu'
    });
    const openNotebook = (path: string) =>
      void app.commands.execute('docmanager:open', { path });

    const open = async (mode?: DockLayout.InsertMode): Promise<void> => {
      if (!(await available)) {
        return;
      }
      let widget = tracker.currentWidget;
      if (!widget || widget.isDisposed) {
        const panel = new GpuPanel(model, openNotebook);
        widget = new MainAreaWidget({ content: panel });
        widget.id = PANEL_ID;
        widget.title.label = 'GPU';
        widget.title.icon = gpuIcon;
        widget.title.caption = 'GPU use: devices, kernels, pods and quota';
        widget.title.closable = true;
        void tracker.add(widget);
      }
      // Opened for a notebook (status bar, idle warning): beside it, unless already in view.
      const beside = notebooks?.currentWidget;
      if (!widget.isAttached || (mode && !widget.isVisible)) {
        app.shell.add(
          widget,
          'main',
          mode
            ? { mode, ref: beside?.isAttached ? beside.id : null }
            : undefined
        );
      }
      app.shell.activateById(widget.id);
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
    if (restorer) {
      void restorer.restore(tracker, {
        command: GpuCommandIDs.open,
        name: () => PANEL_ID
      });
    }

    void available.then(ok => {
      if (!ok) {
        model.dispose();
        return;
      }
      model.start();
      const openBeside = () =>
        void app.commands.execute(GpuCommandIDs.open, { mode: 'split-right' });
      if (palette) {
        for (const command of Object.values(GpuCommandIDs)) {
          palette.addItem({ command, category: CATEGORY });
        }
      }
      if (launcher) {
        launcher.add({
          command: GpuCommandIDs.open,
          category: 'Other',
          rank: 11,
          args: { isLauncher: true }
        });
      }
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
    });
  }
};
