/** The GPU panel's icon. */
import { cubeIcon } from '../common/icons';

/** A graphics card: the GPU panel, its launcher card and status-bar item. */
export const gpuIcon = cubeIcon('gpu', [
  'M2 6h18a2 2 0 0 1 2 2v8a2 2 0 0 1-2 2h-2v2h-2v-2H8v2H6v-2H4v2H2zm5 3a3 3 0 1 0 0 6 3 3 0 0 0 0-6zm7 0v6h2V9zm3 0v6h2V9z'
]);
