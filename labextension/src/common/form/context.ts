/**
 * The error of a form, placed among its fields, given to the inputs inside it: each
 * input marks itself invalid, and each field shows the message, when it is theirs.
 */
import * as React from 'react';

import type { IPlacedError } from '../fieldError';

/** The form's placed error, for the fields inside it. */
export const PlacedErrorContext = React.createContext<IPlacedError | null>(
  null
);

/** The placed error of the form around the caller. */
export function usePlacedError(): IPlacedError | null {
  return React.useContext(PlacedErrorContext);
}
