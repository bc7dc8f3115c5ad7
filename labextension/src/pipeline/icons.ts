/** The Pipeline panel's icon. */
import { cubeIcon } from '../common/icons';

/** Three steps joined as a small DAG: the Pipeline panel and "Run as pipeline". */
export const pipelineIcon = cubeIcon('pipeline', [
  'M9 2h6v5h-2v3.1l5 2.5V15h2v6h-6v-6h2v-1.8l-5-2.5-5 2.5V15h2v6H2v-6h2v-2.4l5-2.5V7H9z'
]);

/** A warning triangle: a cell the graph's warnings are about. */
export const warningIcon = cubeIcon('pipeline-warning', [
  'M1 21h22L12 2 1 21zm12-3h-2v-2h2v2zm0-4h-2v-4h2v4z'
]);
