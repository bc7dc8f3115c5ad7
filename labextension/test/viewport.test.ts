/** The large DAG view's zoom and fit: the point under the cursor stays put, fitting centres. */
import { describe, expect, it } from 'vitest';

import {
  fitView,
  MAX_ZOOM,
  MIN_ZOOM,
  panBy,
  zoomAt
} from '../src/pipeline/viewport';

const FRAME = { width: 1200, height: 800 };

describe('zoomAt', () => {
  it('keeps the drawing point under the cursor where it is', () => {
    const view = { x: 40, y: -30, k: 0.8 };
    const cursor = { x: 310, y: 520 };
    const under = (v: typeof view) => ({
      x: (cursor.x - v.x) / v.k,
      y: (cursor.y - v.y) / v.k
    });
    for (const factor of [1.6, 0.5]) {
      const zoomed = zoomAt(view, factor, cursor.x, cursor.y);
      expect(zoomed.k).toBeCloseTo(view.k * factor);
      expect(under(zoomed).x).toBeCloseTo(under(view).x);
      expect(under(zoomed).y).toBeCloseTo(under(view).y);
    }
  });

  it('stays within its zoom range', () => {
    const view = { x: 0, y: 0, k: 1 };
    expect(zoomAt(view, 1000, 10, 10).k).toBe(MAX_ZOOM);
    expect(zoomAt(view, 0.0001, 10, 10).k).toBe(MIN_ZOOM);
  });
});

describe('fitView', () => {
  it('shows a large drawing whole, centred', () => {
    const drawing = { width: 3000, height: 1000 };
    const view = fitView(drawing, FRAME);
    expect(drawing.width * view.k).toBeLessThan(FRAME.width);
    expect(drawing.height * view.k).toBeLessThan(FRAME.height);
    expect(view.x + (drawing.width * view.k) / 2).toBeCloseTo(FRAME.width / 2);
    expect(view.y + (drawing.height * view.k) / 2).toBeCloseTo(
      FRAME.height / 2
    );
  });

  it('does not blow a small drawing up without bound', () => {
    const view = fitView({ width: 100, height: 60 }, FRAME);
    expect(view.k).toBeGreaterThan(1);
    expect(view.k).toBeLessThan(2);
  });
});

describe('panBy', () => {
  it('moves the drawing on screen, at the same zoom', () => {
    expect(panBy({ x: 5, y: 6, k: 2 }, 10, -4)).toEqual({ x: 15, y: 2, k: 2 });
  });
});
