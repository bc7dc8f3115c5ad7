/**
 * The graph's warnings as the panel shows them: the notebook-wide ones first, then by
 * cell; and, for the Cells list, each cell's own.
 */
import type { IGraphWarning } from './types';

/**
 * The warnings in the order to list them: those about no cell first, then by cell (the
 * server sends them so; this keeps the order whatever it sends), each group as sent.
 */
export function sortWarnings(
  warnings: readonly IGraphWarning[]
): IGraphWarning[] {
  const rank = (w: IGraphWarning) => (w.cell === null ? -1 : w.cell);
  return warnings
    .map((warning, order) => ({ warning, order }))
    .sort((a, b) => rank(a.warning) - rank(b.warning) || a.order - b.order)
    .map(({ warning }) => warning);
}

/** Each cell's warnings (by its index over all cells), in the order sent. */
export function warningsByCell(
  warnings: readonly IGraphWarning[]
): Map<number, string[]> {
  const byCell = new Map<number, string[]>();
  for (const { message, cell } of warnings) {
    if (cell !== null && cell !== undefined) {
      byCell.set(cell, [...(byCell.get(cell) ?? []), message]);
    }
  }
  return byCell;
}

/** How a cell is named in the panel: its index over all cells, as in the Cells list. */
export function cellLabel(index: number): string {
  return `Cell ${index}`;
}
