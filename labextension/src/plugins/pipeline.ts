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
import {
  ICommandPalette,
  ToolbarButton,
  WidgetTracker
} from '@jupyterlab/apputils';
import type { DocumentRegistry } from '@jupyterlab/docregistry';
import {
  INotebookModel,
  INotebookTracker,
  INotebookWidgetFactory,
  NotebookPanel,
  NotebookWidgetFactory
} from '@jupyterlab/notebook';
import { DisposableSet, type IDisposable } from '@lumino/disposable';

import { CubeClient, probe } from '../common/api';
import { PipelineClient } from '../pipeline/client';
import { PipelineModel } from '../pipeline/model';
import {
  isStepNotebookPath,
  STEP_NOTEBOOK_FACTORY,
  StepNotebookDrive,
  StepNotebookKernel,
  stepNotebookPath
} from '../pipeline/drive';
import { PipelineGraph } from '../pipeline/graphWidget';
import { pipelineIcon } from '../pipeline/icons';
import { PipelinePanel } from '../pipeline/panel';
import type { IRun, IRunStep } from '../pipeline/types';
import { ScheduleCommandIDs } from '../schedules/commands';
import { scheduleIcon } from '../schedules/icons';
import { IGpuUsage, PipelineCommandIDs } from '../tokens';
import { offerIfAvailable } from './catalog';
import { MainAreaPanel } from './mainAreaPanel';

/**
 * Register the kernel-less view of executed step notebooks, built like Lab's notebook
 * view (same renderers, editor and notebook settings) and restored with the layout; its
 * name, or Lab's `Notebook` where the notebook view is not there to copy.
 */
function addStepNotebookFactory(
  app: JupyterFrontEnd,
  base: NotebookWidgetFactory.IFactory | null,
  restorer: ILayoutRestorer | null
): string {
  if (!(base instanceof NotebookWidgetFactory)) {
    return 'Notebook';
  }
  const factory = new NotebookWidgetFactory({
    name: STEP_NOTEBOOK_FACTORY,
    label: 'Executed Step Notebook',
    fileTypes: ['notebook'],
    modelName: 'notebook',
    preferKernel: false,
    canStartKernel: false,
    shutdownOnClose: false,
    rendermime: base.rendermime,
    contentFactory: base.contentFactory,
    mimeTypeService: base.mimeTypeService,
    editorConfig: base.editorConfig,
    notebookConfig: base.notebookConfig
  });
  app.docRegistry.addWidgetFactory(factory);
  const opened = new WidgetTracker<NotebookPanel>({
    namespace: 'cube-step-notebook'
  });
  factory.widgetCreated.connect((_, panel) => {
    panel.context.pathChanged.connect(() => void opened.save(panel));
    void opened.add(panel);
  });
  void restorer?.restore(opened, {
    command: 'docmanager:open',
    args: panel => ({
      path: panel.context.path,
      factory: STEP_NOTEBOOK_FACTORY
    }),
    name: panel => panel.context.path
  });
  return STEP_NOTEBOOK_FACTORY;
}

/** Whether a notebook panel shows an executed step notebook (from the `cube-runs:` drive). */
function isStepNotebook(panel: NotebookPanel): boolean {
  return isStepNotebookPath(panel.context.path);
}

/**
 * Adds "Run as pipeline" to each notebook panel's toolbar, and "Schedule…" after it where
 * the server offers schedules (`schedule` says how, when it does).
 */
class RunAsPipelineButton implements DocumentRegistry.IWidgetExtension<
  NotebookPanel,
  INotebookModel
> {
  constructor(
    private readonly _run: (panel: NotebookPanel) => void,
    private readonly _schedule: () => ((panel: NotebookPanel) => void) | null
  ) {}

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
    const schedule = this._schedule();
    if (!schedule) {
      return button;
    }
    const scheduleButton = new ToolbarButton({
      icon: scheduleIcon,
      label: 'Schedule…',
      tooltip: 'Run this notebook as a pipeline on a schedule',
      className: 'cube-ScheduleNotebook',
      onClick: () => schedule(panel)
    });
    scheduleButton.node.setAttribute('data-testid', 'cube-schedule-notebook');
    panel.toolbar.insertAfter(
      'cube-run-as-pipeline',
      'cube-schedule-notebook',
      scheduleButton
    );
    return DisposableSet.from([button, scheduleButton]);
  }
}

export const pipelinePlugin: JupyterFrontEndPlugin<void> = {
  id: 'cube-jupyter:pipeline',
  description:
    'The Pipeline panel (steps, DAG, parameters, runs) and the "Run as pipeline" notebook button.',
  autoStart: true,
  requires: [INotebookTracker],
  optional: [
    ILayoutRestorer,
    ICommandPalette,
    IGpuUsage,
    INotebookWidgetFactory
  ],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null,
    gpuUsage: IGpuUsage | null,
    notebookFactory: NotebookWidgetFactory.IFactory | null
  ): void => {
    const client = new PipelineClient(
      new CubeClient(app.serviceManager.serverSettings)
    );
    const model = new PipelineModel(client);
    // Executed step notebooks open read-only from the server, through their own drive.
    const stepFactory = addStepNotebookFactory(app, notebookFactory, restorer);
    const openStep = async (run: IRun, step: IRunStep): Promise<void> => {
      await app.commands.execute('docmanager:open', {
        path: stepNotebookPath(run.id, step.name),
        factory: stepFactory
      });
    };
    const panel = new PipelinePanel(
      model,
      openStep,
      () => void app.commands.execute(PipelineCommandIDs.openGraph),
      gpuUsage
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

    // A run opened from elsewhere (a schedule's): its notebook becomes the panel's, then
    // the run is selected as a pick from the history would.
    const openRun = async (path: string, id: string): Promise<void> => {
      const widget = await app.commands.execute('docmanager:open', {
        path,
        factory: 'Notebook'
      });
      if (widget instanceof NotebookPanel) {
        model.setNotebook(widget);
      }
      show(null);
      await model.refreshHistory();
      model.selectRun(id);
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
          // Schedules are the central workbench's (their own plugin): "Schedule…" is
          // offered here once its command is there.
          const schedule = (path: string | null) =>
            void app.commands.execute(ScheduleCommandIDs.create, { path });
          const offerSchedule = () => {
            panel.scheduleAction = app.commands.hasCommand(
              ScheduleCommandIDs.create
            )
              ? () => schedule(model.path)
              : null;
          };
          app.commands.commandChanged.connect(offerSchedule);
          offerSchedule();
          app.docRegistry.addWidgetExtension(
            'Notebook',
            new RunAsPipelineButton(
              notebook => void runAsPipeline(notebook),
              () =>
                app.commands.hasCommand(ScheduleCommandIDs.create)
                  ? notebook => schedule(notebook.context.path)
                  : null
            )
          );
          app.commands.addCommand(PipelineCommandIDs.openRun, {
            label: 'Open Pipeline Run',
            caption: 'Show a run in the Pipeline panel, with its notebook',
            icon: pipelineIcon,
            execute: args => openRun(args.path as string, args.run as string)
          });
        },
        palette,
        commands: [
          PipelineCommandIDs.open,
          PipelineCommandIDs.run,
          PipelineCommandIDs.openGraph
        ]
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
