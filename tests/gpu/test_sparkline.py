"""The sparkline SVG: points placed by value and age, gaps where readings are missing, valid XML."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from cube_jupyter.errors import InvalidInput
from cube_jupyter.gpu.sparkline import SparkLine, sparkline_svg

SVG = "{http://www.w3.org/2000/svg}"


def _points(polyline: ET.Element) -> list[tuple[float, float]]:
    return [tuple(float(c) for c in pair.split(",")) for pair in polyline.attrib["points"].split()]  # type: ignore[misc]


def test_newest_value_sits_at_the_right_edge_and_values_scale_to_the_maximum() -> None:
    svg = sparkline_svg(
        [SparkLine([0.0, 50.0, 100.0], maximum=100.0, color="#1f77b4", label="util")],
        capacity=3,
        width=101,
        height=11,
    )
    root = ET.fromstring(svg)
    (polyline,) = root.iter(f"{SVG}polyline")
    assert _points(polyline) == [(0.5, 10.5), (50.5, 5.5), (100.5, 0.5)]
    assert polyline.attrib["stroke"] == "#1f77b4"


def test_short_history_fills_from_the_right() -> None:
    svg = sparkline_svg([SparkLine([10.0, 20.0], maximum=20.0, color="red", label="m")], capacity=5, width=41)
    (polyline,) = ET.fromstring(svg).iter(f"{SVG}polyline")
    xs = [x for x, _ in _points(polyline)]
    assert xs == [30.5, 40.5]


def test_only_the_last_capacity_values_are_drawn() -> None:
    values = [float(v) for v in range(10)]
    svg = sparkline_svg([SparkLine(values, maximum=9.0, color="red", label="m")], capacity=4, height=10)
    (polyline,) = ET.fromstring(svg).iter(f"{SVG}polyline")
    ys = [y for _, y in _points(polyline)]
    assert ys == [3.5, 2.5, 1.5, 0.5]  # 6, 7, 8, 9 of 9 on a 10-pixel-high box


def test_missing_readings_break_the_line_and_a_lone_point_is_a_dot() -> None:
    svg = sparkline_svg(
        [SparkLine([1.0, 2.0, None, 3.0, None, 4.0, 5.0], maximum=5.0, color="red", label="m")], capacity=7
    )
    root = ET.fromstring(svg)
    assert [len(_points(p)) for p in root.iter(f"{SVG}polyline")] == [2, 2]
    assert len(list(root.iter(f"{SVG}circle"))) == 1


def test_values_outside_the_range_are_clamped_to_the_box() -> None:
    svg = sparkline_svg(
        [SparkLine([-5.0, 250.0], maximum=100.0, color="red", label="u")], capacity=2, height=21
    )
    (polyline,) = ET.fromstring(svg).iter(f"{SVG}polyline")
    assert [y for _, y in _points(polyline)] == [20.5, 0.5]


def test_two_lines_are_drawn_and_labels_are_escaped() -> None:
    svg = sparkline_svg(
        [
            SparkLine([1.0, 2.0], maximum=2.0, color="#1f77b4", label="utilization <%>"),
            SparkLine([2.0, 1.0], maximum=0.0, color="#ff7f0e", label="memory & more"),
        ],
        capacity=2,
    )
    root = ET.fromstring(svg)
    assert len(list(root.iter(f"{SVG}polyline"))) == 2
    assert root.find(f"{SVG}title").text == "utilization <%> · memory & more"  # type: ignore[union-attr]


def test_the_whole_drawing_and_no_history_draws_no_line() -> None:
    """The exact SVG the widget shows: a frame, the label as its title, and two readings in the last
    two of ten slots at 3/10 and 4/10 of the height (pixel centres)."""
    line = SparkLine([3.0, 4.0], maximum=10.0, color="red", label="u")
    assert sparkline_svg([line], capacity=10, width=91, height=11) == (
        '<svg xmlns="http://www.w3.org/2000/svg" width="91" height="11" viewBox="0 0 91 11" role="img">'
        "<title>u</title>"
        '<rect x="0" y="0" width="91" height="11" fill="none" stroke="#ccc" stroke-width="1"/>'
        '<polyline points="80.5,7.5 90.5,6.5" fill="none" stroke="red" stroke-width="1.5" '
        'stroke-linejoin="round"/></svg>'
    )
    empty = ET.fromstring(sparkline_svg([SparkLine([], maximum=1.0, color="red", label="u")], capacity=10))
    assert list(empty.iter(f"{SVG}polyline")) == [] and list(empty.iter(f"{SVG}circle")) == []


@pytest.mark.parametrize(
    ("kwargs", "field"), [({"capacity": 1}, "capacity"), ({"capacity": 5, "width": 0}, "width")]
)
def test_bad_geometry_is_invalid_input_naming_the_field(kwargs: dict[str, int], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        sparkline_svg([], **kwargs)
    assert caught.value.field == field
