/** The Schedules panel's icon. */
import { cubeIcon } from '../common/icons';

/** A clock face: the Schedules panel and "Schedule…". */
export const scheduleIcon = cubeIcon(
  'schedule',
  [
    'M12 2a10 10 0 1 0 0 20 10 10 0 0 0 0-20zm0 2a8 8 0 1 1 0 16 8 8 0 0 1 0-16zm-1 3v6l5.2 3.1 1-1.6-4.2-2.5V7z'
  ],
  'evenodd'
);
