/**
 * A running job's GPU memory over the last minutes, from the GPU plugin's history of the
 * job (all its replicas): shown once any of its processes holds GPU memory.
 */
import * as React from 'react';

import { Sparkline } from '../../common/components/Sparkline';
import { formatMebibytes } from '../../common/format';
import type { GpuPoints, IGpuUsage } from '../../tokens';

export interface IGpuMemoryProps {
  usage: IGpuUsage;
  /** The history's key: `job:<user>/<name>`. */
  series: string;
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
    <span className="cube-JobDetail-gpu" data-testid="cube-job-gpu-memory">
      GPU memory{' '}
      <Sparkline
        points={points}
        label={`GPU memory of the job's processes: ${shown} now`}
        testid="cube-job-gpu-sparkline"
      />{' '}
      {shown}
    </span>
  );
}
