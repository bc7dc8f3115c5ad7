/**
 * Per-replica live logs: a replica picker (with each replica's state and exit code)
 * and the log, following the end while the reader is at the end.
 */
import { HTMLSelect } from '@jupyterlab/ui-components';
import * as React from 'react';

import { ErrorMessage } from '../../common/components/ErrorMessage';
import { logStateLabel } from '../format';
import type { ILogState } from '../logStream';
import type { IJobReplica } from '../types';

export interface ILogViewProps {
  replicas: readonly IJobReplica[];
  /** The log being read... */
  log: ILogState;
  /** ...and whether it is of this job's replicas (else none is shown yet). */
  mine: boolean;
  onPick: (replica: string) => void;
}

/** Within this many pixels of the bottom counts as reading the end. */
const AT_END = 24;

function replicaLabel(r: IJobReplica): string {
  const exit = r.exit_code === null ? '' : `, exit ${r.exit_code}`;
  const gpus = r.gpus ? `, ${r.gpus} GPU` : '';
  return `${r.name} (${r.state}${exit}${gpus})`;
}

export function LogView(props: ILogViewProps): JSX.Element {
  const { log, mine } = props;
  const replica = mine ? log.replica : null;
  const text = mine ? log.text : '';
  const pre = React.useRef<HTMLPreElement>(null);
  const atEnd = React.useRef(true);

  React.useLayoutEffect(() => {
    const node = pre.current;
    if (node && atEnd.current) {
      node.scrollTop = node.scrollHeight;
    }
  }, [text]);

  return (
    <div className="cube-LogView">
      <div className="cube-LogView-bar">
        <HTMLSelect
          aria-label="Replica"
          data-testid="cube-job-replica-select"
          value={replica ?? ''}
          onChange={event => {
            atEnd.current = true;
            props.onPick(event.target.value);
          }}
          options={props.replicas.map(r => ({
            value: r.name,
            label: replicaLabel(r)
          }))}
        />
        <span
          className={`cube-LogView-state cube-mod-${log.state}`}
          data-testid="cube-job-log-state"
          data-state={log.state}
        >
          {logStateLabel(
            log.state,
            props.replicas.find(r => r.name === replica)
          )}
        </span>
      </div>
      <ErrorMessage message={log.error} testid="cube-job-log-error" />
      <pre
        ref={pre}
        className="cube-LogView-text"
        data-testid="cube-job-log"
        data-replica={replica ?? ''}
        tabIndex={0}
        onScroll={event => {
          const node = event.currentTarget;
          atEnd.current =
            node.scrollHeight - node.scrollTop - node.clientHeight < AT_END;
        }}
      >
        {log.clipped && (
          <span className="cube-LogView-clipped">
            … (the start of the log is not shown)
            {'\n'}
          </span>
        )}
        {text}
      </pre>
    </div>
  );
}
