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

import { CubeClient, probe, serverInfo } from '../common/api';
import { NotebooksClient } from '../notebooks/client';
import { serverIcon } from '../notebooks/icons';
import { NotebookServersModel } from '../notebooks/model';
import { NotebookServersPanel } from '../notebooks/panel';
import { CommandIDs, INotebookServers, IShowOptions } from '../tokens';
import { addToCatalog, offerIfAvailable } from './catalog';

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
    // Only the central workbench lists `notebooks` in /info (a user server it started does
    // not spawn servers); the first answer is the profiles the create form offers.
    const available = offerIfAvailable(
      probe(client.cube, 'notebooks', () => client.listProfiles()),
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
        commands: [CommandIDs.open, CommandIDs.create, CommandIDs.refresh],
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
    // In a user server the workbench's Notebook Servers panel is one click away.
    void serverInfo(client.cube).then(info => {
      const url = info?.role === 'user' ? info.workbench_url : null;
      if (!url) {
        return;
      }
      app.commands.addCommand(CommandIDs.workbench, {
        label: args => (args.isLauncher ? 'Workbench' : 'Open the Workbench'),
        caption:
          'Open the workbench that started this server (its Notebook Servers panel) in a new tab',
        icon: serverIcon,
        execute: () => void window.open(url, '_blank', 'noopener')
      });
      addToCatalog({
        palette,
        commands: [CommandIDs.workbench],
        launcher,
        card: { command: CommandIDs.workbench, rank: 10 }
      });
    });
    app.commands.addCommand(CommandIDs.refresh, {
      label: 'Refresh Notebook Servers',
      caption: 'Fetch the notebook server list again',
      execute: () => servers.refresh()
    });

    return servers;
  }
};
