/** The graph's warnings as the panel lists them and marks its cells. */
import { describe, expect, it } from 'vitest';

import type { IGraphWarning } from '../src/pipeline/types';
import {
  cellLabel,
  sortWarnings,
  warningsByCell
} from '../src/pipeline/warnings';

/** As `POST /pipelines/graph` sends them (cube_jupyter/pipelines/tags.py's wording). */
const WARNINGS: IGraphWarning[] = [
  {
    message: "cell 4 is a skip cell, so its tags 'prev:one' are ignored",
    cell: 4
  },
  {
    message: 'metadata.kubeflow_notebook.volumes is ignored: ...',
    cell: null
  },
  {
    message: 'cell 1 has code before the first tagged cell, so no step runs it',
    cell: 1
  },
  {
    message: "cell 4: Kale's tag 'secret:creds:token:TOKEN' is ignored",
    cell: 4
  }
];

describe('sortWarnings', () => {
  it('lists the notebook-wide ones first, then by cell, each group as sent', () => {
    expect(sortWarnings(WARNINGS).map(w => w.cell)).toEqual([null, 1, 4, 4]);
    const [, , first, second] = sortWarnings(WARNINGS);
    expect(first.message).toContain('skip cell');
    expect(second.message).toContain('secret:');
  });

  it('leaves what it is given as it was', () => {
    const given = [...WARNINGS];
    sortWarnings(given);
    expect(given).toEqual(WARNINGS);
    expect(sortWarnings([])).toEqual([]);
  });
});

describe('warningsByCell', () => {
  it("gathers each cell's messages; notebook-wide ones belong to none", () => {
    const byCell = warningsByCell(WARNINGS);
    expect([...byCell.keys()].sort()).toEqual([1, 4]);
    expect(byCell.get(4)).toEqual([WARNINGS[0].message, WARNINGS[3].message]);
    expect(byCell.get(0)).toBeUndefined();
  });

  it('counts cell 0 as a cell', () => {
    expect(warningsByCell([{ message: 'x', cell: 0 }]).get(0)).toEqual(['x']);
  });
});

describe('cellLabel', () => {
  it('names a cell by its index over all cells, as the Cells list does', () => {
    expect(cellLabel(0)).toBe('Cell 0');
    expect(cellLabel(12)).toBe('Cell 12');
  });
});
