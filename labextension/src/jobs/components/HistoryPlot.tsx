/**
 * A tuning job's optimization history as an SVG: each finished trial's objective as a
 * dot, in the order the trials finished, and the best value so far as a step line.
 */
import * as React from 'react';

import { formatValue } from '../format';
import type { IJobHistory } from '../types';

const WIDTH = 480;
const HEIGHT = 200;
const MARGIN = { top: 12, right: 16, bottom: 28, left: 56 };

export function HistoryPlot(props: {
  history: IJobHistory;
  metric: string;
}): JSX.Element {
  const { points, goal } = props.history;
  if (points.length === 0) {
    return (
      <div className="cube-Jobs-empty" data-testid="cube-job-history-empty">
        No trial has reported its objective yet.
      </div>
    );
  }
  const values = points.flatMap(p => [p.objective, p.best]);
  let low = Math.min(...values);
  let high = Math.max(...values);
  if (low === high) {
    low -= Math.abs(low) * 0.1 || 1;
    high += Math.abs(high) * 0.1 || 1;
  }
  const pad = (high - low) * 0.06;
  low -= pad;
  high += pad;
  const plotW = WIDTH - MARGIN.left - MARGIN.right;
  const plotH = HEIGHT - MARGIN.top - MARGIN.bottom;
  const x = (i: number) =>
    MARGIN.left +
    (points.length === 1 ? plotW / 2 : (i * plotW) / (points.length - 1));
  const y = (v: number) => MARGIN.top + ((high - v) * plotH) / (high - low);
  // Best so far is a step: flat until the next trial improves on it.
  const bestPath = points
    .map((p, i) =>
      i === 0 ? `M ${x(i)} ${y(p.best)}` : `H ${x(i)} V ${y(p.best)}`
    )
    .join(' ');
  const ticks = [low + pad, (low + high) / 2, high - pad];
  return (
    <figure className="cube-HistoryPlot" data-testid="cube-job-history">
      <svg
        viewBox={`0 0 ${WIDTH} ${HEIGHT}`}
        width={WIDTH}
        height={HEIGHT}
        role="img"
        aria-label={`Optimization history: ${props.metric || 'objective'} per trial (${goal})`}
      >
        <line
          className="cube-HistoryPlot-axis"
          x1={MARGIN.left}
          x2={MARGIN.left}
          y1={MARGIN.top}
          y2={MARGIN.top + plotH}
        />
        <line
          className="cube-HistoryPlot-axis"
          x1={MARGIN.left}
          x2={MARGIN.left + plotW}
          y1={MARGIN.top + plotH}
          y2={MARGIN.top + plotH}
        />
        {ticks.map(tick => (
          <g key={tick}>
            <line
              className="cube-HistoryPlot-grid"
              x1={MARGIN.left}
              x2={MARGIN.left + plotW}
              y1={y(tick)}
              y2={y(tick)}
            />
            <text
              className="cube-HistoryPlot-label"
              x={MARGIN.left - 6}
              y={y(tick)}
              textAnchor="end"
              dominantBaseline="middle"
            >
              {formatValue(tick)}
            </text>
          </g>
        ))}
        <text
          className="cube-HistoryPlot-label"
          x={MARGIN.left + plotW / 2}
          y={HEIGHT - 6}
          textAnchor="middle"
        >
          trial (in the order finished)
        </text>
        <path
          className="cube-HistoryPlot-best"
          data-testid="cube-job-history-best"
          d={bestPath}
        />
        {points.map((p, i) => (
          <circle
            key={p.trial}
            className="cube-HistoryPlot-point"
            data-testid="cube-job-history-point"
            data-trial={p.trial}
            cx={x(i)}
            cy={y(p.objective)}
            r={4}
          >
            <title>
              {p.trial}: {props.metric || 'objective'} ={' '}
              {formatValue(p.objective)} (best so far {formatValue(p.best)})
            </title>
          </circle>
        ))}
      </svg>
      <figcaption className="cube-HistoryPlot-legend">
        <span className="cube-HistoryPlot-key cube-mod-point" />
        {props.metric || 'objective'} per trial
        <span className="cube-HistoryPlot-key cube-mod-best" />
        best so far ({goal})
      </figcaption>
    </figure>
  );
}
