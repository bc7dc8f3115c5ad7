/**
 * A labelled horizontal bar: a current figure (utilization, memory, quota) at a glance.
 */
import * as React from 'react';

export interface IBarProps {
  label: string;
  /** 0..1 */
  fraction: number;
  text: string;
  testid: string;
  /** Extra modifier class, e.g. `cube-mod-full` when a quota is used up. */
  mod?: string;
  title?: string;
}

export function Bar(props: IBarProps): JSX.Element {
  const pct = Math.round(props.fraction * 100);
  return (
    <div
      className={`cube-GpuBar${props.mod ? ` ${props.mod}` : ''}`}
      data-testid={props.testid}
      title={props.title}
    >
      <span className="cube-GpuBar-label">{props.label}</span>
      <span
        className="cube-GpuBar-track"
        role="meter"
        aria-label={props.label}
        aria-valuemin={0}
        aria-valuemax={100}
        aria-valuenow={pct}
      >
        <span className="cube-GpuBar-fill" style={{ width: `${pct}%` }} />
      </span>
      <span className="cube-GpuBar-text" data-testid={`${props.testid}-text`}>
        {props.text}
      </span>
    </div>
  );
}
