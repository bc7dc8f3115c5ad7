"""The data files a step reads, for its cache key: editing `data/train.csv` reruns the steps that read
it, as a changed cell does (Kale and KFP cache on code and inputs only).

A step's candidates are the string literals its code passes to calls (`pd.read_csv("data/train.csv")`,
`open("labels.txt")`, `np.load(path="x.npy")`), found once, when the notebook becomes a pipeline.
When a run computes the key, each candidate that is a regular file inside the notebook's folder (the
run's working directory; never outside it, not by `..` nor a symlink) is fingerprinted: its content
hash up to HASH_LIMIT bytes, its size and modification time above. Paths built at run time
(f-strings, `os.path.join`) are not seen.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Sequence
from pathlib import Path

from cube_jupyter.pipelines.dataflow import parse_cell

HASH_LIMIT = 16 * 1024 * 1024  # larger files are fingerprinted by size and modification time
MAX_FILES = 64  # per step: the first ones in sorted order
MAX_LITERAL = 1024  # longer strings are not paths


def file_literals(cells: Sequence[tuple[int, str]]) -> tuple[str, ...]:
    """The string literals the cells pass to calls, sorted: what may name a data file."""
    found: set[str] = set()
    for index, source in cells:
        for node in ast.walk(parse_cell(source, f"cells[{index}]")):
            if not isinstance(node, ast.Call):
                continue
            for argument in [*node.args, *(keyword.value for keyword in node.keywords)]:
                if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                    text = argument.value
                    if 0 < len(text) <= MAX_LITERAL and "\n" not in text and "\x00" not in text:
                        found.add(text)
    return tuple(sorted(found))


def fingerprints(candidates: Sequence[str], folder: str | Path) -> dict[str, str]:
    """{path as written: fingerprint} for the candidates that are files inside `folder`."""
    base = Path(folder).resolve()
    prints: dict[str, str] = {}
    for text in candidates:
        if len(prints) == MAX_FILES:
            break
        try:
            full = (base / text).resolve()
            if not full.is_relative_to(base) or not full.is_file():
                continue
            prints[text] = _fingerprint(full)
        except (OSError, RuntimeError, ValueError):  # unreadable, a symlink loop, a name too long
            continue
    return prints


def _fingerprint(path: Path) -> str:
    stat = path.stat()
    if stat.st_size > HASH_LIMIT:
        return f"size:{stat.st_size},mtime:{stat.st_mtime_ns}"
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return f"sha256:{digest.hexdigest()}"
