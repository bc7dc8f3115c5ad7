/**
 * The tables of the panels (kernels, pods, processes, conditions, jobs, trials): a
 * header row from a list of columns, and the rows the caller renders.
 */
import * as React from 'react';

/** A column: its heading, or its heading with a number alignment and a tooltip. */
export type Column =
  string | { label: React.ReactNode; numeric?: boolean; title?: string };

export interface ITableProps {
  className: string;
  testid?: string;
  /** The columns; `false` leaves one out (e.g. a column only admins see). */
  columns: readonly (Column | false)[];
  caption?: string;
  /** The rows (`<tr>`s). */
  children: React.ReactNode;
}

export function Table(props: ITableProps): JSX.Element {
  return (
    <table className={props.className} data-testid={props.testid}>
      {props.caption && <caption>{props.caption}</caption>}
      <thead>
        <tr>
          {props.columns.map((column, i) =>
            column === false ? null : typeof column === 'string' ? (
              <th key={i}>{column}</th>
            ) : (
              <th
                key={i}
                className={column.numeric ? 'cube-mod-number' : undefined}
                title={column.title}
              >
                {column.label}
              </th>
            )
          )}
        </tr>
      </thead>
      <tbody>{props.children}</tbody>
    </table>
  );
}
