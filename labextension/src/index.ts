/**
 * cube-jupyter's JupyterLab plugins: one plugin per feature.
 */
import type { JupyterFrontEndPlugin } from '@jupyterlab/application';

import { gpuPlugin } from './plugins/gpu';
import { jobsPlugin } from './plugins/jobs';
import { notebookServersPlugin } from './plugins/notebooks';
import { pipelinePlugin } from './plugins/pipeline';

export { CubeApiError, CubeClient } from './common/api';
export {
  CommandIDs,
  GpuCommandIDs,
  IJobsPanel,
  INotebookServers,
  JobsCommandIDs,
  PipelineCommandIDs
} from './tokens';
export type { IShowOptions } from './tokens';
export type {
  IProfile,
  IServer,
  IServerList,
  ServerStatus
} from './notebooks/types';

const plugins: JupyterFrontEndPlugin<unknown>[] = [
  notebookServersPlugin,
  pipelinePlugin,
  gpuPlugin,
  jobsPlugin
];

export default plugins;
