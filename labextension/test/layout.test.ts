/**
 * The DAG drawing stays readable from 2 to 30 steps: for generated pipelines (chains,
 * fan-out and fan-in, diamonds, a 30-way fan, a random DAG) in both directions, no two
 * step boxes overlap, no label lands on a step, another label or another edge, and every
 * edge runs from its upstream step's border to its downstream step's border.
 */
import { describe, expect, it } from 'vitest';

import {
  DEFAULT_METRICS,
  Direction,
  fitScale,
  IBox,
  ILayout,
  ILayoutInput,
  IPoint,
  labelLines,
  layoutDag,
  layoutToFit
} from '../src/pipeline/layout';

type Edge = ILayoutInput['edges'][number];

function edge(upstream: string, downstream: string, ...variables: string[]) {
  return { upstream, downstream, variables };
}

function pipeline(names: string[], edges: Edge[]): ILayoutInput {
  return { steps: names.map(name => ({ name })), edges };
}

function chain(n: number): ILayoutInput {
  const names = Array.from({ length: n }, (_, i) => `step-${i}`);
  return pipeline(
    names,
    names.slice(1).map((name, i) => edge(names[i], name, `out_${i}`))
  );
}

/** One source, `n - 2` branches, one sink. */
function fanOutIn(n: number): ILayoutInput {
  const branches = Array.from({ length: n - 2 }, (_, i) => `branch-${i}`);
  return pipeline(
    ['load', ...branches, 'merge'],
    [
      ...branches.map(b => edge('load', b, 'raw')),
      ...branches.map((b, i) => edge(b, 'merge', `part_${i}`, `score_${i}`))
    ]
  );
}

/** One source feeding `n - 1` steps. */
function wide(n: number): ILayoutInput {
  const leaves = Array.from({ length: n - 1 }, (_, i) => `report-${i}`);
  return pipeline(
    ['data', ...leaves],
    leaves.map((leaf, i) => edge('data', leaf, i % 3 ? 'frame' : 'frame, meta'))
  );
}

/** Diamonds stacked: a → (b, c) → d → (e, f) → g ... */
function diamonds(count: number): ILayoutInput {
  const names = ['top'];
  const edges: Edge[] = [];
  for (let i = 0; i < count; i++) {
    const top = names[names.length - 1];
    const [left, right, bottom] = [`left-${i}`, `right-${i}`, `join-${i}`];
    names.push(left, right, bottom);
    edges.push(
      edge(top, left, 'x'),
      edge(top, right, 'x', 'y'),
      edge(left, bottom, 'left_result'),
      edge(right, bottom, 'right_result'),
      edge(top, bottom) // order only
    );
  }
  return pipeline(names, edges);
}

/** A random DAG (seeded): every step takes some variables from earlier steps. */
function random(n: number, seed: number): ILayoutInput {
  let state = seed;
  const next = () => {
    state = (state * 1103515245 + 12345) % 2147483648;
    return state / 2147483648;
  };
  const names = Array.from(
    { length: n },
    (_, i) => `s${i}-${'x'.repeat(i % 9)}`
  );
  const edges: Edge[] = [];
  names.forEach((name, i) => {
    const ups = new Set<number>();
    for (let k = 0; k < 1 + Math.floor(next() * 3) && i > 0; k++) {
      ups.add(Math.floor(next() * i));
    }
    for (const up of ups) {
      const vars = Array.from(
        { length: Math.floor(next() * 4) },
        (_, v) => `var_${up}_${v}`
      );
      edges.push(edge(names[up], name, ...vars));
    }
  });
  return pipeline(names, edges);
}

/** The FANOUT_ML example: a fan-out, a fan-in and an edge that skips two ranks. */
const FANOUT = pipeline(
  ['load', 'numeric-features', 'city-features', 'train', 'evaluate'],
  [
    edge('load', 'numeric-features', 'raw'),
    edge('load', 'city-features', 'raw'),
    edge('numeric-features', 'train', 'X_num'),
    edge('city-features', 'train', 'X_city'),
    edge('train', 'evaluate', 'model', 'X_test'),
    edge('load', 'evaluate', 'y_test')
  ]
);

const CASES: [string, ILayoutInput][] = [
  ['chain of 2', chain(2)],
  ['chain of 8', chain(8)],
  ['chain of 30', chain(30)],
  ['fan-out/fan-in of 8', fanOutIn(8)],
  ['fan-out/fan-in of 30', fanOutIn(30)],
  ['8 steps in diamonds', diamonds(2)],
  ['30-way fan', wide(30)],
  ['random DAG of 8', random(8, 7)],
  ['random DAG of 30', random(30, 42)],
  ['the fan-out example', FANOUT]
];

const EPSILON = 0.01;

function overlap(a: IBox, b: IBox): boolean {
  return (
    a.x < b.x + b.width - EPSILON &&
    b.x < a.x + a.width - EPSILON &&
    a.y < b.y + b.height - EPSILON &&
    b.y < a.y + a.height - EPSILON
  );
}

function inside(p: IPoint, box: IBox): boolean {
  return (
    p.x > box.x + EPSILON &&
    p.x < box.x + box.width - EPSILON &&
    p.y > box.y + EPSILON &&
    p.y < box.y + box.height - EPSILON
  );
}

function onBorder(p: IPoint, box: IBox): boolean {
  const inX = p.x >= box.x - EPSILON && p.x <= box.x + box.width + EPSILON;
  const inY = p.y >= box.y - EPSILON && p.y <= box.y + box.height + EPSILON;
  const onVertical =
    Math.abs(p.x - box.x) < EPSILON ||
    Math.abs(p.x - box.x - box.width) < EPSILON;
  const onHorizontal =
    Math.abs(p.y - box.y) < EPSILON ||
    Math.abs(p.y - box.y - box.height) < EPSILON;
  return inX && inY && (onVertical || onHorizontal);
}

/** Whether segment a–b passes through the inside of `box` (Liang–Barsky clipping). */
function crosses(a: IPoint, b: IPoint, box: IBox): boolean {
  const inset = 0.5;
  let t0 = 0;
  let t1 = 1;
  const dx = b.x - a.x;
  const dy = b.y - a.y;
  const checks: [number, number][] = [
    [-dx, a.x - (box.x + inset)],
    [dx, box.x + box.width - inset - a.x],
    [-dy, a.y - (box.y + inset)],
    [dy, box.y + box.height - inset - a.y]
  ];
  for (const [p, q] of checks) {
    if (p === 0) {
      if (q < 0) {
        return false;
      }
    } else {
      const t = q / p;
      if (p < 0) {
        t0 = Math.max(t0, t);
      } else {
        t1 = Math.min(t1, t);
      }
    }
  }
  return t0 < t1;
}

function checkReadable(input: ILayoutInput, layout: ILayout): void {
  const nodes = new Map(layout.nodes.map(n => [n.name, n]));
  expect(layout.nodes).toHaveLength(input.steps.length);
  expect(layout.edges).toHaveLength(input.edges.length);
  const labels = layout.edges.flatMap(e => (e.label ? [e.label] : []));
  const boxes = [...layout.nodes, ...labels];
  for (const box of boxes) {
    expect(box.x).toBeGreaterThanOrEqual(0);
    expect(box.y).toBeGreaterThanOrEqual(0);
    expect(box.x + box.width).toBeLessThanOrEqual(layout.width + EPSILON);
    expect(box.y + box.height).toBeLessThanOrEqual(layout.height + EPSILON);
  }
  // No two boxes (steps or labels) overlap.
  boxes.forEach((a, i) => {
    for (const b of boxes.slice(i + 1)) {
      expect(
        overlap(a, b),
        `${JSON.stringify(a)} on ${JSON.stringify(b)}`
      ).toBe(false);
    }
  });
  for (const drawn of layout.edges) {
    const up = nodes.get(drawn.upstream)!;
    const down = nodes.get(drawn.downstream)!;
    const route = drawn.points;
    const first = route[0];
    const last = route[route.length - 1];
    const name = `${drawn.upstream} -> ${drawn.downstream}`;
    expect(onBorder(first, up), `${name} starts off its step`).toBe(true);
    expect(onBorder(last, down), `${name} ends off its step`).toBe(true);
    // The arrowhead's tip is the route's end; the line stops at its base, short of it.
    expect(drawn.arrow.split(' ')[0]).toBe(
      `${Math.round(last.x * 10) / 10},${Math.round(last.y * 10) / 10}`
    );
    const [, ...base] = drawn.arrow
      .split(' ')
      .map(xy => xy.split(',').map(Number))
      .map(([x, y]) => ({ x, y }));
    for (const corner of base) {
      expect(inside(corner, down), `${name}: arrowhead inside its step`).toBe(
        false
      );
    }
    const end = drawn.path.split(' ').slice(-2).map(Number);
    expect(inside({ x: end[0], y: end[1] }, down)).toBe(false);
    // The label sits on its own edge's route, between its two steps.
    if (drawn.label) {
      const { label } = drawn;
      expect(
        route.slice(1).some((p, k) => crosses(route[k], p, label)),
        `${name} misses its label`
      ).toBe(true);
      if (layout.direction === 'TB') {
        expect(label.y).toBeGreaterThanOrEqual(up.y + up.height);
        expect(label.y + label.height).toBeLessThanOrEqual(down.y);
      } else {
        expect(label.x).toBeGreaterThanOrEqual(up.x + up.width);
        expect(label.x + label.width).toBeLessThanOrEqual(down.x);
      }
    }
    // The route passes through no step but its own two, and through no other label.
    const others = [
      ...layout.nodes.filter(n => n !== up && n !== down),
      ...labels.filter(l => l !== drawn.label)
    ];
    for (let i = 1; i < route.length; i++) {
      for (const box of others) {
        expect(
          crosses(route[i - 1], route[i], box),
          `${name} crosses ${JSON.stringify(box)}`
        ).toBe(false);
      }
    }
  }
}

describe('layoutDag', () => {
  for (const [name, input] of CASES) {
    for (const direction of ['TB', 'LR'] as Direction[]) {
      it(`keeps ${name} readable (${direction})`, () => {
        checkReadable(input, layoutDag(input, direction));
      });
    }
  }

  it('places every step after its upstream steps', () => {
    for (const direction of ['TB', 'LR'] as Direction[]) {
      const layout = layoutDag(FANOUT, direction);
      const nodes = new Map(layout.nodes.map(n => [n.name, n]));
      for (const e of FANOUT.edges) {
        const up = nodes.get(e.upstream)!;
        const down = nodes.get(e.downstream)!;
        if (direction === 'TB') {
          expect(down.y).toBeGreaterThan(up.y + up.height);
        } else {
          expect(down.x).toBeGreaterThan(up.x + up.width);
        }
      }
    }
  });

  it('keeps siblings in notebook order', () => {
    const across = (layout: ILayout, names: string[]) =>
      layout.nodes
        .filter(n => names.includes(n.name))
        .sort((a, b) => a.x - b.x)
        .map(n => n.name);
    const fan = fanOutIn(8);
    const branches = fan.steps.slice(1, -1).map(s => s.name);
    expect(across(layoutDag(fan), branches)).toEqual(branches);
    const chains = pipeline(
      ['a', 'b', 'c', 'd'],
      [edge('a', 'c', 'x'), edge('b', 'd', 'y')]
    );
    expect(across(layoutDag(chains), ['a', 'b'])).toEqual(['a', 'b']);
    expect(across(layoutDag(chains), ['c', 'd'])).toEqual(['c', 'd']);
  });

  it('sizes boxes for their text and clips very long names', () => {
    const long = 'a-step-name-much-longer-than-any-box-allows';
    const layout = layoutDag(
      pipeline(['ab', 'a-longer-step', long], [edge('ab', long, 'x')])
    );
    const [short, longer, clipped] = layout.nodes;
    expect(short.width).toBeLessThan(longer.width);
    expect(longer.text).toBe('a-longer-step');
    expect(clipped.text.endsWith('…')).toBe(true);
    expect(clipped.text.length * DEFAULT_METRICS.charWidth).toBeLessThan(
      clipped.width
    );
    const wider = layoutDag(pipeline(['ab'], []), 'TB', {
      charWidth: 10,
      lineHeight: 20
    }).nodes[0];
    expect(wider.width).toBeGreaterThan(short.width);
    expect(wider.height).toBeGreaterThan(short.height);
  });

  it('draws an order-only edge without a label', () => {
    const layout = layoutDag(pipeline(['a', 'b'], [edge('a', 'b')]));
    expect(layout.edges[0].label).toBeNull();
    checkReadable(pipeline(['a', 'b'], [edge('a', 'b')]), layout);
  });

  it('ignores edges to unknown steps and does not loop on a cycle', () => {
    const layout = layoutDag(
      pipeline(['a', 'b'], [edge('a', 'b'), edge('b', 'a'), edge('a', 'ghost')])
    );
    expect(layout.nodes.map(n => n.name)).toEqual(['a', 'b']);
    expect(layout.edges.map(e => e.downstream)).toEqual(['b', 'a']);
  });

  it('lays out an empty pipeline as an empty drawing', () => {
    const layout = layoutDag(pipeline([], []));
    expect(layout.nodes).toEqual([]);
    expect(layout.edges).toEqual([]);
    expect(layout.height).toBeGreaterThan(0);
  });
});

describe('layoutToFit', () => {
  it('draws a chain top to bottom and a wide fan left to right in a landscape frame', () => {
    const frame = { width: 1600, height: 1000 };
    expect(layoutToFit(chain(8), frame).direction).toBe('TB');
    const fan = layoutToFit(wide(30), frame);
    expect(fan.direction).toBe('LR');
    expect(fitScale(fan, frame)).toBeGreaterThan(
      fitScale(layoutDag(wide(30), 'TB'), frame)
    );
  });
});

describe('labelLines', () => {
  it('wraps variables between names and says how many did not fit', () => {
    expect(labelLines(['raw'])).toEqual(['raw']);
    expect(labelLines(['model', 'X_test', 'y_test'])).toEqual([
      'model, X_test, y_test'
    ]);
    const many = Array.from({ length: 20 }, (_, i) => `variable_${i}`);
    const lines = labelLines(many);
    expect(lines).toHaveLength(3);
    expect(lines[0]).toBe('variable_0, variable_1,');
    expect(lines[2]).toBe('+16 more');
    expect(labelLines([])).toEqual([]);
  });
});
