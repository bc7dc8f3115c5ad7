/**
 * The caller's earlier runs of this notebook, newest first; picking one shows its steps
 * (and colours the graph by them).
 */
import * as React from 'react';

import { StatusBadge } from '../../common/components/StatusBadge';
import { formatAge, formatDate } from '../../common/format';
import type { IRun } from '../types';

export interface IRunHistoryProps {
  runs: readonly IRun[];
  selected: string | null;
  now: number;
  onSelect: (id: string) => void;
}

export function RunHistory(props: IRunHistoryProps): JSX.Element {
  if (props.runs.length === 0) {
    return (
      <div className="cube-Pipeline-empty">No runs of this notebook yet.</div>
    );
  }
  return (
    <ul className="cube-RunHistory" data-testid="cube-run-history">
      {props.runs.map(run => (
        <li key={run.id}>
          <button
            type="button"
            className={`cube-RunHistory-row${run.id === props.selected ? ' cube-mod-selected' : ''}`}
            data-testid="cube-history-row"
            data-run={run.id}
            data-status={run.status}
            title={formatDate(run.created)}
            onClick={() => props.onSelect(run.id)}
          >
            <span className="cube-RunHistory-id">{run.id}</span>
            <span className="cube-RunHistory-age">
              {formatAge(run.created, props.now)}
            </span>
            <StatusBadge status={run.status} testid="cube-history-status" />
          </button>
        </li>
      ))}
    </ul>
  );
}
