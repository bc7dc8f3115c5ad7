/**
 * The notebook's code cells with the step each belongs to (as the server computed it)
 * and an editor of the cell's own role: start a step (with its name), the same as the
 * cell above (untagged, or Kale's empty `block:`), imports, functions, parameters,
 * metrics or skip. Edits rewrite the cell's tags in the notebook model; the server is
 * then asked for the graph again. A cell the graph's warnings are about carries a
 * warning mark, the messages as its tooltip.
 */
import { HTMLSelect } from '@jupyterlab/ui-components';
import * as React from 'react';

import { ErrorMessage } from '../../common/components/ErrorMessage';
import { warningIcon } from '../icons';
import type { CellRole } from '../tags';

/** What the editor needs of one code cell. */
export interface ICellInfo {
  /** Index among all the notebook's cells (as in `Step.cells`). */
  index: number;
  preview: string;
  role: CellRole;
  /** The cell's own `step:` name, for role `step`. */
  stepTag: string;
  /** The step the server put the cell in, if any. */
  step: string | null;
  /** Whether the cell is that step's first (the one that opens it). */
  opens: boolean;
  /** An error the server named this cell in (e.g. `cells[3].tags`). */
  error: string | null;
  /** The graph's warnings about this cell. */
  warnings: readonly string[];
}

/** A role to pick, and how it reads. */
export interface IRoleChoice {
  value: CellRole;
  label: string;
}

export interface ICellStepsProps {
  cells: readonly ICellInfo[];
  /** The roles a cell may take (the server's tag vocabulary). */
  roles: readonly IRoleChoice[];
  onRole: (index: number, role: CellRole, step: string) => void;
  onReveal: (index: number) => void;
}

export function CellSteps(props: ICellStepsProps): JSX.Element {
  if (props.cells.length === 0) {
    return (
      <div className="cube-Pipeline-empty">
        This notebook has no code cells.
      </div>
    );
  }
  return (
    <ol className="cube-CellSteps" data-testid="cube-cell-steps">
      {props.cells.map(cell => (
        <CellRow
          key={cell.index}
          cell={cell}
          roles={props.roles}
          onRole={props.onRole}
          onReveal={props.onReveal}
        />
      ))}
    </ol>
  );
}

interface ICellRowProps {
  cell: ICellInfo;
  roles: readonly IRoleChoice[];
  onRole: (index: number, role: CellRole, step: string) => void;
  onReveal: (index: number) => void;
}

function CellRow(props: ICellRowProps): JSX.Element {
  const { cell } = props;
  const [name, setName] = React.useState(cell.stepTag);
  // Follow tag edits made elsewhere (the cell's property inspector, undo).
  React.useEffect(() => setName(cell.stepTag), [cell.stepTag]);

  const commitName = () => {
    const trimmed = name.trim();
    if (trimmed !== cell.stepTag) {
      props.onRole(cell.index, 'step', trimmed);
    }
  };
  const changeRole = (role: CellRole) => {
    if (role === 'step') {
      const suggested = cell.stepTag || cell.step || `step-${cell.index}`;
      setName(suggested);
      props.onRole(cell.index, role, suggested);
    } else {
      props.onRole(cell.index, role, '');
    }
  };
  const warned = cell.warnings.length > 0;
  // A cell that does not open its step continues it (untagged, an empty `block:`, or
  // its tag names the step again): drawn lighter.
  const stepTitle = cell.opens
    ? `Starts step ${cell.step}`
    : cell.role === 'step'
      ? `In step ${cell.step}: its tag names that step again`
      : `Continues step ${cell.step}`;
  const rowClass = cell.error
    ? ' cube-mod-invalid'
    : warned
      ? ' cube-mod-warned'
      : '';
  return (
    <li
      className={`cube-CellRow${rowClass}`}
      data-testid="cube-cell-row"
      data-cell={cell.index}
      data-role={cell.role}
      data-step={cell.step ?? ''}
    >
      <button
        type="button"
        className="cube-CellRow-head"
        title="Show this cell in the notebook"
        onClick={() => props.onReveal(cell.index)}
      >
        <span className="cube-CellRow-index">[{cell.index}]</span>
        <code className="cube-CellRow-preview">
          {cell.preview || '(empty)'}
        </code>
        {warned && (
          <span
            className="cube-CellRow-warning"
            data-testid="cube-cell-warning"
            title={cell.warnings.join('\n')}
            aria-label={`Warning: ${cell.warnings.join(' ')}`}
          >
            <warningIcon.react tag="span" elementSize="small" />
          </span>
        )}
        {cell.step && (
          <span
            className={`cube-CellRow-step${cell.opens ? '' : ' cube-mod-continues'}`}
            data-testid="cube-cell-step"
            title={stepTitle}
          >
            {cell.step}
          </span>
        )}
      </button>
      <div className="cube-CellRow-editor">
        <HTMLSelect
          aria-label={`Role of cell ${cell.index}`}
          data-testid="cube-cell-role"
          value={cell.role}
          onChange={event => changeRole(event.target.value)}
          options={[...props.roles]}
        />
        {cell.role === 'step' && (
          <input
            className="jp-mod-styled cube-CellRow-name"
            data-testid="cube-cell-step-name"
            aria-label={`Step name of cell ${cell.index}`}
            type="text"
            spellCheck={false}
            value={name}
            onChange={event => setName(event.target.value)}
            onBlur={commitName}
            onKeyDown={event => {
              if (event.key === 'Enter') {
                commitName();
              } else if (event.key === 'Escape') {
                setName(cell.stepTag);
              }
            }}
          />
        )}
      </div>
      <ErrorMessage message={cell.error} testid="cube-cell-error" />
    </li>
  );
}
