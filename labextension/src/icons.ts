/** The workbench's icons, themed through JupyterLab's `jp-icon*` classes. */
import { LabIcon } from '@jupyterlab/ui-components';

const SERVER_SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161" fill-rule="evenodd">
    <path d="M4 3h16a1 1 0 0 1 1 1v6a1 1 0 0 1-1 1H4a1 1 0 0 1-1-1V4a1 1 0 0 1 1-1zm3 3a1 1 0 1 0 0 2 1 1 0 0 0 0-2zm4 0v2h6V6z"/>
    <path d="M4 13h16a1 1 0 0 1 1 1v6a1 1 0 0 1-1 1H4a1 1 0 0 1-1-1v-6a1 1 0 0 1 1-1zm3 3a1 1 0 1 0 0 2 1 1 0 0 0 0-2zm4 0v2h6v-2z"/>
  </g>
</svg>`;

/** A two-unit server rack: the Notebook Servers panel and launcher card. */
export const serverIcon = new LabIcon({
  name: 'cube-jupyter:server',
  svgstr: SERVER_SVG
});

const PIPELINE_SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path d="M9 2h6v5h-2v3.1l5 2.5V15h2v6h-6v-6h2v-1.8l-5-2.5-5 2.5V15h2v6H2v-6h2v-2.4l5-2.5V7H9z"/>
  </g>
</svg>`;

/** Three steps joined as a small DAG: the Pipeline panel and "Run as pipeline". */
export const pipelineIcon = new LabIcon({
  name: 'cube-jupyter:pipeline',
  svgstr: PIPELINE_SVG
});
