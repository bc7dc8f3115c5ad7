/**
 * `pipeline`: the Pipeline panel in the right sidebar, following the active notebook;
 * the "Run as pipeline" button in every notebook's toolbar (which opens the panel and
 * starts a local run of that notebook); and the read-only `cube-runs:` drive the
 * executed step notebooks open from.
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette, ToolbarButton } from '@jupyterlab/apputils';
import type { DocumentRegistry } from '@jupyterlab/docregistry';
import {
  INotebookModel,
  INotebookTracker,
  NotebookPanel
} from '@jupyterlab/notebook';
import type { IDisposable } from '@lumino/disposable';

import { CubeClient, probe } from '../common/api';
import { PipelineClient } from '../pipeline/client';
import { PipelineModel } from '../pipeline/model';
import {
  isStepNotebookPath,
  StepNotebookDrive,
  StepNotebookKernel,
  stepNotebookPath
} from '../pipeline/drive';
import { PipelineGraph } from '../pipeline/graphWidget';
import { pipelineIcon } from '../pipeline/icons';
import { PipelinePanel } from '../pipeline/panel';
import type { IRun, IRunStep } from '../pipeline/types';
import { PipelineCommandIDs } from '../tokens';
import { offerIfAvailable } from './catalog';
import { MainAreaPanel } from './mainAreaPanel';

/** Whether a notebook panel shows an executed step notebook (from the `cube-runs:` drive). */
function isStepNotebook(panel: NotebookPanel): boolean {
  return isStepNotebookPath(panel.context.path);
}

/** Adds "Run as pipeline" to each notebook panel's toolbar. */
class RunAsPipelineButton implements DocumentRegistry.IWidgetExtension<
  NotebookPanel,
  INotebookModel
> {
  constructor(private readonly _run: (panel: NotebookPanel) => void) {}

  createNew(panel: NotebookPanel): IDisposable | void {
    if (isStepNotebook(panel)) {
      return; // an executed step notebook is a record, not a pipeline
    }
    const button = new ToolbarButton({
      icon: pipelineIcon,
      label: 'Run as pipeline',
      tooltip: 'Run this notebook as a pipeline of its tagged steps',
      className: 'cube-RunAsPipeline',
      onClick: () => this._run(panel)
    });
    button.node.setAttribute('data-testid', 'cube-run-as-pipeline');
    panel.toolbar.insertItem(10, 'cube-run-as-pipeline', button);
    return button;
  }
}

export const pipelinePlugin: JupyterFrontEndPlugin<void> = {
  id: 'cube-jupyter:pipeline',
  description:
    'The Pipeline panel (steps, DAG, parameters, runs) and the "Run as pipeline" notebook button.',
  autoStart: true,
  requires: [INotebookTracker],
  optional: [ILayoutRestorer, ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null
  ): void => {
    const client = new PipelineClient(
      new CubeClient(app.serviceManager.serverSettings)
    );
    const model = new PipelineModel(client);
    // Executed step notebooks open read-only from the server, through their own drive.
    const openStep = async (run: IRun, step: IRunStep): Promise<void> => {
      await app.commands.execute('docmanager:open', {
        path: stepNotebookPath(run.id, step.name),
        factory: 'Notebook'
      });
    };
    const panel = new PipelinePanel(
      model,
      openStep,
      () => void app.commands.execute(PipelineCommandIDs.openGraph)
    );
    // The graph, large, in the main area: the same model, so the same notebook and run.
    const graph = new MainAreaPanel(app, {
      id: 'cube-pipeline-graph',
      label: 'Pipeline Graph',
      caption: 'The pipeline graph of the active notebook',
      icon: pipelineIcon,
      create: () => new PipelineGraph(model, step => panel.openRunStep(step))
    });

    // At once, not when the server has answered: Lab restores step notebooks left open at reload.
    app.serviceManager.contents.addDrive(
      new StepNotebookDrive(client, app.serviceManager.serverSettings)
    );
    app.docRegistry.addWidgetExtension('Notebook', new StepNotebookKernel());

    const show = (notebook: NotebookPanel | null) => {
      if (notebook) {
        model.setNotebook(notebook);
      }
      app.shell.activateById(panel.id);
    };
    const runAsPipeline = async (notebook: NotebookPanel | null) => {
      if (!notebook) {
        return;
      }
      show(notebook);
      await model.startRun('local');
    };

    // Every server that lists `pipelines` in /info gets the panel (the workbench and the
    // user servers it starts); the first answer is the run targets and tag vocabulary.
    const available = offerIfAvailable(
      probe(client.cube, 'pipelines', () => client.config()),
      {
        parts: [panel, model],
        ready: config => {
          if (config) {
            model.setConfig(config);
          }
          // The panel follows the notebook being worked on, not step notebooks opened from it.
          const follow = (notebook: NotebookPanel | null) => {
            if (!notebook || !isStepNotebook(notebook)) {
              model.setNotebook(notebook);
            }
          };
          tracker.currentChanged.connect((_, notebook) => follow(notebook));
          follow(tracker.currentWidget);
          app.shell.add(panel, 'right', { rank: 650 });
          if (restorer) {
            restorer.add(panel, 'cube-pipeline');
          }
          app.commands.addCommand(PipelineCommandIDs.open, {
            label: 'Open Pipeline Panel',
            caption: 'Show the active notebook as a pipeline',
            icon: pipelineIcon,
            execute: () => show(null)
          });
          app.commands.addCommand(PipelineCommandIDs.run, {
            label: 'Run Notebook as Pipeline',
            caption: 'Run the active notebook as a pipeline on this machine',
            icon: pipelineIcon,
            isEnabled: () => model.notebook !== null,
            execute: () => runAsPipeline(model.notebook)
          });
          app.docRegistry.addWidgetExtension(
            'Notebook',
            new RunAsPipelineButton(notebook => void runAsPipeline(notebook))
          );
        },
        palette,
        commands: Object.values(PipelineCommandIDs)
      }
    );
    app.commands.addCommand(PipelineCommandIDs.openGraph, {
      label: 'Open Pipeline Graph',
      caption:
        'Show the active notebook’s pipeline graph large: pan, zoom, follow a run',
      icon: pipelineIcon,
      execute: async () => {
        if (await available) {
          graph.show();
        }
      }
    });
    graph.restore(restorer, PipelineCommandIDs.openGraph);
  }
};
