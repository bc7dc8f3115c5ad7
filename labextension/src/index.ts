/**
 * cube-jupyter's JupyterLab plugins: one plugin per feature.
 */
import type { JupyterFrontEndPlugin } from '@jupyterlab/application';

import { gpuPlugin } from './plugins/gpu';
import { jobsPlugin } from './plugins/jobs';
import { notebookServersPlugin } from './plugins/notebooks';
import { pipelinePlugin } from './plugins/pipeline';
import { schedulesPlugin } from './schedules/plugin';

export { CubeApiError, CubeClient } from './common/api';
export { ScheduleCommandIDs } from './schedules/commands';
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
  jobsPlugin,
  schedulesPlugin
];

export default plugins;
