/** The sparkline's geometry: time left to right, values scaled to the peak with headroom. */
import { describe, expect, it } from 'vitest';

import { sparklinePoints } from '../src/common/components/Sparkline';

describe('sparklinePoints', () => {
  it('draws nothing without points', () => {
    expect(sparklinePoints([])).toBe('');
  });

  it('keeps a steady value below the top edge, where it can be seen', () => {
    expect(
      sparklinePoints([
        [100, 512],
        [110, 512],
        [120, 512]
      ])
    ).toBe('0.0,4.0 50.0,4.0 100.0,4.0');
  });

  it('puts zero at the bottom and one point at the right edge', () => {
    expect(
      sparklinePoints([
        [0, 0],
        [10, 1000]
      ])
    ).toBe('0.0,20.0 100.0,4.0');
    expect(sparklinePoints([[5, 300]])).toBe('100.0,4.0');
  });
});
