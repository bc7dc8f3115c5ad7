/**
 * `notebook-servers`: the Notebook Servers panel in the left sidebar, the commands that
 * open it, start the create form and refresh the list (command palette, "Notebook
 * Server" launcher card), and the `INotebookServers` token for other plugins.
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { ILauncher } from '@jupyterlab/launcher';

import { CubeClient, probe } from '../common/api';
import { NotebooksClient } from '../notebooks/client';
import { serverIcon } from '../notebooks/icons';
import { NotebookServersModel } from '../notebooks/model';
import { NotebookServersPanel } from '../notebooks/panel';
import { CommandIDs, INotebookServers, IShowOptions } from '../tokens';
import { offerIfAvailable } from './catalog';

export const notebookServersPlugin: JupyterFrontEndPlugin<INotebookServers> = {
  id: 'cube-jupyter:notebook-servers',
  description:
    'A sidebar panel, commands and a launcher card to create, connect to, stop and delete notebook servers.',
  autoStart: true,
  provides: INotebookServers,
  optional: [ILayoutRestorer, ILauncher, ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null,
    launcher: ILauncher | null,
    palette: ICommandPalette | null
  ): INotebookServers => {
    const client = new NotebooksClient(
      new CubeClient(app.serviceManager.serverSettings)
    );
    const model = new NotebookServersModel(client);
    const panel = new NotebookServersPanel(model);
    // Only a server with the workbench's API gets the panel (not a spawned child); its
    // answer is the profiles the create form offers.
    const available = offerIfAvailable(
      probe(() => client.listProfiles()),
      {
        parts: [panel, model],
        ready: list => {
          if (list) {
            model.setProfiles(list.profiles);
          }
          app.shell.add(panel, 'left', { rank: 250 });
          if (restorer) {
            restorer.add(panel, 'cube-notebook-servers');
          }
        },
        palette,
        commands: Object.values(CommandIDs),
        launcher,
        card: { command: CommandIDs.create, rank: 10 }
      }
    );

    const servers: INotebookServers = {
      available,
      show: (options: IShowOptions = {}) => {
        if (panel.isDisposed) {
          return;
        }
        app.shell.activateById(panel.id);
        if (options.focusCreate) {
          panel.focusCreateForm();
        }
      },
      refresh: async () => {
        if (!model.isDisposed) {
          await Promise.all([model.refresh(), model.loadProfiles()]);
        }
      }
    };

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

    return servers;
  }
};
