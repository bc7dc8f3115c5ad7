/**
 * cube-jupyter's JupyterLab plugins: one plugin per feature.
 */
import type { JupyterFrontEndPlugin } from '@jupyterlab/application';

import { gpuPlugin } from './plugins/gpu';
import { jobsPlugin } from './plugins/jobs';
import { launcherPlugin } from './plugins/launcher';
import { notebookServersPlugin } from './plugins/notebookServers';
import { pipelinePlugin } from './plugins/pipeline';

export { CubeApiError, CubeClient } from './api';
export {
  CommandIDs,
  GpuCommandIDs,
  IJobsPanel,
  INotebookServers,
  JobsCommandIDs,
  PipelineCommandIDs
} from './tokens';
export type { IShowOptions } from './tokens';
export type { IProfile, IServer, IServerList, ServerStatus } from './types';

const plugins: JupyterFrontEndPlugin<unknown>[] = [
  notebookServersPlugin,
  launcherPlugin,
  pipelinePlugin,
  gpuPlugin,
  jobsPlugin
];

export default plugins;
