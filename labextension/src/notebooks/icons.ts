/** The Notebook Servers panel's icon. */
import { cubeIcon } from '../common/icons';

/** A two-unit server rack: the Notebook Servers panel and launcher card. */
export const serverIcon = cubeIcon(
  'server',
  [
    'M4 3h16a1 1 0 0 1 1 1v6a1 1 0 0 1-1 1H4a1 1 0 0 1-1-1V4a1 1 0 0 1 1-1zm3 3a1 1 0 1 0 0 2 1 1 0 0 0 0-2zm4 0v2h6V6z',
    'M4 13h16a1 1 0 0 1 1 1v6a1 1 0 0 1-1 1H4a1 1 0 0 1-1-1v-6a1 1 0 0 1 1-1zm3 3a1 1 0 1 0 0 2 1 1 0 0 0 0-2zm4 0v2h6v-2z'
  ],
  'evenodd'
);
