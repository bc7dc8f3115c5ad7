/** The DAG drawing: each step below its upstream steps, no two boxes on each other. */
import { describe, expect, it } from 'vitest';

import {
  ILayout,
  ILayoutNode,
  layoutDag,
  NODE_HEIGHT,
  nodeWidth
} from '../src/pipeline/layout';

function steps(...names: string[]) {
  return names.map(name => ({ name }));
}

function edge(upstream: string, downstream: string, ...variables: string[]) {
  return { upstream, downstream, variables };
}

function byName(layout: ILayout): Map<string, ILayoutNode> {
  return new Map(layout.nodes.map(n => [n.name, n]));
}

function overlap(a: ILayoutNode, b: ILayoutNode): boolean {
  return (
    a.x < b.x + b.width &&
    b.x < a.x + a.width &&
    a.y < b.y + b.height &&
    b.y < a.y + a.height
  );
}

/** A fan-out and fan-in with a layer-skipping edge, as in the FANOUT_ML example. */
const FANOUT = {
  steps: steps(
    'load',
    'numeric-features',
    'city-features',
    'train',
    'evaluate'
  ),
  edges: [
    edge('load', 'numeric-features', 'raw'),
    edge('load', 'city-features', 'raw'),
    edge('numeric-features', 'train', 'X_num'),
    edge('city-features', 'train', 'X_city'),
    edge('train', 'evaluate', 'model'),
    edge('load', 'evaluate', 'y_test')
  ]
};

describe('layoutDag', () => {
  it('places every step below all of its upstream steps', () => {
    const layout = layoutDag(FANOUT);
    const nodes = byName(layout);
    for (const e of FANOUT.edges) {
      const up = nodes.get(e.upstream)!;
      const down = nodes.get(e.downstream)!;
      expect(down.layer).toBeGreaterThan(up.layer);
      expect(down.y).toBeGreaterThanOrEqual(up.y + up.height);
    }
    expect(nodes.get('load')!.layer).toBe(0);
    expect(nodes.get('train')!.layer).toBe(2);
    // Longest path: evaluate sits under train, not right under load.
    expect(nodes.get('evaluate')!.layer).toBe(3);
  });

  it('draws no two steps on top of each other, all inside the drawing', () => {
    const wide = {
      steps: steps('a', ...Array.from({ length: 8 }, (_, i) => `branch-${i}`)),
      edges: Array.from({ length: 8 }, (_, i) => edge('a', `branch-${i}`))
    };
    for (const input of [FANOUT, wide]) {
      const layout = layoutDag(input);
      expect(layout.nodes).toHaveLength(input.steps.length);
      for (const [i, a] of layout.nodes.entries()) {
        for (const b of layout.nodes.slice(i + 1)) {
          expect(overlap(a, b), `${a.name} overlaps ${b.name}`).toBe(false);
        }
        expect(a.x).toBeGreaterThanOrEqual(0);
        expect(a.x + a.width).toBeLessThanOrEqual(layout.width);
        expect(a.y + a.height).toBeLessThanOrEqual(layout.height);
        expect(a.height).toBe(NODE_HEIGHT);
        expect(a.width).toBe(nodeWidth(a.name));
      }
    }
  });

  it('runs each edge from the bottom of its upstream step to the top of its downstream step', () => {
    const layout = layoutDag(FANOUT);
    const nodes = byName(layout);
    for (const drawn of layout.edges) {
      const up = nodes.get(drawn.upstream)!;
      const down = nodes.get(drawn.downstream)!;
      expect(
        drawn.path.startsWith(`M ${up.x + up.width / 2} ${up.y + up.height} `)
      ).toBe(true);
      expect(drawn.path.endsWith(`${down.x + down.width / 2} ${down.y}`)).toBe(
        true
      );
      // The variable label sits between the two steps.
      expect(drawn.labelY).toBeGreaterThan(up.y + up.height);
      expect(drawn.labelY).toBeLessThan(down.y);
    }
    expect(layout.edges.find(e => e.downstream === 'train')!.variables).toEqual(
      ['X_num']
    );
  });

  it('staggers the labels of edges fanning into one step', () => {
    const layout = layoutDag(FANOUT);
    const into = layout.edges.filter(e => e.downstream === 'train');
    expect(new Set(into.map(e => e.labelY)).size).toBe(into.length);
  });

  it('keeps notebook order within a layer, and pulls steps under their upstream steps', () => {
    const layout = layoutDag({
      steps: steps('left', 'right', 'under-right', 'under-left'),
      edges: [edge('right', 'under-right'), edge('left', 'under-left')]
    });
    const nodes = byName(layout);
    expect(nodes.get('left')!.x).toBeLessThan(nodes.get('right')!.x);
    expect(nodes.get('under-left')!.x).toBeLessThan(
      nodes.get('under-right')!.x
    );
  });

  it('ignores edges to unknown steps and does not loop on a cycle', () => {
    const layout = layoutDag({
      steps: steps('a', 'b'),
      edges: [edge('a', 'b'), edge('b', 'a'), edge('a', 'ghost')]
    });
    expect(layout.nodes.map(n => n.name).sort()).toEqual(['a', 'b']);
    expect(layout.edges.every(e => e.downstream !== 'ghost')).toBe(true);
  });

  it('lays out an empty pipeline as an empty drawing', () => {
    const layout = layoutDag({ steps: [], edges: [] });
    expect(layout.nodes).toEqual([]);
    expect(layout.edges).toEqual([]);
    expect(layout.height).toBeGreaterThan(0);
  });
});

describe('nodeWidth', () => {
  it('grows with the name, within bounds', () => {
    expect(nodeWidth('a')).toBeLessThan(nodeWidth('a-much-longer-step'));
    expect(nodeWidth('a')).toBe(nodeWidth('ab'));
    expect(nodeWidth('x'.repeat(200))).toBe(nodeWidth('x'.repeat(300)));
  });
});
