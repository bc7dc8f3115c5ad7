"""Recent GPU readings kept in memory, and how long something has held a GPU without using it.

The local backend samples NVML every few seconds; charts want the last minutes of each GPU's
utilization and memory and of each kernel's memory. `SampleHistory` keeps them per series in a ring
bounded by age and by count, so a server that runs for weeks uses the same memory as one that just
started. Idle detection ("held GPU memory at 0% for 30 min") must look further back than a chart
does, so it keeps one timestamp per key instead of points (`IdleTracker`); on the Prometheus path the
same question is answered from a `query_range` (`trailing_idle_seconds`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cube_jupyter.gpu.model import Series

Metric = str  # "utilization_pct" | "memory_used_mib"
Point = tuple[float, float]


class SampleHistory:
    """Bounded rings of (time, value) per (series key, metric)."""

    def __init__(self, max_age_seconds: float, sample_seconds: float) -> None:
        self.max_age_seconds = max_age_seconds
        # Twice the points the age allows: a sampler running early never drops what is still young.
        self.max_points = max(2, 2 * math.ceil(max_age_seconds / sample_seconds) + 2)
        self._rings: dict[tuple[str, Metric], deque[Point]] = {}

    def add(self, key: str, metric: Metric, timestamp: float, value: float | None) -> None:
        """Record one reading; a value the source did not report is skipped, not stored as 0."""
        if value is None:
            return
        ring = self._rings.get((key, metric))
        if ring is None:
            ring = self._rings[(key, metric)] = deque(maxlen=self.max_points)
        ring.append((timestamp, float(value)))
        self._expire(ring, timestamp)

    def series(self, keys: Iterable[str] | None, seconds: float, now: float) -> list[Series]:
        """The points of the last `seconds` of the series of `keys` (every key when None), sorted."""
        wanted = None if keys is None else set(keys)
        since = now - seconds
        result = []
        for (key, metric), ring in sorted(self._rings.items()):
            if wanted is not None and key not in wanted:
                continue
            points = tuple(point for point in ring if point[0] >= since)
            if points:
                result.append(Series(key=key, metric=metric, points=points))  # type: ignore[arg-type]
        return result

    def forget(self, keep: Iterable[str], now: float) -> None:
        """Drop the series of keys not in `keep` whose newest point has aged out (kernels that ended)."""
        alive = set(keep)
        for ring_key in list(self._rings):
            ring = self._rings[ring_key]
            self._expire(ring, now)
            if ring_key[0] not in alive and not ring:
                del self._rings[ring_key]

    def __len__(self) -> int:
        return sum(len(ring) for ring in self._rings.values())

    def _expire(self, ring: deque[Point], now: float) -> None:
        while ring and ring[0][0] < now - self.max_age_seconds:
            ring.popleft()


@dataclass
class IdleSpell:
    """Since when a key has held GPU memory at 0% utilization, on which GPU."""

    since: float
    gpu: str
    memory_used_mib: float


class IdleTracker:
    """One `IdleSpell` per key while it lasts: memory held and utilization 0 in every observation.

    A reading with unknown utilization neither starts nor ends a spell; a busy reading or one without
    memory held ends it.
    """

    def __init__(self) -> None:
        self._spells: dict[str, IdleSpell] = {}

    def observe(
        self, key: str, gpu: str, timestamp: float, memory_used_mib: float | None, utilization: float | None
    ) -> None:
        if utilization is None:
            return
        holding = bool(memory_used_mib) and (memory_used_mib or 0) > 0
        if not holding or utilization > 0:
            self._spells.pop(key, None)
            return
        spell = self._spells.get(key)
        if spell is None:
            self._spells[key] = IdleSpell(timestamp, gpu, memory_used_mib or 0.0)
        else:
            spell.memory_used_mib = memory_used_mib or 0.0

    def idle_seconds(self, key: str, now: float) -> float:
        spell = self._spells.get(key)
        return max(0.0, now - spell.since) if spell else 0.0

    def spell(self, key: str) -> IdleSpell | None:
        return self._spells.get(key)

    def forget(self, keep: Iterable[str]) -> None:
        alive = set(keep)
        for key in [k for k in self._spells if k not in alive]:
            del self._spells[key]


def trailing_idle_seconds(utilization: Sequence[Point], memory: Sequence[Point], step: float) -> float:
    """How long, up to the newest point, memory was held (> 0) at 0% utilization, from two series
    sampled at the same instants `step` seconds apart (a Prometheus `query_range`); 0 when the
    newest point is busy. A gap of more than 1.5 steps ends the spell: the pod was gone meanwhile
    (a job's replica resubmitted under the same name is a new pod, idle only since it started)."""
    held = {t: v for t, v in memory}
    start = end = None
    for timestamp, value in reversed(utilization):
        if value > 0 or held.get(timestamp, 0.0) <= 0:
            break
        if start is not None and start - timestamp > 1.5 * step:
            break
        end = timestamp if end is None else end
        start = timestamp
    if start is None or end is None:
        return 0.0
    return end - start
