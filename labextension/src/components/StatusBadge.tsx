/**
 * A coloured pill with a server's status; colours come from the theme's semantic
 * variables (see style/base.css) so light and dark themes both read well.
 */
import * as React from 'react';

import type { ServerStatus } from '../types';

export interface IStatusBadgeProps {
  status: ServerStatus;
}

export function StatusBadge(props: IStatusBadgeProps): JSX.Element {
  return (
    <span
      className={`cube-StatusBadge cube-mod-${props.status}`}
      data-testid="cube-server-status"
      data-status={props.status}
    >
      {props.status}
    </span>
  );
}
