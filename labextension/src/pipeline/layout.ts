/**
 * The drawing of a pipeline's DAG: presentation only (the server decides the steps and
 * edges). dagre, a layered layout built for this, places the steps and the variable
 * labels of the edges — each label is a node of the layout in its own right, so no
 * label lands on a step or on another label. This module sizes the boxes for the text
 * they show, has the edges routed between them (routing.ts), and picks the direction
 * (top to bottom, or left to right) that shows a graph largest in a given frame.
 */
import { graphlib, layout as dagreLayout } from '@dagrejs/dagre';

import { Direction, drawRoute, IBox, IPoint, routeEdges } from './routing';

export type { Direction, IBox, IPoint } from './routing';

export interface ILayoutNode extends IBox {
  name: string;
  /** The name as shown: clipped with an ellipsis when too long for the widest box. */
  text: string;
}

/** The variables an edge carries, as the lines of text shown on it. */
export interface ILayoutLabel extends IBox {
  lines: string[];
}

export interface ILayoutEdge {
  upstream: string;
  downstream: string;
  variables: string[];
  /** The route: from the upstream step's border to the downstream step's border. */
  points: IPoint[];
  /** SVG path data of the line (rounded corners), which stops where the arrowhead starts. */
  path: string;
  /** The arrowhead's polygon points; its tip is the route's last point. */
  arrow: string;
  /** Null for an edge that only orders two steps (no variables flow). */
  label: ILayoutLabel | null;
}

export interface ILayout {
  direction: Direction;
  /** Of the text in the boxes (labels may have several lines). */
  lineHeight: number;
  nodes: ILayoutNode[];
  edges: ILayoutEdge[];
  width: number;
  height: number;
}

export interface ILayoutInput {
  steps: readonly { name: string }[];
  edges: readonly {
    upstream: string;
    downstream: string;
    variables: readonly string[];
  }[];
}

/** The size of the (monospace) text the drawing shows, in drawing units. */
export interface ITextMetrics {
  charWidth: number;
  lineHeight: number;
}

/** JupyterLab's code font at its default 13px. */
export const DEFAULT_METRICS: ITextMetrics = { charWidth: 7.8, lineHeight: 17 };

const NODE_PAD_X = 12;
const NODE_PAD_Y = 8;
const NODE_MIN_CHARS = 6;
const NODE_MAX_CHARS = 24;
const LABEL_PAD_X = 5;
const LABEL_PAD_Y = 2;
const LABEL_LINE_CHARS = 24;
const LABEL_MAX_LINES = 3;
const NODE_SEP = 28;
const EDGE_SEP = 14;
/** Between a step's rank and its labels' rank is half of this (dagre halves it). */
const RANK_SEP = 48;
const MARGIN = 8;

function clip(text: string, chars: number): string {
  return text.length > chars ? `${text.slice(0, chars - 1)}…` : text;
}

/**
 * The lines of an edge's label: variables joined by commas, wrapped between them, at
 * most a few lines (the last says how many more there are).
 */
export function labelLines(variables: readonly string[]): string[] {
  const lines: string[] = [];
  let line = '';
  for (const variable of variables.map(v => clip(v, LABEL_LINE_CHARS))) {
    const joined = line ? `${line}, ${variable}` : variable;
    if (line && joined.length > LABEL_LINE_CHARS) {
      lines.push(`${line},`);
      line = variable;
    } else {
      line = joined;
    }
  }
  if (line) {
    lines.push(line);
  }
  if (lines.length <= LABEL_MAX_LINES) {
    return lines;
  }
  const shown = lines.slice(0, LABEL_MAX_LINES - 1);
  const count = shown.reduce((n, l) => n + l.split(', ').length, 0);
  return [...shown, `+${variables.length - count} more`];
}

/** Lay out `input` in one direction. */
export function layoutDag(
  input: ILayoutInput,
  direction: Direction = 'TB',
  metrics: ITextMetrics = DEFAULT_METRICS
): ILayout {
  const known = new Set(input.steps.map(s => s.name));
  const edges = input.edges.filter(
    e =>
      known.has(e.upstream) &&
      known.has(e.downstream) &&
      e.upstream !== e.downstream
  );
  const graph = new graphlib.Graph({ multigraph: true });
  graph.setGraph({
    rankdir: direction,
    nodesep: NODE_SEP,
    edgesep: EDGE_SEP,
    ranksep: RANK_SEP
  });
  const nodeHeight = metrics.lineHeight + 2 * NODE_PAD_Y;
  for (const { name } of input.steps) {
    const chars = Math.min(
      NODE_MAX_CHARS,
      Math.max(NODE_MIN_CHARS, name.length)
    );
    graph.setNode(name, {
      width: chars * metrics.charWidth + 2 * NODE_PAD_X,
      height: nodeHeight
    });
  }
  const lines = edges.map(e => labelLines(e.variables));
  // dagre orders a step's downstream steps the reverse of how their edges were added:
  // adding the last edge first keeps siblings in notebook order, left to right.
  [...edges.keys()].reverse().forEach(i => {
    const edge = edges[i];
    const text = lines[i];
    const chars = Math.max(0, ...text.map(l => l.length));
    graph.setEdge(
      edge.upstream,
      edge.downstream,
      {
        labelpos: 'c',
        width: text.length ? chars * metrics.charWidth + 2 * LABEL_PAD_X : 0,
        height: text.length
          ? text.length * metrics.lineHeight + 2 * LABEL_PAD_Y
          : 0
      },
      String(i)
    );
  });
  dagreLayout(graph);

  const nodes = input.steps.map(({ name }): ILayoutNode => {
    const { x, y, width, height } = graph.node(name);
    return {
      name,
      text: clip(name, NODE_MAX_CHARS),
      x: x! - width / 2,
      y: y! - height / 2,
      width,
      height
    };
  });
  const placed = edges.map((edge, i) =>
    graph.edge(edge.upstream, edge.downstream, String(i))
  );
  const labels = placed.map((routed, i): ILayoutLabel | null =>
    lines[i].length
      ? {
          lines: lines[i],
          x: routed.x! - routed.width! / 2,
          y: routed.y! - routed.height! / 2,
          width: routed.width!,
          height: routed.height!
        }
      : null
  );
  // dagre's first and last points are where a straight line to the step's centre
  // leaves it; the rest are the waypoints the routes go through.
  const routes = routeEdges(
    direction,
    new Map(nodes.map(n => [n.name, n])),
    labels.filter((l): l is ILayoutLabel => l !== null),
    edges.map((edge, i) => ({
      upstream: edge.upstream,
      downstream: edge.downstream,
      waypoints: placed[i].points!.slice(1, -1)
    }))
  );
  // Trim the drawing to what is drawn (dagre's extent may be wider), with a margin.
  const drawnBoxes = [...nodes, ...labels.filter(l => l !== null)];
  const points = routes.flat();
  const xs = [
    ...drawnBoxes.flatMap(b => [b.x, b.x + b.width]),
    ...points.map(p => p.x)
  ];
  const ys = [
    ...drawnBoxes.flatMap(b => [b.y, b.y + b.height]),
    ...points.map(p => p.y)
  ];
  const dx = nodes.length ? MARGIN - Math.min(...xs) : 0;
  const dy = nodes.length ? MARGIN - Math.min(...ys) : 0;
  const shift = <T extends IPoint>(p: T): T => ({
    ...p,
    x: p.x + dx,
    y: p.y + dy
  });
  return {
    direction,
    lineHeight: metrics.lineHeight,
    nodes: nodes.map(shift),
    edges: edges.map((edge, i): ILayoutEdge => {
      const route = routes[i].map(shift);
      const label = labels[i];
      return {
        upstream: edge.upstream,
        downstream: edge.downstream,
        variables: [...edge.variables],
        points: route,
        ...drawRoute(route),
        label: label && shift(label)
      };
    }),
    width: nodes.length ? Math.max(...xs) + dx + MARGIN : 2 * MARGIN,
    height: nodes.length ? Math.max(...ys) + dy + MARGIN : 2 * MARGIN
  };
}

/**
 * Lay out `input` both ways and keep the one that shows largest when fitted into
 * `frame` (a wide fan of steps reads better left to right, a chain top to bottom).
 */
export function layoutToFit(
  input: ILayoutInput,
  frame: { width: number; height: number },
  metrics: ITextMetrics = DEFAULT_METRICS
): ILayout {
  const down = layoutDag(input, 'TB', metrics);
  const across = layoutDag(input, 'LR', metrics);
  return fitScale(across, frame) > fitScale(down, frame) ? across : down;
}

/** The scale at which `layout` just fits into `frame`. */
export function fitScale(
  layout: { width: number; height: number },
  frame: { width: number; height: number }
): number {
  return Math.min(frame.width / layout.width, frame.height / layout.height);
}
