/**
 * The top bar of every workbench panel: its title (with a note beside it, such as where
 * the figures come from), then the panel's own controls, such as `RefreshButton`.
 */
import { refreshIcon, ToolbarButtonComponent } from '@jupyterlab/ui-components';
import * as React from 'react';

export interface IPanelHeaderProps {
  title: string;
  /** Beside the title. */
  note?: React.ReactNode;
  /** Added to the header's class. */
  className?: string;
  /** The panel's controls, after the title. */
  children?: React.ReactNode;
}

export function PanelHeader(props: IPanelHeaderProps): JSX.Element {
  const title = <h2 className="cube-NotebookServers-title">{props.title}</h2>;
  return (
    <header
      className={`cube-NotebookServers-header${props.className ? ` ${props.className}` : ''}`}
    >
      {props.note === undefined ? (
        title
      ) : (
        <div className="cube-PanelHeader-heading">
          {title}
          {props.note}
        </div>
      )}
      {props.children}
    </header>
  );
}

export interface IRefreshButtonProps {
  tooltip: string;
  testid: string;
  onClick: () => void;
}

/** Fetch the panel's data again now. */
export function RefreshButton(props: IRefreshButtonProps): JSX.Element {
  return (
    <ToolbarButtonComponent
      icon={refreshIcon}
      tooltip={props.tooltip}
      dataset={{ testid: props.testid }}
      onClick={props.onClick}
    />
  );
}

/** A section's heading, with a short note (a count, a user, "updating…") beside it. */
export function SectionTitle(props: {
  children: React.ReactNode;
  note?: React.ReactNode;
  level?: 3 | 4;
}): JSX.Element {
  const Heading = props.level === 4 ? 'h4' : 'h3';
  return (
    <Heading className="cube-NotebookServers-subtitle">
      {props.children}
      {(props.note === 0 || !!props.note) && (
        <span className="cube-NotebookServers-user">{props.note}</span>
      )}
    </Heading>
  );
}
