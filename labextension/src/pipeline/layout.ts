/**
 * A layered drawing of the pipeline's DAG: presentation only. The server decides the
 * steps and edges; this places them, top to bottom, for an SVG.
 *
 * Each step goes one layer below its lowest upstream step; within a layer, steps keep
 * notebook order and are then pulled under their upstream steps (barycenter sweeps),
 * which keeps the crossings of small pipelines few.
 */

export interface ILayoutNode {
  name: string;
  x: number;
  y: number;
  width: number;
  height: number;
  layer: number;
}

export interface ILayoutEdge {
  upstream: string;
  downstream: string;
  variables: string[];
  /** SVG path data of the edge, from the bottom of upstream to the top of downstream. */
  path: string;
  /** Where the variable label sits (its centre). */
  labelX: number;
  labelY: number;
}

export interface ILayout {
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

export const NODE_HEIGHT = 28;
const LAYER_GAP = 56;
const NODE_GAP = 20;
const MARGIN = 12;
const CHAR_WIDTH = 7;
const MIN_WIDTH = 72;
const MAX_WIDTH = 168;

/** The width of a node that shows `name` (monospace estimate; clipped by the view). */
export function nodeWidth(name: string): number {
  return Math.min(
    MAX_WIDTH,
    Math.max(MIN_WIDTH, name.length * CHAR_WIDTH + 24)
  );
}

/** Lay out `input` as layers, top to bottom. */
export function layoutDag(input: ILayoutInput): ILayout {
  const names = input.steps.map(s => s.name);
  const known = new Set(names);
  const edges = input.edges.filter(
    e => known.has(e.upstream) && known.has(e.downstream)
  );
  const layerOf = assignLayers(names, edges);
  const layers = orderLayers(names, edges, layerOf);

  const rowWidths = layers.map(
    row =>
      row.reduce((sum, name) => sum + nodeWidth(name), 0) +
      NODE_GAP * Math.max(0, row.length - 1)
  );
  const width = Math.max(MIN_WIDTH, ...rowWidths) + 2 * MARGIN;
  const nodes = new Map<string, ILayoutNode>();
  layers.forEach((row, layer) => {
    let x = (width - rowWidths[layer]) / 2;
    for (const name of row) {
      const w = nodeWidth(name);
      nodes.set(name, {
        name,
        x,
        y: MARGIN + layer * (NODE_HEIGHT + LAYER_GAP),
        width: w,
        height: NODE_HEIGHT,
        layer
      });
      x += w + NODE_GAP;
    }
  });
  const height =
    layers.length === 0
      ? 2 * MARGIN
      : 2 * MARGIN +
        layers.length * NODE_HEIGHT +
        (layers.length - 1) * LAYER_GAP;

  const fractions = labelFractions(edges, layerOf, nodes);
  const drawn = edges.map((edge, i) => {
    const from = nodes.get(edge.upstream)!;
    const to = nodes.get(edge.downstream)!;
    const x1 = from.x + from.width / 2;
    const y1 = from.y + from.height;
    const x2 = to.x + to.width / 2;
    const y2 = to.y;
    const bend = Math.max(24, (y2 - y1) / 2);
    const curve: Curve = [x1, y1, x1, y1 + bend, x2, y2 - bend, x2, y2];
    // Labels sit in the gap below the upstream step, where no other step is drawn.
    const labelY = y1 + Math.min(LAYER_GAP, y2 - y1) * fractions[i];
    return {
      upstream: edge.upstream,
      downstream: edge.downstream,
      variables: [...edge.variables],
      path: `M ${x1} ${y1} C ${x1} ${y1 + bend}, ${x2} ${y2 - bend}, ${x2} ${y2}`,
      labelX: xAtY(curve, labelY),
      labelY
    };
  });
  return { nodes: [...nodes.values()], edges: drawn, width, height };
}

/** Longest-path layering: a step sits one layer below its lowest upstream step. */
function assignLayers(
  names: readonly string[],
  edges: readonly { upstream: string; downstream: string }[]
): Map<string, number> {
  const upstream = new Map<string, string[]>(names.map(n => [n, []]));
  for (const edge of edges) {
    upstream.get(edge.downstream)!.push(edge.upstream);
  }
  const layer = new Map<string, number>();
  const visiting = new Set<string>();
  const visit = (name: string): number => {
    const done = layer.get(name);
    if (done !== undefined) {
      return done;
    }
    if (visiting.has(name)) {
      return 0; // The server rejects cycles; never loop on one here.
    }
    visiting.add(name);
    const ups = upstream.get(name) ?? [];
    const value = ups.length ? Math.max(...ups.map(visit)) + 1 : 0;
    visiting.delete(name);
    layer.set(name, value);
    return value;
  };
  names.forEach(visit);
  return layer;
}

/** Rows of names per layer: notebook order, then two barycenter sweeps downwards. */
function orderLayers(
  names: readonly string[],
  edges: readonly { upstream: string; downstream: string }[],
  layerOf: Map<string, number>
): string[][] {
  const rows: string[][] = [];
  for (const name of names) {
    const layer = layerOf.get(name) ?? 0;
    while (rows.length <= layer) {
      rows.push([]);
    }
    rows[layer].push(name);
  }
  const upstream = new Map<string, string[]>(names.map(n => [n, []]));
  for (const edge of edges) {
    upstream.get(edge.downstream)!.push(edge.upstream);
  }
  for (let sweep = 0; sweep < 2; sweep++) {
    for (let layer = 1; layer < rows.length; layer++) {
      const position = new Map<string, number>();
      rows.forEach(row => row.forEach((n, i) => position.set(n, i)));
      const centre = (name: string, fallback: number): number => {
        const ups = upstream.get(name)!.filter(u => layerOf.get(u)! < layer);
        if (!ups.length) {
          return fallback;
        }
        return ups.reduce((s, u) => s + position.get(u)!, 0) / ups.length;
      };
      rows[layer] = rows[layer]
        .map((name, i) => ({ name, key: centre(name, i), i }))
        .sort((a, b) => a.key - b.key || a.i - b.i)
        .map(entry => entry.name);
    }
  }
  return rows;
}

/** A cubic Bézier's x1, y1, c1x, c1y, c2x, c2y, x2, y2. */
type Curve = [number, number, number, number, number, number, number, number];

function bezier(p0: number, p1: number, p2: number, p3: number, t: number) {
  const u = 1 - t;
  return (
    u * u * u * p0 + 3 * u * u * t * p1 + 3 * u * t * t * p2 + t * t * t * p3
  );
}

/** The x where the (downward, monotone) edge curve reaches height `y`. */
function xAtY(c: Curve, y: number): number {
  let lo = 0;
  let hi = 1;
  for (let i = 0; i < 30; i++) {
    const mid = (lo + hi) / 2;
    if (bezier(c[1], c[3], c[5], c[7], mid) < y) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return bezier(c[0], c[2], c[4], c[6], (lo + hi) / 2);
}

/**
 * How far down the gap below its upstream step each edge's label sits (0..1). Edges into
 * the same step from the layer just above are staggered, so the labels of a fan-in do not
 * overprint each other; edges that skip layers label just below their upstream step.
 */
function labelFractions(
  edges: readonly { upstream: string; downstream: string }[],
  layerOf: Map<string, number>,
  nodes: Map<string, ILayoutNode>
): number[] {
  const fractions = edges.map(() => 0.5);
  const groups = new Map<string, number[]>();
  edges.forEach((edge, i) => {
    const span = layerOf.get(edge.downstream)! - layerOf.get(edge.upstream)!;
    if (span > 1) {
      fractions[i] = 0.25;
      return;
    }
    const group = groups.get(edge.downstream) ?? [];
    group.push(i);
    groups.set(edge.downstream, group);
  });
  for (const group of groups.values()) {
    if (group.length < 2) {
      continue;
    }
    group.sort(
      (a, b) =>
        nodes.get(edges[a].upstream)!.x - nodes.get(edges[b].upstream)!.x
    );
    group.forEach((edgeIndex, k) => {
      fractions[edgeIndex] = 0.3 + (0.4 * k) / (group.length - 1);
    });
  }
  return fractions;
}
