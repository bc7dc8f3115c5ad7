"""Why a Python process failed, cause first, read back from what it printed.

A failed replica's log ends with the traceback Python printed: the workbench's own frames first
(`cube_jupyter/jobs/entry.py`, `runpy`; papermill and nbclient for a notebook), then the user's, and
the exception last, below the fold. A person wants the reverse: the exception, then their own frames;
the workbench's only when they ask. `last_failure` reads the last traceback of a log into that order.
A notebook run by papermill fails with PapermillExecutionError, whose message holds the kernel's
traceback of the failed cell: that inner exception and its frames are the cause.

One reading for every consumer: the backends put `Failure.cause` in conditions (one line), and the
CLI and the Jobs panel show the exception and the user's frames first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePath

from cube_jupyter.installation import PACKAGE_DIR

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
HEADER = "Traceback (most recent call last):"
# `  File "/x/train.py", line 3, in <module>` (a SyntaxError's frame has no `, in ...`)
FRAME = re.compile(r'^  File "(?P<file>[^"]*)", line \d+')
# Python 3.11+ underlines the failing expression: `    ~~~~^^^^`
CARETS = re.compile(r"^\s*[~^]+\s*$")
EXCEPTION = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::(?P<message>.*))?$")
# IPython's header of a cell's traceback: `ModuleNotFoundError      Traceback (most recent call last)`
CELL_HEADER = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)\s+Traceback \(most recent call last\)\s*$")
# IPython's frames: `Cell In[2], line 2`, `File /x/helper.py:2, in load()`, `Input In [2], in ...`
CELL_FRAME = re.compile(r"^\s*(?:Cell In ?\[|Input In \[|File (?P<file>\S.*?):\d+)")
PAPERMILL_ERROR = "PapermillExecutionError"
# What runs the user's code: frames in these packages (or this one) are the workbench's.
WORKBENCH_PACKAGES = frozenset(
    {"cube_jupyter", "papermill", "nbclient", "jupyter_client", "ipykernel", "IPython"}
)
# The interpreter's machinery that starts a script or imports a module (`<frozen runpy>`).
MACHINERY_MODULES = frozenset({"runpy", "importlib"})
# One line of a condition: enough to read the cause, never a tensor's repr.
CAUSE_LIMIT = 300
# How much of the end of a log to read for its last traceback (a deep stack, papermill's too): lines
# and characters, as `processes.log_tail(path, *LOG_TAIL)` takes them.
LOG_TAIL = (200, 32_000)
# How many of a log's last lines a message shows when the log holds no traceback to lead with.
SHOWN_TAIL_LINES = 20


@dataclass(frozen=True)
class Failure:
    """A traceback in the order a person reads it. Frames are as Python printed them (without the
    `^^^^` underlines), oldest first."""

    type: str  # the exception's class, as printed: `ModuleNotFoundError`, `torch.cuda.OutOfMemoryError`
    message: str  # its message, every line of it
    user_frames: tuple[str, ...]
    workbench_frames: tuple[str, ...]
    traceback: str  # the whole traceback, as printed

    @property
    def cause(self) -> str:
        """One line: `ModuleNotFoundError: No module named 'torch'`."""
        first = next((line.strip() for line in self.message.splitlines() if line.strip()), "")
        cause = f"{self.type}: {first}" if first else self.type
        return cause if len(cause) <= CAUSE_LIMIT else cause[: CAUSE_LIMIT - 1] + "…"


def with_log_tail(ended: str, log_tail: str) -> str:
    """`ended` (the first line), then the last lines of the log: a process's last words, for a failure
    that has no traceback to lead with (`sys.exit(3)` after printing why), or besides its cause."""
    tail = "\n".join(log_tail.rstrip().splitlines()[-SHOWN_TAIL_LINES:])
    return f"{ended}\nlast lines of its log:\n{tail}" if tail.strip() else f"{ended} (its log is empty)"


def is_workbench_file(file: str) -> bool:
    """Whether a frame's file is the workbench's (this package, papermill, nbclient, jupyter_client,
    the kernel's; installed or not) or the interpreter's machinery that starts the user's code
    (runpy, importlib)."""
    if file.startswith("<frozen ") and file.endswith(">"):
        return file[len("<frozen ") : -1].split(".")[0] in MACHINERY_MODULES
    path = PurePath(file)
    if path.name == "runpy.py" and path.parent.name.startswith("python3"):
        return True
    parts = path.parts
    for index, part in enumerate(parts[:-1]):
        if part in ("site-packages", "dist-packages") and parts[index + 1] in WORKBENCH_PACKAGES:
            return True
    return path.is_relative_to(PACKAGE_DIR)


def last_failure(text: str) -> Failure | None:
    """The last traceback in `text` (a log, or its tail), cause first; None when it holds none."""
    lines = ANSI.sub("", text).splitlines()
    last_frame = next((i for i in range(len(lines) - 1, -1, -1) if FRAME.match(lines[i])), None)
    if last_frame is None:
        return None
    start = last_frame
    while start > 0 and lines[start - 1].startswith(" "):
        start -= 1
    end = last_frame + 1
    while end < len(lines) and lines[end].startswith(" "):
        end += 1
    found = EXCEPTION.match(lines[end]) if end < len(lines) else None
    if found is None:
        return None
    first = start - 1 if start > 0 and lines[start - 1].rstrip() == HEADER else start
    message = _message([found["message"] or "", *lines[end + 1 :]])
    frames = _python_frames(lines[start:end])
    exc_type = found["type"]
    if exc_type.rpartition(".")[2] == PAPERMILL_ERROR:
        cell = _cell_failure(message)
        if cell is not None:
            exc_type, message, cell_frames = cell
            frames += cell_frames
    return Failure(
        type=exc_type,
        message=message,
        user_frames=tuple(text for file, text in frames if not is_workbench_file(file)),
        workbench_frames=tuple(text for file, text in frames if is_workbench_file(file)),
        traceback="\n".join(lines[first:]).rstrip(),
    )


def _message(lines: list[str]) -> str:
    """An exception's message lines: `Type: message` leaves one space after the colon."""
    if lines and lines[0].startswith(" "):
        lines = [lines[0][1:], *lines[1:]]
    return "\n".join(lines).strip("\n").rstrip()


def _python_frames(lines: list[str]) -> list[tuple[str, str]]:
    """(file, text) of each frame of a Python traceback's frame lines."""
    frames: list[tuple[str, list[str]]] = []
    for line in lines:
        frame = FRAME.match(line)
        if frame is not None:
            frames.append((frame["file"], [line]))
        elif frames and not CARETS.match(line):
            frames[-1][1].append(line)
    return [(file, "\n".join(text)) for file, text in frames]


def _cell_failure(message: str) -> tuple[str, str, list[tuple[str, str]]] | None:
    """The kernel's exception and frames in papermill's message: `Exception encountered at "In [2]":`,
    then IPython's traceback of the cell (its header, frames apart by blank lines, the exception)."""
    lines = message.splitlines()
    headers = [(index, found) for index, line in enumerate(lines) if (found := CELL_HEADER.match(line))]
    start, name = (headers[-1][0] + 1, headers[-1][1]["type"]) if headers else (0, None)
    at = _last_exception(lines, start, name)
    if at is None:
        return None
    found = EXCEPTION.match(lines[at])
    assert found is not None
    frames: list[tuple[str, str]] = []
    for block in "\n".join(lines[start:at]).split("\n\n"):
        block = block.strip("\n").rstrip()
        cell_frame = CELL_FRAME.match(block)
        if cell_frame is not None:
            frames.append((cell_frame["file"] or "", block))
    return found["type"], _message([found["message"] or "", *lines[at + 1 :]]), frames


def _last_exception(lines: list[str], start: int, name: str | None) -> int | None:
    """Where the cell's exception line is: the last `name: ...` (or any `Type: ...` without IPython's
    header, as for a SyntaxError) at the start of a line."""
    for index in range(len(lines) - 1, start - 1, -1):
        found = EXCEPTION.match(lines[index])
        if found is not None and (found["type"] == name or (name is None and found["message"] is not None)):
            return index
    return None
