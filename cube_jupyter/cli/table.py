"""Tables the commands print: columns padded to their widest cell, as kubectl prints them."""

from __future__ import annotations

from collections.abc import Sequence


def print_rows(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    lines = [tuple(header), *(tuple(row) for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for line in lines:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())
