/** The GPU panel's icon, themed through JupyterLab's `jp-icon*` classes. */
import { LabIcon } from '@jupyterlab/ui-components';

const GPU_SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path d="M2 6h18a2 2 0 0 1 2 2v8a2 2 0 0 1-2 2h-2v2h-2v-2H8v2H6v-2H4v2H2zm5 3a3 3 0 1 0 0 6 3 3 0 0 0 0-6zm7 0v6h2V9zm3 0v6h2V9z"/>
  </g>
</svg>`;

/** A graphics card: the GPU panel, its launcher card and status-bar item. */
export const gpuIcon = new LabIcon({
  name: 'cube-jupyter:gpu',
  svgstr: GPU_SVG
});
