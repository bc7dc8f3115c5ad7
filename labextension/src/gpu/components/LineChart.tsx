/**
 * A small SVG line chart of one metric over the history window, with its current value.
 * The line stretches to the chart's width; strokes keep their width (non-scaling).
 */
import * as React from 'react';

import { formatElapsed } from '../../common/format';

const WIDTH = 300;
const HEIGHT = 60;
/** The shortest span a chart shows, so a few first samples do not fill it edge to edge (s). */
export const MIN_WINDOW_SECONDS = 60;

export interface ILineChartProps {
  label: string;
  /** `[unix seconds, value]`, oldest first. */
  points: readonly (readonly [number, number])[];
  /**
   * The window shown, unix seconds: it starts at the oldest sample (at least
   * `MIN_WINDOW_SECONDS` before `to`), never before `from`.
   */
  from: number;
  to: number;
  /** The value at the top edge (100 for percentages, the memory total for memory). */
  max: number;
  /** The current value, formatted. */
  current: string;
  metric: string;
  /** Formats a value for the tooltip of the latest point. */
  format: (value: number) => string;
}

/** The polyline's points in the chart's coordinates. */
export function chartPoints(
  points: readonly (readonly [number, number])[],
  from: number,
  to: number,
  max: number
): string {
  const span = Math.max(to - from, 1e-9);
  const top = max > 0 ? max : 1;
  return points
    .filter(([t]) => t >= from && t <= to)
    .map(([t, v]) => {
      const x = ((t - from) / span) * WIDTH;
      const y = HEIGHT - (Math.min(Math.max(v, 0), top) / top) * HEIGHT;
      return `${x.toFixed(1)},${y.toFixed(1)}`;
    })
    .join(' ');
}

export function LineChart(props: ILineChartProps): JSX.Element {
  const oldest = props.points.length ? props.points[0][0] : props.to;
  const from = Math.max(
    props.from,
    Math.min(oldest, props.to - MIN_WINDOW_SECONDS)
  );
  const line = chartPoints(props.points, from, props.to, props.max);
  const coords = line ? line.split(' ') : [];
  const first = coords[0]?.split(',')[0];
  const last = coords[coords.length - 1]?.split(',')[0];
  const area =
    coords.length > 1
      ? `${first},${HEIGHT} ${line} ${last},${HEIGHT}`
      : undefined;
  const latest = props.points[props.points.length - 1];
  const span = formatElapsed(props.to - from);
  return (
    <div
      className="cube-GpuChart"
      data-testid="cube-gpu-chart"
      data-metric={props.metric}
      data-points={coords.length}
    >
      <div className="cube-GpuChart-head">
        <span className="cube-GpuChart-label">{props.label}</span>
        <span className="cube-GpuChart-current">{props.current}</span>
      </div>
      <svg
        className="cube-GpuChart-plot"
        viewBox={`0 0 ${WIDTH} ${HEIGHT}`}
        preserveAspectRatio="none"
        role="img"
        aria-label={`${props.label} over the last ${span}`}
      >
        <title>
          {latest
            ? `${props.label}: ${props.format(latest[1])} at ${new Date(latest[0] * 1000).toLocaleTimeString()}`
            : `${props.label}: no samples yet`}
        </title>
        <line
          className="cube-GpuChart-grid"
          x1={0}
          x2={WIDTH}
          y1={HEIGHT / 2}
          y2={HEIGHT / 2}
        />
        {area && <polygon className="cube-GpuChart-area" points={area} />}
        {coords.length > 1 && (
          <polyline className="cube-GpuChart-line" points={line} />
        )}
        {coords.length === 1 && (
          <line
            className="cube-GpuChart-line"
            x1={0}
            x2={WIDTH}
            y1={coords[0].split(',')[1]}
            y2={coords[0].split(',')[1]}
          />
        )}
      </svg>
      <div className="cube-GpuChart-axis">
        <span>−{span}</span>
        <span>now</span>
      </div>
    </div>
  );
}
