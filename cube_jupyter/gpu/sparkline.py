"""Sparklines of recent GPU history as inline SVG: a few hundred bytes per update, no plotting library.

The monitor sends the SVG over the widget comm at every sample, so it must be small and the same
input must give the same string (an unchanged value sends nothing). The newest point sits at the
right edge and older points run left across `capacity` slots, so the line fills in as history grows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from cube_jupyter.errors import InvalidInput


@dataclass(frozen=True)
class SparkLine:
    """One series to draw: `values` oldest first (None: no reading, the line breaks there), scaled so
    that 0 is the bottom edge and `maximum` the top."""

    values: Sequence[float | None]
    maximum: float
    color: str
    label: str


def sparkline_svg(lines: Sequence[SparkLine], *, capacity: int, width: int = 180, height: int = 36) -> str:
    """An `<svg>` drawing each line as polylines over `capacity` evenly spaced slots."""
    if capacity < 2:
        raise InvalidInput(f"capacity {capacity} must be at least 2", field="capacity")
    if width < 1 or height < 1:
        raise InvalidInput(
            f"size {width}x{height} must be positive", field="width" if width < 1 else "height"
        )
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img">',
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="none" stroke="#ccc" stroke-width="1"/>',
    ]
    titles = []
    for line in lines:
        titles.append(escape(line.label))
        for segment in _segments(line, capacity=capacity, width=width, height=height):
            points = " ".join(f"{x:.1f},{y:.1f}" for x, y in segment)
            if len(segment) == 1:  # a lone reading between gaps: a dot, as a polyline cannot show it
                x, y = segment[0]
                parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="1.5" fill="{escape(line.color)}"/>')
            else:
                parts.append(
                    f'<polyline points="{points}" fill="none" stroke="{escape(line.color)}" '
                    'stroke-width="1.5" stroke-linejoin="round"/>'
                )
    if titles:
        parts.insert(1, f"<title>{' · '.join(titles)}</title>")
    parts.append("</svg>")
    return "".join(parts)


def _segments(line: SparkLine, *, capacity: int, width: int, height: int) -> list[list[tuple[float, float]]]:
    """The line's points in SVG coordinates, split where a value is missing."""
    values = list(line.values)[-capacity:]
    step = (width - 1) / (capacity - 1)
    first_slot = capacity - len(values)
    top = line.maximum if line.maximum > 0 else 1.0
    segments: list[list[tuple[float, float]]] = []
    current: list[tuple[float, float]] = []
    for offset, value in enumerate(values):
        if value is None:
            if current:
                segments.append(current)
            current = []
            continue
        fraction = min(max(value / top, 0.0), 1.0)
        x = 0.5 + (first_slot + offset) * step
        y = 0.5 + (1.0 - fraction) * (height - 1)
        current.append((x, y))
    if current:
        segments.append(current)
    return segments
