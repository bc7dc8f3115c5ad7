/**
 * One notebook server in the list: name, status, profile, resources, age, the
 * server's reason when it is not running (a queued one's place and what it waits
 * for), its actions, and the error of the last action taken on it.
 */
import { Button } from '@jupyterlab/ui-components';
import * as React from 'react';

import { ErrorMessage } from '../../common/components/ErrorMessage';
import { StatusBadge } from '../../common/components/StatusBadge';
import { formatAge, formatDate } from '../../common/format';
import { queueLine, resourceParts } from '../format';
import type { IServer } from '../types';

export interface IServerRowProps {
  server: IServer;
  /** Shown when the row belongs to someone else (an admin's view). */
  showUser: boolean;
  busy: boolean;
  error: string | null;
  now: number;
  onConnect: (server: IServer) => void;
  onStop: (server: IServer) => void;
  onStart: (server: IServer) => void;
  onDelete: (server: IServer) => void;
}

/** The buttons after Connect, in the order the server's `actions` may offer them. */
const LIFECYCLE_ACTIONS: ReadonlyArray<{
  name: 'stop' | 'start' | 'delete';
  label: string;
  className: string;
  handler: 'onStop' | 'onStart' | 'onDelete';
}> = [
  { name: 'stop', label: 'Stop', className: 'cube-Button', handler: 'onStop' },
  {
    name: 'start',
    label: 'Start',
    className: 'cube-Button',
    handler: 'onStart'
  },
  {
    name: 'delete',
    label: 'Delete',
    className: 'cube-Button cube-mod-danger',
    handler: 'onDelete'
  }
];

export function ServerRow(props: IServerRowProps): JSX.Element {
  const { server, busy } = props;
  const status = server.status;
  const resources = resourceParts(server.resources);
  const age = formatAge(server.created, props.now);
  const created = formatDate(server.created);
  const activity = formatDate(server.last_activity);
  // The server decides what may be done (no business rules here): show exactly its actions.
  const actions = new Set(server.actions ?? []);
  const canConnect = actions.has('connect') && !!server.url;
  const queued = queueLine(server);
  return (
    <li
      className="cube-ServerRow"
      data-testid="cube-server-row"
      data-name={server.name}
      data-status={status}
    >
      <div className="cube-ServerRow-head">
        <span className="cube-ServerRow-name" title={server.image}>
          {props.showUser ? `${server.user}/${server.name}` : server.name}
        </span>
        <StatusBadge status={status} />
      </div>
      <div className="cube-ServerRow-meta">
        <span
          className="cube-ServerRow-profile"
          data-testid="cube-server-profile"
        >
          {server.profile}
        </span>
        {resources.map(part => (
          <span key={part} className="cube-ServerRow-resource">
            {part}
          </span>
        ))}
        {age && (
          <span
            className="cube-ServerRow-age"
            data-testid="cube-server-age"
            title={
              activity
                ? `Created ${created}; last activity ${activity}`
                : `Created ${created}`
            }
          >
            {age}
          </span>
        )}
      </div>
      {queued && (
        <div className="cube-ServerRow-reason" data-testid="cube-server-queue">
          {queued}
        </div>
      )}
      {status !== 'running' && server.reason && (
        <div className="cube-ServerRow-reason" data-testid="cube-server-reason">
          {server.reason}
        </div>
      )}
      <div className="cube-ServerRow-actions">
        {canConnect && (
          <Button
            small
            className="cube-Button cube-mod-accept"
            data-testid="cube-server-connect"
            disabled={busy}
            title={`Open ${server.name} in a new browser tab`}
            onClick={() => props.onConnect(server)}
          >
            Connect
          </Button>
        )}
        {LIFECYCLE_ACTIONS.filter(action => actions.has(action.name)).map(
          action => (
            <Button
              key={action.name}
              small
              minimal
              className={action.className}
              data-testid={`cube-server-${action.name}`}
              disabled={busy}
              onClick={() => props[action.handler](server)}
            >
              {action.label}
            </Button>
          )
        )}
      </div>
      <ErrorMessage message={props.error} testid="cube-server-error" />
    </li>
  );
}
