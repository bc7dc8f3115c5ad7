/**
 * The pipeline's DAG as an SVG: one box per step, an arrow per edge labelled with the
 * variables passed along it, and each box coloured by the step's state in the run
 * shown. Clicking a step of a run opens its executed notebook.
 */
import * as React from 'react';

import { layoutDag } from '../layout';
import type { IEdge, IStep, StepStatus } from '../types';

export interface IDagViewProps {
  steps: readonly IStep[];
  edges: readonly IEdge[];
  /** Step states of the run shown, by step name. */
  states: ReadonlyMap<string, StepStatus>;
  onStepClick?: (step: string) => void;
}

const LABEL_CHARS = 26;

function clip(text: string, chars: number): string {
  return text.length > chars ? `${text.slice(0, chars - 1)}…` : text;
}

export function DagView(props: IDagViewProps): JSX.Element {
  const layout = React.useMemo(
    () => layoutDag({ steps: props.steps, edges: props.edges }),
    [props.steps, props.edges]
  );
  if (props.steps.length === 0) {
    return (
      <div className="cube-Pipeline-empty" data-testid="cube-dag-empty">
        No steps yet: give a code cell the role “Starts step”.
      </div>
    );
  }
  return (
    <svg
      className="cube-Dag"
      data-testid="cube-dag"
      viewBox={`0 0 ${layout.width} ${layout.height}`}
      width={layout.width}
      height={layout.height}
      role="img"
      aria-label="Pipeline graph"
    >
      <defs>
        <marker
          id="cube-dag-arrow"
          viewBox="0 0 10 10"
          refX="9"
          refY="5"
          markerWidth="7"
          markerHeight="7"
          orient="auto-start-reverse"
        >
          <path className="cube-Dag-arrow" d="M 0 0 L 10 5 L 0 10 z" />
        </marker>
      </defs>
      {layout.edges.map(edge => {
        const label = edge.variables.join(', ');
        return (
          <g
            key={`${edge.upstream}->${edge.downstream}`}
            className="cube-Dag-edge"
            data-testid="cube-dag-edge"
            data-upstream={edge.upstream}
            data-downstream={edge.downstream}
            data-variables={label}
          >
            <title>
              {`${edge.upstream} → ${edge.downstream}${label ? `: ${label}` : ' (order only)'}`}
            </title>
            <path
              className={`cube-Dag-line${label ? '' : ' cube-mod-order'}`}
              d={edge.path}
              markerEnd="url(#cube-dag-arrow)"
            />
            {label && (
              <text
                className="cube-Dag-label"
                x={edge.labelX}
                y={edge.labelY}
                textAnchor="middle"
                dominantBaseline="central"
              >
                {clip(label, LABEL_CHARS)}
              </text>
            )}
          </g>
        );
      })}
      {layout.nodes.map(node => {
        const state = props.states.get(node.name) ?? 'none';
        const clickable = !!props.onStepClick && props.states.has(node.name);
        return (
          <g
            key={node.name}
            className={`cube-Dag-node cube-mod-${state}${clickable ? ' cube-mod-clickable' : ''}`}
            data-testid="cube-dag-node"
            data-step={node.name}
            data-status={state}
            transform={`translate(${node.x} ${node.y})`}
            onClick={
              clickable ? () => props.onStepClick!(node.name) : undefined
            }
          >
            <title>
              {clickable
                ? `${node.name}: ${state} — click to open its executed notebook`
                : node.name}
            </title>
            <rect width={node.width} height={node.height} rx={6} ry={6} />
            <text
              x={node.width / 2}
              y={node.height / 2}
              textAnchor="middle"
              dominantBaseline="central"
            >
              {clip(node.name, Math.floor((node.width - 16) / 7))}
            </text>
          </g>
        );
      })}
    </svg>
  );
}
