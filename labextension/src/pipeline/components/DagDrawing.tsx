/**
 * The pipeline's DAG as SVG shapes, for a laid-out graph: a box per step coloured by its
 * state in the run shown, an arrow per edge with the variables passed along it on a
 * label of its own. The sidebar's overview and the large, zoomable view both draw this.
 */
import * as React from 'react';

import type { ILayout, ILayoutEdge } from '../layout';
import type { StepStatus } from '../types';

export interface IDagDrawingProps {
  layout: ILayout;
  /** Step states of the run shown, by step name. */
  states: ReadonlyMap<string, StepStatus>;
  /** Called for a step of the run shown (which has a state); none: steps are not buttons. */
  onStepClick?: (step: string) => void;
}

export function DagDrawing(props: IDagDrawingProps): JSX.Element {
  const { layout, states, onStepClick } = props;
  return (
    <g className="cube-Dag-drawing">
      {layout.edges.map(edge => (
        <DagEdge
          key={`${edge.upstream}->${edge.downstream}`}
          edge={edge}
          lineHeight={layout.lineHeight}
        />
      ))}
      {layout.nodes.map(node => {
        const state = states.get(node.name) ?? 'none';
        const clickable = !!onStepClick && states.has(node.name);
        const open = clickable ? () => onStepClick!(node.name) : undefined;
        return (
          <g
            key={node.name}
            className={`cube-Dag-node cube-mod-${state}${clickable ? ' cube-mod-clickable' : ''}`}
            data-testid="cube-dag-node"
            data-step={node.name}
            data-status={state}
            transform={`translate(${node.x} ${node.y})`}
            role={clickable ? 'button' : undefined}
            tabIndex={clickable ? 0 : undefined}
            aria-label={clickable ? `${node.name}: ${state}` : undefined}
            onClick={open}
            onKeyDown={
              open
                ? event => {
                    if (event.key === 'Enter' || event.key === ' ') {
                      event.preventDefault();
                      open();
                    }
                  }
                : undefined
            }
          >
            <title>
              {clickable
                ? `${node.name}: ${state} — open its executed notebook`
                : state === 'none'
                  ? node.name
                  : `${node.name}: ${state}`}
            </title>
            <rect width={node.width} height={node.height} rx={6} ry={6} />
            <text
              x={node.width / 2}
              y={node.height / 2}
              textAnchor="middle"
              dominantBaseline="central"
            >
              {node.text}
            </text>
          </g>
        );
      })}
    </g>
  );
}

/** One edge: its line and arrowhead, then its label over the line. */
function DagEdge(props: {
  edge: ILayoutEdge;
  lineHeight: number;
}): JSX.Element {
  const { edge, lineHeight } = props;
  const variables = edge.variables.join(', ');
  const label = edge.label;
  return (
    <g
      className={`cube-Dag-edge${variables ? '' : ' cube-mod-order'}`}
      data-testid="cube-dag-edge"
      data-upstream={edge.upstream}
      data-downstream={edge.downstream}
      data-variables={variables}
    >
      <title>
        {`${edge.upstream} → ${edge.downstream}${variables ? `: ${variables}` : ' (order only)'}`}
      </title>
      <path className="cube-Dag-hit" d={edge.path} />
      <path className="cube-Dag-line" d={edge.path} />
      <polygon className="cube-Dag-arrow" points={edge.arrow} />
      {label && (
        <g className="cube-Dag-label" data-testid="cube-dag-label">
          <rect
            x={label.x}
            y={label.y}
            width={label.width}
            height={label.height}
            rx={4}
            ry={4}
          />
          <text textAnchor="middle" dominantBaseline="central">
            {label.lines.map((line, i) => (
              <tspan
                key={i}
                x={label.x + label.width / 2}
                y={
                  label.y +
                  label.height / 2 +
                  (i - (label.lines.length - 1) / 2) * lineHeight
                }
              >
                {line}
              </tspan>
            ))}
          </text>
        </g>
      )}
    </g>
  );
}
