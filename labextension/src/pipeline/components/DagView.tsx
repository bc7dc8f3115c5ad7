/**
 * The sidebar's overview of the pipeline's DAG: the whole graph fitted to the panel's
 * width (and a height cap), coloured by the run shown. It is one button: it opens the
 * large view, where the graph pans and zooms and its steps open their notebooks.
 */
import * as React from 'react';

import { layoutToFit } from '../layout';
import { codeFontMetrics } from '../textMetrics';
import type { IEdge, IStep, StepStatus } from '../types';
import { DagDrawing } from './DagDrawing';

export interface IDagViewProps {
  steps: readonly IStep[];
  edges: readonly IEdge[];
  /** Step states of the run shown, by step name. */
  states: ReadonlyMap<string, StepStatus>;
  /** Open the large view. */
  onOpen: () => void;
}

/** The frame the overview is drawn for: a sidebar's width, and at most this tall. */
const OVERVIEW_FRAME = { width: 240, height: 420 };

export function DagView(props: IDagViewProps): JSX.Element {
  const layout = React.useMemo(
    () =>
      layoutToFit(
        { steps: props.steps, edges: props.edges },
        OVERVIEW_FRAME,
        codeFontMetrics()
      ),
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
    <div
      className="cube-Dag-overview"
      data-testid="cube-dag-overview"
      role="button"
      tabIndex={0}
      title="Open the graph large: pan, zoom, open a step's notebook"
      aria-label="Pipeline graph: open it large"
      onClick={props.onOpen}
      onKeyDown={event => {
        if (event.key === 'Enter' || event.key === ' ') {
          event.preventDefault();
          props.onOpen();
        }
      }}
    >
      <svg
        className="cube-Dag"
        data-testid="cube-dag"
        viewBox={`0 0 ${layout.width} ${layout.height}`}
        width={layout.width}
        height={layout.height}
        aria-hidden="true"
      >
        <DagDrawing layout={layout} states={props.states} />
      </svg>
    </div>
  );
}
