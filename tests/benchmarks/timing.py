"""Small helpers shared by the benchmarks: medians and a side-by-side table."""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable


def time_call(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


async def time_async(fn: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await fn()
    return time.perf_counter() - started


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median": statistics.median(ordered),
        "min": ordered[0],
        "max": ordered[-1],
        "p95": ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))],
        "runs": float(len(ordered)),
    }


def print_table(title: str, rows: list[tuple[str, list[float]]], unit: str = "s", baseline: str = "") -> None:
    """Print each row's median, min, max and p95, and its ratio to the `baseline` row's median."""
    scale = {"s": 1.0, "ms": 1e3, "us": 1e6, "MiB": 1.0}[unit]
    base = next((statistics.median(s) for name, s in rows if name == baseline), None)
    print(f"\n{title}")
    columns = ("median", "min", "max", "p95")
    print(f"  {'':52}" + "".join(f"{c:>13}" for c in columns) + f"{'runs':>6}{'vs baseline':>13}")
    for name, samples in rows:
        stats = summary(samples)
        ratio = f"{stats['median'] / base:.3g}x" if base else ""
        cells = "".join(f"{f'{stats[c] * scale:.2f} {unit}':>13}" for c in columns)
        print(f"  {name:52}{cells}{int(stats['runs']):>6}{ratio:>13}")
