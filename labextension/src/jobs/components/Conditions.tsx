/**
 * A job's operator conditions (Created, Running, Succeeded, Failed, Ready), oldest first,
 * as `kubectl describe` lists them, less those a later one replaced (`currentConditions`):
 * a finished job shows no "Running False … is running.".
 */
import * as React from 'react';

import { Table } from '../../common/components/Table';
import { currentConditions, localTime } from '../format';
import type { IJobCondition } from '../types';

export function Conditions(props: {
  conditions: readonly IJobCondition[];
}): JSX.Element {
  const shown = currentConditions(props.conditions);
  if (shown.length === 0) {
    return <div className="cube-Jobs-empty">No conditions reported yet.</div>;
  }
  return (
    <Table
      className="cube-JobTable"
      testid="cube-job-conditions"
      columns={['Type', 'Status', 'Reason', 'Message', 'Since']}
    >
      {shown.map(c => (
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
    </Table>
  );
}
