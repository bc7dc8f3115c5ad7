/**
 * Where the large DAG view shows the drawing: a translation and a scale, fitted to the
 * frame, zoomed around a point (the cursor) that stays where it is on screen.
 */
import { fitScale } from './layout';

/** The drawing translated by (x, y), then scaled by k. */
export interface IView {
  x: number;
  y: number;
  k: number;
}

export interface ISize {
  width: number;
  height: number;
}

export const MIN_ZOOM = 0.1;
export const MAX_ZOOM = 4;
/** Fitting never blows a small graph up more than this. */
const MAX_FIT_ZOOM = 1.5;
const FIT_PADDING = 24;

function clampZoom(k: number): number {
  return Math.min(MAX_ZOOM, Math.max(MIN_ZOOM, k));
}

/** The view that shows all of a drawing of `drawing` size, centred in `frame`. */
export function fitView(drawing: ISize, frame: ISize): IView {
  const inner = {
    width: Math.max(1, frame.width - 2 * FIT_PADDING),
    height: Math.max(1, frame.height - 2 * FIT_PADDING)
  };
  const k = clampZoom(Math.min(MAX_FIT_ZOOM, fitScale(drawing, inner)));
  return {
    k,
    x: (frame.width - drawing.width * k) / 2,
    y: (frame.height - drawing.height * k) / 2
  };
}

/** Zoom by `factor`, keeping the frame's point (px, py) over the same spot. */
export function zoomAt(
  view: IView,
  factor: number,
  px: number,
  py: number
): IView {
  const k = clampZoom(view.k * factor);
  const ratio = k / view.k;
  return { k, x: px - (px - view.x) * ratio, y: py - (py - view.y) * ratio };
}

/** Move the drawing by (dx, dy) on screen. */
export function panBy(view: IView, dx: number, dy: number): IView {
  return { ...view, x: view.x + dx, y: view.y + dy };
}
