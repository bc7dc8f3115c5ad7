/**
 * The live preview of the form's timing: the server's words and next fire times for
 * what is typed, asked a moment after the last keystroke (`schedules/preview`); its 400
 * (a cron that does not parse, an unknown timezone) names the field at fault.
 */
import * as React from 'react';

import type { Query } from '../common/api';
import { fieldError, IFieldError } from '../common/fieldError';
import type { ScheduleClient } from './client';
import type { ISchedulePreview } from './types';

/** Wait after the last keystroke before asking for the preview (ms). */
export const PREVIEW_DEBOUNCE = 300;
/** How many fire times the preview lists. */
export const PREVIEW_COUNT = 5;

export interface IPreviewState {
  preview: ISchedulePreview | null;
  error: IFieldError | null;
  loading: boolean;
}

/**
 * The preview of `query` (null: nothing to preview yet); an answer to an older query
 * is dropped.
 */
export function usePreview(
  client: ScheduleClient,
  query: Query | null
): IPreviewState {
  const [state, setState] = React.useState<IPreviewState>({
    preview: null,
    error: null,
    loading: false
  });
  const key = query === null ? '' : JSON.stringify(query);
  React.useEffect(() => {
    if (query === null) {
      setState({ preview: null, error: null, loading: false });
      return;
    }
    let current = true;
    setState(s => ({ ...s, loading: true }));
    const timer = window.setTimeout(() => {
      client.preview({ ...query, count: PREVIEW_COUNT }).then(
        preview => {
          if (current) {
            setState({ preview, error: null, loading: false });
          }
        },
        error => {
          if (current) {
            setState({
              preview: null,
              error: fieldError(error),
              loading: false
            });
          }
        }
      );
    }, PREVIEW_DEBOUNCE);
    return () => {
      current = false;
      window.clearTimeout(timer);
    };
  }, [key]);
  return state;
}
