/**
 * A small line of recent values (GPU memory of a job or step), scaled to its own peak
 * with headroom, so a steady value shows as a line rather than the box's edge.
 */
import * as React from 'react';

import type { GpuPoints } from '../../tokens';

const WIDTH = 100;
const HEIGHT = 20;

export interface ISparklineProps {
  points: GpuPoints;
  /** What it shows, for screen readers and hover. */
  label: string;
  testid?: string;
}

/** The polyline's points in the box's coordinates: time left to right, 0 at the bottom. */
export function sparklinePoints(points: GpuPoints): string {
  if (points.length === 0) {
    return '';
  }
  const from = points[0][0];
  const span = Math.max(points[points.length - 1][0] - from, 1e-9);
  const top = 1.25 * Math.max(...points.map(([, v]) => v), 1e-9);
  return points
    .map(([t, v]) => {
      const x = points.length === 1 ? WIDTH : ((t - from) / span) * WIDTH;
      const y = HEIGHT - (Math.max(v, 0) / top) * HEIGHT;
      return `${x.toFixed(1)},${y.toFixed(1)}`;
    })
    .join(' ');
}

export function Sparkline(props: ISparklineProps): JSX.Element {
  return (
    <svg
      className="cube-Sparkline"
      viewBox={`0 0 ${WIDTH} ${HEIGHT}`}
      preserveAspectRatio="none"
      role="img"
      aria-label={props.label}
      data-testid={props.testid}
      data-points={props.points.length}
    >
      <title>{props.label}</title>
      <polyline points={sparklinePoints(props.points)} />
    </svg>
  );
}
