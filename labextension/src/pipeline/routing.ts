/**
 * Orthogonal routes for the DAG's edges through the places the layout gave them.
 *
 * An edge leaves its step through a port on the face toward where it goes (ports spread
 * along the face), turns only in the empty gaps between ranks, and passes straight
 * through its waypoints (its label's centre, or where it crosses a rank). Runs across one
 * gap get their own track unless they leave or enter the same step, so two edges share a
 * stretch of line only where they fork from, or join into, one step. No line crosses a
 * box: the boxes of a rank lie in its band, and dagre keeps waypoints clear of them.
 */

export interface IPoint {
  x: number;
  y: number;
}

/** An axis-aligned box by its top-left corner. */
export interface IBox {
  x: number;
  y: number;
  width: number;
  height: number;
}

/** Top to bottom, or left to right. */
export type Direction = 'TB' | 'LR';

/** An edge between two steps, with the waypoints the layout put it through. */
export interface IEdgeWaypoints {
  upstream: string;
  downstream: string;
  waypoints: readonly IPoint[];
}

const ARROW_LENGTH = 9;
const ARROW_HALF_WIDTH = 4.5;
const CORNER_RADIUS = 6;
/** Keep runs this far from a gap's edges (and an arrowhead's length from its far one). */
const TRACK_MARGIN = 4;
/** Ports closer than this on one face are spread evenly, or share the face's middle. */
const PORT_GAP = 12;
/** Runs of two groups closer than this along a track take different tracks. */
const RUN_GAP = 6;
const PORT_INSET = 8;
const EPSILON = 0.5;

interface IAxes {
  main: 'x' | 'y';
  cross: 'x' | 'y';
  mainSize: 'width' | 'height';
  crossSize: 'width' | 'height';
}

const AXES: Record<Direction, IAxes> = {
  TB: { main: 'y', cross: 'x', mainSize: 'height', crossSize: 'width' },
  LR: { main: 'x', cross: 'y', mainSize: 'width', crossSize: 'height' }
};

/** A stretch across a gap between two ranks, at a cross position to be chosen. */
interface IRun {
  gap: [number, number];
  from: number;
  to: number;
  /** Runs of one group may share a track: they fork from or join into one step. */
  group: string;
  track?: number;
}

/** The route of each edge, from its upstream step's border to its downstream step's. */
export function routeEdges(
  direction: Direction,
  steps: ReadonlyMap<string, IBox>,
  labels: readonly IBox[],
  edges: readonly IEdgeWaypoints[]
): IPoint[][] {
  const ax = AXES[direction];
  const at = (main: number, cross: number): IPoint =>
    ax.main === 'y' ? { x: cross, y: main } : { x: main, y: cross };
  const bands = rankBands(ax, [
    ...steps.values(),
    ...labels,
    ...edges.flatMap(e => e.waypoints.map(p => ({ ...p, width: 0, height: 0 })))
  ]);
  const ports = assignPorts(ax, steps, edges);

  const legs = edges.map((edge, i) => {
    const points = [ports[i][0], ...edge.waypoints, ports[i][1]];
    return points.slice(1).map((q, k) => {
      const p = points[k];
      if (Math.abs(p[ax.cross] - q[ax.cross]) < EPSILON) {
        return { q, run: null };
      }
      const group =
        k === 0
          ? `out:${edge.upstream}`
          : k === points.length - 2
            ? `in:${edge.downstream}`
            : `edge:${i}:${k}`;
      const run: IRun = {
        gap: gapBetween(bands, p[ax.main], q[ax.main]),
        from: p[ax.cross],
        to: q[ax.cross],
        group
      };
      return { q, run };
    });
  });
  assignTracks(legs.flatMap(l => l.flatMap(leg => (leg.run ? [leg.run] : []))));

  return legs.map((edgeLegs, i) => {
    const route = [ports[i][0]];
    for (const { q, run } of edgeLegs) {
      if (run) {
        route.push(at(run.track!, run.from), at(run.track!, run.to));
      }
      route.push(q);
    }
    return simplify(route);
  });
}

/** The path of a route with rounded corners, stopping at its arrowhead (tip at the end). */
export function drawRoute(route: readonly IPoint[]): {
  path: string;
  arrow: string;
} {
  const tip = route[route.length - 1];
  const back = unit(tip, route[route.length - 2]);
  const length = Math.min(ARROW_LENGTH, distance(route[route.length - 2], tip));
  const base = { x: tip.x + back.x * length, y: tip.y + back.y * length };
  const line = [...route.slice(0, -1), base];
  const parts = [`M ${format(line[0])}`];
  for (let i = 1; i < line.length - 1; i++) {
    const [a, c, b] = [line[i - 1], line[i], line[i + 1]];
    const r = Math.min(CORNER_RADIUS, distance(a, c) / 2, distance(c, b) / 2);
    const toA = unit(c, a);
    const toB = unit(c, b);
    parts.push(
      `L ${format({ x: c.x + toA.x * r, y: c.y + toA.y * r })}`,
      `Q ${format(c)} ${format({ x: c.x + toB.x * r, y: c.y + toB.y * r })}`
    );
  }
  parts.push(`L ${format(base)}`);
  const side = { x: -back.y * ARROW_HALF_WIDTH, y: back.x * ARROW_HALF_WIDTH };
  const arrow = [
    tip,
    { x: base.x + side.x, y: base.y + side.y },
    { x: base.x - side.x, y: base.y - side.y }
  ];
  return {
    path: parts.join(' '),
    arrow: arrow.map(p => format(p).replace(' ', ',')).join(' ')
  };
}

/** Rounded to a tenth, as `x y`. */
function format(p: IPoint): string {
  return `${Math.round(p.x * 10) / 10} ${Math.round(p.y * 10) / 10}`;
}

/** The extent along the main axis of each rank: boxes of a rank share their centre. */
function rankBands(ax: IAxes, boxes: readonly IBox[]): [number, number][] {
  const half = new Map<number, number>();
  for (const box of boxes) {
    const centre =
      Math.round((box[ax.main] + box[ax.mainSize] / 2) * 100) / 100;
    half.set(centre, Math.max(half.get(centre) ?? 0, box[ax.mainSize] / 2));
  }
  return [...half.entries()]
    .sort((a, b) => a[0] - b[0])
    .map(([centre, h]) => [centre - h, centre + h]);
}

/** The empty gap between the ranks of two main-axis positions. */
function gapBetween(
  bands: readonly [number, number][],
  a: number,
  b: number
): [number, number] {
  const band = (v: number) =>
    bands.find(([lo, hi]) => v >= lo - EPSILON && v <= hi + EPSILON) ?? [v, v];
  const [first, second] = a < b ? [a, b] : [b, a];
  return [band(first)[1], band(second)[0]];
}

/**
 * Both ends of every edge: on the face of its step toward its neighbouring waypoint,
 * straight in line with it where the face allows, else spread evenly along the face, or
 * all at its middle when too many for that.
 */
function assignPorts(
  ax: IAxes,
  steps: ReadonlyMap<string, IBox>,
  edges: readonly IEdgeWaypoints[]
): [IPoint, IPoint][] {
  const centre = (box: IBox) => ({
    x: box.x + box.width / 2,
    y: box.y + box.height / 2
  });
  const faces = new Map<
    string,
    {
      box: IBox;
      face: number;
      ends: { toward: number; set: (p: IPoint) => void }[];
    }
  >();
  const result = edges.map((): [IPoint, IPoint] => [
    { x: 0, y: 0 },
    { x: 0, y: 0 }
  ]);
  edges.forEach((edge, i) => {
    const up = steps.get(edge.upstream)!;
    const down = steps.get(edge.downstream)!;
    const next = edge.waypoints[0] ?? centre(down);
    const previous = edge.waypoints[edge.waypoints.length - 1] ?? centre(up);
    const ends: [IBox, IPoint, 0 | 1][] = [
      [up, next, 0],
      [down, previous, 1]
    ];
    for (const [box, toward, end] of ends) {
      const face = toward[ax.main] < centre(box)[ax.main] ? -1 : 1;
      const key = `${box.x},${box.y},${face}`;
      const entry = faces.get(key) ?? { box, face, ends: [] };
      entry.ends.push({
        toward: toward[ax.cross],
        set: p => (result[i][end] = p)
      });
      faces.set(key, entry);
    }
  });
  for (const { box, face, ends } of faces.values()) {
    const start = box[ax.cross];
    const size = box[ax.crossSize];
    const inset = Math.min(PORT_INSET, size / 4);
    ends.sort((a, b) => a.toward - b.toward);
    let crosses = ends.map(e =>
      Math.min(start + size - inset, Math.max(start + inset, e.toward))
    );
    if (crosses.some((c, j) => j > 0 && c - crosses[j - 1] < PORT_GAP)) {
      // Spread evenly; too many for that, and they fork from (or join at) the middle.
      const spread = size / (ends.length + 1) >= PORT_GAP;
      crosses = ends.map((_, j) =>
        spread ? start + (size * (j + 1)) / (ends.length + 1) : start + size / 2
      );
    }
    const main = box[ax.main] + (face > 0 ? box[ax.mainSize] : 0);
    ends.forEach((end, j) =>
      end.set(
        ax.main === 'y'
          ? { x: crosses[j], y: main }
          : { x: main, y: crosses[j] }
      )
    );
  }
  return result;
}

/**
 * Give each run a track in its gap: runs of one group share one; groups whose spans
 * overlap get different ones, spread across the gap.
 */
function assignTracks(runs: readonly IRun[]): void {
  const gaps = new Map<string, Map<string, IRun[]>>();
  for (const run of runs) {
    const key = run.gap.join(',');
    const groups = gaps.get(key) ?? new Map<string, IRun[]>();
    groups.set(run.group, [...(groups.get(run.group) ?? []), run]);
    gaps.set(key, groups);
  }
  for (const groups of gaps.values()) {
    const spans = [...groups.values()]
      .map(members => ({
        members,
        lo: Math.min(...members.map(r => Math.min(r.from, r.to))),
        hi: Math.max(...members.map(r => Math.max(r.from, r.to)))
      }))
      .sort((a, b) => a.lo - b.lo);
    const trackEnds: number[] = [];
    const trackOf = spans.map(span => {
      let track = trackEnds.findIndex(end => end < span.lo - RUN_GAP);
      if (track < 0) {
        track = trackEnds.length;
      }
      trackEnds[track] = span.hi;
      return track;
    });
    const [lo, hi] = spans[0].members[0].gap;
    const first = lo + TRACK_MARGIN;
    const last = hi - TRACK_MARGIN - ARROW_LENGTH;
    const usable = Math.max(0, last - first);
    spans.forEach((span, s) => {
      const position =
        last > first
          ? first + (usable * (trackOf[s] + 1)) / (trackEnds.length + 1)
          : (lo + hi) / 2;
      span.members.forEach(run => (run.track = position));
    });
  }
}

/** Drop repeated points and points in the middle of a straight stretch. */
function simplify(route: IPoint[]): IPoint[] {
  const kept: IPoint[] = [];
  for (const p of route) {
    const last = kept[kept.length - 1];
    if (last && distance(last, p) < EPSILON / 10) {
      continue;
    }
    const before = kept[kept.length - 2];
    if (before && collinear(before, last, p)) {
      kept[kept.length - 1] = p;
    } else {
      kept.push(p);
    }
  }
  return kept;
}

function collinear(a: IPoint, b: IPoint, c: IPoint): boolean {
  return Math.abs((b.x - a.x) * (c.y - a.y) - (b.y - a.y) * (c.x - a.x)) < 1e-6;
}

function distance(a: IPoint, b: IPoint): number {
  return Math.hypot(b.x - a.x, b.y - a.y);
}

/** The unit vector from `a` towards `b`. */
function unit(a: IPoint, b: IPoint): IPoint {
  const length = distance(a, b) || 1;
  return { x: (b.x - a.x) / length, y: (b.y - a.y) / length };
}
