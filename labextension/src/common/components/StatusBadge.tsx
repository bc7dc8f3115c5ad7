/**
 * A coloured pill with a status (a server's, a run's or a step's); colours come from
 * the theme's semantic variables (see style/base.css) so light and dark themes both
 * read well.
 */
import * as React from 'react';

export interface IStatusBadgeProps {
  status: string;
  /** `data-testid` of the pill; the server list's by default. */
  testid?: string;
}

export function StatusBadge(props: IStatusBadgeProps): JSX.Element {
  return (
    <span
      className={`cube-StatusBadge cube-mod-${props.status}`}
      data-testid={props.testid ?? 'cube-server-status'}
      data-status={props.status}
    >
      {props.status}
    </span>
  );
}
