/**
 * An error shown where the user acted: the server's message, announced to screen
 * readers, with the field it names (if any) as `data-field` for tests and styling.
 */
import * as React from 'react';

export interface IErrorMessageProps {
  message: string | null | undefined;
  testid: string;
  field?: string | null;
}

export function ErrorMessage(props: IErrorMessageProps): JSX.Element | null {
  if (!props.message) {
    return null;
  }
  return (
    <div
      className="cube-Error"
      role="alert"
      data-testid={props.testid}
      data-field={props.field ?? undefined}
    >
      {props.message}
    </div>
  );
}
