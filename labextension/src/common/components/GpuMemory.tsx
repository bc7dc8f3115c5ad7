/**
 * A running job's or pipeline step's GPU memory over the last minutes, from the GPU
 * plugin's history of it (a job: all its replicas): shown once any of its processes holds
 * GPU memory.
 */
import * as React from 'react';

import { formatMebibytes } from '../format';
import type { GpuPoints, IGpuUsage } from '../../tokens';
import { Sparkline } from './Sparkline';

export interface IGpuMemoryProps {
  usage: IGpuUsage;
  /** The history's key: `job:<user>/<name>` or `step:<run id>/<step>`. */
  series: string;
  /** What it is, for the hover text: "the job's processes". */
  whose: string;
}

export function GpuMemory(props: IGpuMemoryProps): JSX.Element | null {
  const [points, setPoints] = React.useState<GpuPoints>([]);
  React.useEffect(() => {
    const watch = props.usage.watchMemory(props.series, setPoints);
    return () => watch.dispose();
  }, [props.usage, props.series]);
  if (points.length === 0) {
    return null;
  }
  const shown = formatMebibytes(points[points.length - 1][1]);
  return (
    <span className="cube-GpuMemory" data-testid="cube-gpu-memory">
      GPU memory{' '}
      <Sparkline
        points={points}
        label={`GPU memory of ${props.whose}: ${shown} now`}
        testid="cube-gpu-memory-sparkline"
      />{' '}
      {shown}
    </span>
  );
}
