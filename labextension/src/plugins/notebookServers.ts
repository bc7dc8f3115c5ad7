/**
 * `notebook-servers`: adds the Notebook Servers panel to the left sidebar and offers
 * it to other plugins through the `INotebookServers` token.
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';

import { CubeClient } from '../api';
import { NotebookServersModel } from '../model';
import { NotebookServersPanel } from '../panel';
import { INotebookServers, IShowOptions } from '../tokens';

export const notebookServersPlugin: JupyterFrontEndPlugin<INotebookServers> = {
  id: 'cube-jupyter:notebook-servers',
  description:
    'A sidebar panel to create, connect to, stop and delete notebook servers.',
  autoStart: true,
  provides: INotebookServers,
  optional: [ILayoutRestorer],
  activate: (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null
  ): INotebookServers => {
    const client = new CubeClient(app.serviceManager.serverSettings);
    const model = new NotebookServersModel(client);
    const panel = new NotebookServersPanel(model);
    const available = client.isAvailable();
    void available.then(ok => {
      if (!ok) {
        panel.dispose();
        model.dispose();
        return;
      }
      app.shell.add(panel, 'left', { rank: 250 });
      if (restorer) {
        restorer.add(panel, 'cube-notebook-servers');
      }
    });
    return {
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
  }
};
