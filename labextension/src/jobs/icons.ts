/** The Jobs panel's icon. */
import { cubeIcon } from '../common/icons';

/** Three replica boxes and a star: training, tuning and serving jobs. */
export const jobsIcon = cubeIcon('jobs', [
  'M4 4h7v7H4zm9 0h7v7h-7zM4 13h7v7H4z',
  'M16.5 12.5l1.2 2.4 2.6.4-1.9 1.8.5 2.6-2.4-1.3-2.4 1.3.5-2.6-1.9-1.8 2.6-.4z'
]);
