/**
 * A job's operator conditions (Created, Running, Succeeded, Failed, Ready), oldest first,
 * as `kubectl describe` lists them.
 */
import * as React from 'react';

import { localTime } from '../format';
import type { IJobCondition } from '../types';

export function Conditions(props: {
  conditions: readonly IJobCondition[];
}): JSX.Element {
  if (props.conditions.length === 0) {
    return <div className="cube-Jobs-empty">No conditions reported yet.</div>;
  }
  return (
    <table className="cube-JobTable" data-testid="cube-job-conditions">
      <thead>
        <tr>
          <th>Type</th>
          <th>Status</th>
          <th>Reason</th>
          <th>Message</th>
          <th>Since</th>
        </tr>
      </thead>
      <tbody>
        {props.conditions.map(c => (
          <tr
            key={`${c.type}-${c.last_transition_time}`}
            data-testid="cube-job-condition"
            data-type={c.type}
            data-status={c.status}
          >
            <td>{c.type}</td>
            <td>{c.status}</td>
            <td>{c.reason}</td>
            <td className="cube-JobTable-message">{c.message}</td>
            <td className="cube-JobTable-time">
              {localTime(c.last_transition_time)}
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}
