/**
 * What the server says of the timing typed: the schedule in words and its next fire
 * times, in the schedule's timezone (the UTC instant in the tooltip).
 */
import * as React from 'react';

import { formatFireTime } from '../format';
import type { IPreviewState } from '../preview';

export function PreviewBox(props: { state: IPreviewState }): JSX.Element {
  const { preview, loading, error } = props.state;
  return (
    <div
      className={`cube-SchedulePreview${loading ? ' cube-mod-stale' : ''}`}
      data-testid="cube-schedule-preview"
      aria-live="polite"
    >
      {preview && !error ? (
        <>
          <div
            className="cube-SchedulePreview-words"
            data-testid="cube-schedule-preview-describe"
          >
            {preview.describe}
          </div>
          {preview.next.length ? (
            <ol className="cube-SchedulePreview-next">
              {preview.next.map(time => (
                <li
                  key={time}
                  data-testid="cube-schedule-preview-time"
                  data-time={time}
                  title={time}
                >
                  {formatFireTime(time, preview.timezone)}
                </li>
              ))}
            </ol>
          ) : (
            <div className="cube-Schedules-empty">It never fires again.</div>
          )}
        </>
      ) : (
        <div className="cube-Schedules-empty">
          {loading
            ? 'Asking the server…'
            : error
              ? 'No preview: see the error above.'
              : 'Type when it runs to see its next times.'}
        </div>
      )}
    </div>
  );
}
