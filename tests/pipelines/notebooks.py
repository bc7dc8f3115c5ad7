"""Real nbformat notebooks for pipeline tests: cells with tags, and the shipped example notebooks."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat import NotebookNode
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "pipelines"
FANOUT_ML = EXAMPLES / "fanout_ml.ipynb"
KALE_TAGGED = EXAMPLES / "kale_tagged.ipynb"
OPTIONS_AND_MAGICS = EXAMPLES / "options_and_magics.ipynb"


def code(source: str, *tags: str) -> NotebookNode:
    """A code cell with the given tags (none: an untagged cell that continues the one above)."""
    return new_code_cell(source, metadata={"tags": list(tags)} if tags else {})


def markdown(source: str) -> NotebookNode:
    return new_markdown_cell(source)


def notebook(*cells: NotebookNode, kernel: str = "python3") -> NotebookNode:
    nb = new_notebook(cells=list(cells))
    nb.metadata["kernelspec"] = {"name": kernel, "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def write(nb: NotebookNode, path: Path) -> Path:
    nbformat.validate(nb)
    nbformat.write(nb, str(path))
    return path
