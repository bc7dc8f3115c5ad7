/** The workbench's icons: 24×24 drawings themed through JupyterLab's `jp-icon*` classes. */
import { LabIcon } from '@jupyterlab/ui-components';

/**
 * An icon named `cube-jupyter:{name}` from its path data, filled with the theme's icon
 * colour (`evenodd`: holes in a shape stay open).
 */
export function cubeIcon(
  name: string,
  paths: readonly string[],
  fillRule: 'nonzero' | 'evenodd' = 'nonzero'
): LabIcon {
  const shapes = paths.map(d => `<path d="${d}"/>`).join('');
  const rule = fillRule === 'evenodd' ? ' fill-rule="evenodd"' : '';
  return new LabIcon({
    name: `cube-jupyter:${name}`,
    svgstr:
      '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">' +
      `<g class="jp-icon3" fill="#616161"${rule}>${shapes}</g></svg>`
  });
}
