/**
 * The admin's "every user's" switch of a list (notebook servers, jobs, GPU pods): lists
 * are asked for with `?all=1` while it is on. Shown only to admins, as the server says.
 */
import * as React from 'react';

/** A list an admin may widen to every user's. */
export interface IAllUsersScope {
  /** Whether the server says the caller is an admin. */
  readonly isAdmin: boolean;
  /** Whether every user's items are listed. */
  allUsers: boolean;
}

export interface IAllUsersToggleProps {
  scope: IAllUsersScope;
  label: string;
  testid: string;
}

export function AllUsersToggle(
  props: IAllUsersToggleProps
): JSX.Element | null {
  const { scope } = props;
  if (!scope.isAdmin) {
    return null;
  }
  return (
    <label className="cube-NotebookServers-allUsers">
      <input
        type="checkbox"
        data-testid={props.testid}
        checked={scope.allUsers}
        onChange={event => {
          scope.allUsers = event.target.checked;
        }}
      />
      {props.label}
    </label>
  );
}
