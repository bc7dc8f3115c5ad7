/** The Jobs panel's icon, themed through JupyterLab's `jp-icon*` classes. */
import { LabIcon } from '@jupyterlab/ui-components';

const JOBS_SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path d="M4 4h7v7H4zm9 0h7v7h-7zM4 13h7v7H4z"/>
    <path d="M16.5 12.5l1.2 2.4 2.6.4-1.9 1.8.5 2.6-2.4-1.3-2.4 1.3.5-2.6-1.9-1.8 2.6-.4z"/>
  </g>
</svg>`;

/** Three replica boxes and a star: training, tuning and serving jobs. */
export const jobsIcon = new LabIcon({
  name: 'cube-jupyter:jobs',
  svgstr: JOBS_SVG
});
