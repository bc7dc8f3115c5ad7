/**
 * `launcher`: the "Notebook Server" launcher card and the command-palette commands
 * that open the panel, start the create form and refresh the list.
 */
import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { ILauncher } from '@jupyterlab/launcher';

import { serverIcon } from '../icons';
import { CommandIDs, INotebookServers } from '../tokens';
import { addToCatalog } from './catalog';

export const launcherPlugin: JupyterFrontEndPlugin<void> = {
  id: 'cube-jupyter:launcher',
  description: 'Launcher card and commands for notebook servers.',
  autoStart: true,
  requires: [INotebookServers],
  optional: [ILauncher, ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    servers: INotebookServers,
    launcher: ILauncher | null,
    palette: ICommandPalette | null
  ): void => {
    app.commands.addCommand(CommandIDs.open, {
      label: 'Open Notebook Servers',
      caption: 'Show the Notebook Servers panel',
      icon: serverIcon,
      execute: () => servers.show()
    });
    app.commands.addCommand(CommandIDs.create, {
      label: args =>
        args.isLauncher ? 'Notebook Server' : 'New Notebook Server…',
      caption: 'Create a notebook server from a profile',
      icon: serverIcon,
      execute: () => servers.show({ focusCreate: true })
    });
    app.commands.addCommand(CommandIDs.refresh, {
      label: 'Refresh Notebook Servers',
      caption: 'Fetch the notebook server list again',
      execute: () => servers.refresh()
    });
    void servers.available.then(ok => {
      if (!ok) {
        return;
      }
      addToCatalog({
        palette,
        commands: Object.values(CommandIDs),
        launcher,
        card: { command: CommandIDs.create, rank: 10 }
      });
    });
  }
};
