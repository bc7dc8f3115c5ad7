/**
 * The pipeline's DAG, large: laid out for the space it has, fitted to it, then panned
 * by dragging and zoomed with the wheel (around the cursor), the +/−/Fit buttons or the
 * keyboard (+, −, 0, arrows). It keeps fitting a changing graph until the user moves it.
 */
import { ToolbarButtonComponent } from '@jupyterlab/ui-components';
import * as React from 'react';

import { layoutToFit } from '../layout';
import { codeFontMetrics } from '../textMetrics';
import type { IEdge, IStep, StepStatus } from '../types';
import { fitView, ISize, IView, panBy, zoomAt } from '../viewport';
import { DagDrawing } from './DagDrawing';

export interface IDagCanvasProps {
  steps: readonly IStep[];
  edges: readonly IEdge[];
  states: ReadonlyMap<string, StepStatus>;
  onStepClick?: (step: string) => void;
}

const BUTTON_ZOOM = 1.25;
/** The wheel zooms by e^(rate × pixels scrolled): a notch of 100px is about 16%. */
const WHEEL_ZOOM_RATE = 0.0015;
/** A wheel that scrolls by lines: pixels per line. */
const WHEEL_LINE = 16;
const KEY_PAN = 60;
/** A press that moves less than this is a click, not a drag. */
const DRAG_THRESHOLD = 4;

/** The size of an element, kept up to date. */
function useSize(ref: React.RefObject<HTMLElement>): ISize | null {
  const [size, setSize] = React.useState<ISize | null>(null);
  React.useEffect(() => {
    const node = ref.current;
    if (!node) {
      return;
    }
    const observer = new ResizeObserver(() => {
      const { width, height } = node.getBoundingClientRect();
      if (width > 0 && height > 0) {
        setSize(old =>
          old && old.width === width && old.height === height
            ? old
            : { width, height }
        );
      }
    });
    observer.observe(node);
    return () => observer.disconnect();
  }, [ref]);
  return size;
}

export function DagCanvas(props: IDagCanvasProps): JSX.Element {
  const frame = React.useRef<HTMLDivElement>(null);
  const size = useSize(frame);
  const { steps, edges } = props;
  const layout = React.useMemo(
    () =>
      size ? layoutToFit({ steps, edges }, size, codeFontMetrics()) : null,
    [steps, edges, size]
  );
  const [view, setView] = React.useState<IView | null>(null);
  /** Fit whatever is drawn until the user pans or zooms. */
  const following = React.useRef(true);
  /** The last press was a drag: the click that ends it opens nothing. */
  const dragged = React.useRef(false);

  React.useEffect(() => {
    if (layout && size && (following.current || !view)) {
      setView(fitView(layout, size));
    }
  }, [layout, size]);

  const move = React.useCallback((change: (v: IView) => IView) => {
    following.current = false;
    setView(v => (v ? change(v) : v));
  }, []);
  const zoomCentre = (factor: number) =>
    size && move(v => zoomAt(v, factor, size.width / 2, size.height / 2));
  const fit = () => {
    following.current = true;
    if (layout && size) {
      setView(fitView(layout, size));
    }
  };

  // React's wheel listeners are passive: this one must stop the page from scrolling.
  React.useEffect(() => {
    const node = frame.current;
    if (!node) {
      return;
    }
    const onWheel = (event: WheelEvent) => {
      event.preventDefault();
      const box = node.getBoundingClientRect();
      const pixels =
        event.deltaMode === WheelEvent.DOM_DELTA_LINE ? WHEEL_LINE : 1;
      const factor = Math.exp(-event.deltaY * pixels * WHEEL_ZOOM_RATE);
      move(v =>
        zoomAt(v, factor, event.clientX - box.left, event.clientY - box.top)
      );
    };
    node.addEventListener('wheel', onWheel, { passive: false });
    return () => node.removeEventListener('wheel', onWheel);
  }, [move]);

  const onPointerDown = (event: React.PointerEvent) => {
    if (event.button !== 0) {
      return;
    }
    dragged.current = false;
    const start = { x: event.clientX, y: event.clientY };
    const onMove = (e: PointerEvent) => {
      const dx = e.clientX - start.x;
      const dy = e.clientY - start.y;
      if (!dragged.current && Math.hypot(dx, dy) < DRAG_THRESHOLD) {
        return;
      }
      dragged.current = true;
      start.x = e.clientX;
      start.y = e.clientY;
      move(v => panBy(v, dx, dy));
    };
    // On the window, not captured: a click on a step must still reach the step.
    const onUp = () => {
      window.removeEventListener('pointermove', onMove);
      window.removeEventListener('pointerup', onUp);
    };
    window.addEventListener('pointermove', onMove);
    window.addEventListener('pointerup', onUp);
  };

  const onKeyDown = (event: React.KeyboardEvent) => {
    const pans: Record<string, [number, number]> = {
      ArrowLeft: [KEY_PAN, 0],
      ArrowRight: [-KEY_PAN, 0],
      ArrowUp: [0, KEY_PAN],
      ArrowDown: [0, -KEY_PAN]
    };
    if (event.target !== event.currentTarget) {
      return; // a step or a button has the key
    }
    if (event.key === '+' || event.key === '=') {
      zoomCentre(BUTTON_ZOOM);
    } else if (event.key === '-') {
      zoomCentre(1 / BUTTON_ZOOM);
    } else if (event.key === '0') {
      fit();
    } else if (pans[event.key]) {
      const [dx, dy] = pans[event.key];
      move(v => panBy(v, dx, dy));
    } else {
      return;
    }
    event.preventDefault();
  };

  const onStepClick = props.onStepClick;
  return (
    <div className="cube-DagCanvas">
      <div
        ref={frame}
        className="cube-DagCanvas-frame"
        data-testid="cube-dag-canvas"
        tabIndex={0}
        role="application"
        aria-label="Pipeline graph: drag or use the arrow keys to pan; wheel, + and − to zoom; 0 to fit"
        onPointerDown={onPointerDown}
        onKeyDown={onKeyDown}
      >
        <svg className="cube-Dag cube-mod-large" data-testid="cube-dag">
          {layout && view && (
            <g
              data-testid="cube-dag-viewport"
              data-direction={layout.direction}
              transform={`translate(${view.x} ${view.y}) scale(${view.k})`}
            >
              <DagDrawing
                layout={layout}
                states={props.states}
                onStepClick={
                  onStepClick &&
                  (step => {
                    if (!dragged.current) {
                      onStepClick(step);
                    }
                  })
                }
              />
            </g>
          )}
        </svg>
      </div>
      <div className="cube-DagCanvas-controls" role="toolbar">
        <ToolbarButtonComponent
          label="+"
          tooltip="Zoom in (+)"
          dataset={{ testid: 'cube-dag-zoom-in' }}
          onClick={() => zoomCentre(BUTTON_ZOOM)}
        />
        <ToolbarButtonComponent
          label="−"
          tooltip="Zoom out (−)"
          dataset={{ testid: 'cube-dag-zoom-out' }}
          onClick={() => zoomCentre(1 / BUTTON_ZOOM)}
        />
        <ToolbarButtonComponent
          label="Fit"
          tooltip="Show the whole graph (0)"
          dataset={{ testid: 'cube-dag-fit' }}
          onClick={fit}
        />
        <span className="cube-DagCanvas-zoom" data-testid="cube-dag-zoom">
          {view ? `${Math.round(view.k * 100)}%` : ''}
        </span>
      </div>
    </div>
  );
}
