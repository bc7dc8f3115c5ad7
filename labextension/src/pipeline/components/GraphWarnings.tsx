/**
 * The graph's warnings under the DAG: the notebook-wide ones first, then those about a
 * cell, each naming its cell; clicking one shows that cell in the notebook (active and
 * scrolled into view).
 */
import * as React from 'react';

import { warningIcon } from '../icons';
import type { IGraphWarning } from '../types';
import { cellLabel, sortWarnings } from '../warnings';

export interface IGraphWarningsProps {
  warnings: readonly IGraphWarning[];
  /** Show cell `index` (over all the notebook's cells) in the notebook. */
  onReveal: (index: number) => void;
}

export function GraphWarnings(props: IGraphWarningsProps): JSX.Element {
  return (
    <ul
      className="cube-Pipeline-warnings"
      data-testid="cube-graph-warnings"
      aria-label="Warnings"
    >
      {sortWarnings(props.warnings).map((warning, order) => {
        const { cell, message } = warning;
        return (
          <li
            key={`${cell ?? ''}:${order}`}
            className="cube-Pipeline-warning"
            data-testid="cube-graph-warning"
            data-cell={cell ?? ''}
          >
            {cell === null ? (
              <div className="cube-Pipeline-warningText">
                <warningIcon.react tag="span" elementSize="small" />
                <span className="cube-Pipeline-warningMessage">{message}</span>
              </div>
            ) : (
              <button
                type="button"
                className="cube-Pipeline-warningText cube-mod-cell"
                title={`Show ${cellLabel(cell).toLowerCase()} in the notebook`}
                onClick={() => props.onReveal(cell)}
              >
                <warningIcon.react tag="span" elementSize="small" />
                <span className="cube-Pipeline-warningCell">
                  {cellLabel(cell)}
                </span>
                <span className="cube-Pipeline-warningMessage">{message}</span>
              </button>
            )}
          </li>
        );
      })}
    </ul>
  );
}
