/**
 * The utilization and memory of one GPU holder (a device or a pod) as a card shows
 * them: two bars with the current figures, and two charts with their recent history.
 */
import * as React from 'react';

import { formatMemory, formatMiB, formatPct, fraction } from '../format';
import { Bar } from './Bar';
import { LineChart } from './LineChart';

/** The current figures, as the server reported them. */
export interface IUsageNow {
  utilization_pct: number | null;
  memory_used_mib: number | null;
  memory_total_mib: number | null;
}

/** The recent history of the figures, oldest first, and the window it spans. */
export interface IUsageHistory {
  utilization: readonly (readonly [number, number])[];
  memory: readonly (readonly [number, number])[];
  from: number;
  to: number;
}

/** Utilization and memory bars; `testid` prefixes their test ids (`-util`, `-memory`). */
export function UsageBars(props: {
  usage: IUsageNow;
  testid: string;
}): JSX.Element {
  const u = props.usage;
  return (
    <>
      <Bar
        label="Utilization"
        fraction={fraction(u.utilization_pct, 100)}
        text={formatPct(u.utilization_pct)}
        testid={`${props.testid}-util`}
      />
      <Bar
        label="Memory"
        fraction={fraction(u.memory_used_mib, u.memory_total_mib)}
        text={formatMemory(u.memory_used_mib, u.memory_total_mib)}
        testid={`${props.testid}-memory`}
      />
    </>
  );
}

/**
 * Utilization and memory charts; the memory chart's scale is the total memory, or the
 * highest point when the total is not known.
 */
export function UsageCharts(props: {
  usage: IUsageNow;
  history: IUsageHistory;
}): JSX.Element {
  const { usage, history } = props;
  const memoryMax = usage.memory_total_mib ?? maxOf(history.memory) ?? 0;
  return (
    <div className="cube-GpuCard-charts">
      <LineChart
        label="Utilization"
        metric="utilization_pct"
        points={history.utilization}
        from={history.from}
        to={history.to}
        max={100}
        current={formatPct(usage.utilization_pct)}
        format={formatPct}
      />
      <LineChart
        label="Memory"
        metric="memory_used_mib"
        points={history.memory}
        from={history.from}
        to={history.to}
        max={memoryMax}
        current={formatMiB(usage.memory_used_mib)}
        format={formatMiB}
      />
    </div>
  );
}

function maxOf(points: readonly (readonly [number, number])[]): number | null {
  return points.length ? Math.max(...points.map(p => p[1])) : null;
}
