"""Metrics a trial prints, read the way Katib's StdOut collector reads them: `name=value` pairs.

Each line is searched with Katib's default filter (`tuning_spec.METRICS_FORMAT`); only the metrics the
experiment names (objective and additional) are kept, as Katib keeps them. Every report of the
objective is also an intermediate value for pruning: its step is the `epoch` or `step` printed on the
same line when there is one, else the number of reports so far (1, 2, ...). The trial's final value
follows Katib's default metric strategies: the best report of the objective (max when maximizing, min
when minimizing), the latest of any other metric.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from cube_jupyter.jobs.tuning_spec import METRICS_FORMAT

PAIR = re.compile(METRICS_FORMAT)
STEP_NAMES = ("epoch", "step")


@dataclass
class TrialMetrics:
    """Collects one trial's reports from its output, line by line."""

    objective: str
    maximize: bool
    additional: tuple[str, ...] = ()
    reports: dict[str, list[float]] = field(default_factory=dict)
    intermediate: list[tuple[int, float]] = field(default_factory=list)  # (step, objective value)
    _pending: str = ""

    def feed(self, text: str) -> list[tuple[int, float]]:
        """Add output text (any chunking); the objective's new intermediate values, in order."""
        *lines, self._pending = (self._pending + text).split("\n")
        new: list[tuple[int, float]] = []
        for line in lines:
            point = self._line(line)
            if point is not None:
                new.append(point)
        return new

    def close(self) -> list[tuple[int, float]]:
        """The last, unterminated line counts too once the trial has ended."""
        rest, self._pending = self._pending, ""
        point = self._line(rest) if rest else None
        return [point] if point is not None else []

    def _line(self, line: str) -> tuple[int, float] | None:
        wanted = {self.objective, *self.additional}
        found: dict[str, float] = {}
        step: int | None = None
        for match in PAIR.finditer(line):
            name, raw = match.group(1), match.group(2)
            try:
                value = float(raw)
            except ValueError:
                continue  # `name=` with no number
            if not math.isfinite(value):
                continue
            if name in STEP_NAMES and value.is_integer():
                step = int(value)
            if name in wanted:
                found[name] = value
        for name, value in found.items():
            self.reports.setdefault(name, []).append(value)
        if self.objective not in found:
            return None
        point = (step if step is not None else len(self.reports[self.objective]), found[self.objective])
        self.intermediate.append(point)
        return point

    @property
    def objective_value(self) -> float | None:
        values = self.reports.get(self.objective)
        if not values:
            return None
        return max(values) if self.maximize else min(values)

    def values(self) -> dict[str, float]:
        """The trial's metrics: the objective by its strategy, the others' latest report."""
        result = {name: values[-1] for name, values in self.reports.items() if values}
        best = self.objective_value
        if best is not None:
            result[self.objective] = best
        return result
