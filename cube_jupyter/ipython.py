"""The package's IPython extension: the workbench's magics in every kernel started from the
"Python 3 (cube-jupyter)" kernelspec (`--ext=cube_jupyter.ipython`), or after
`%load_ext cube_jupyter.ipython`.

Each feature keeps its magic (`gpu.magic`, `jobs.magic`); this registers them, each imported on its
first use so that a kernel starts without either feature's code. A mistake in a magic's arguments is
an IPython `UsageError` (`cube_jupyter.magics`): the usage text, not a traceback.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cube_jupyter.process_owners import OwnerSource, ProcessOwner


def gpu_magic(line: str) -> None:
    """%gpu [--interval S] [--history N] | %gpu --once | %gpu stop"""
    from cube_jupyter.gpu.magic import gpu_magic

    gpu_magic(line)


def cube_train_magic(line: str, cell: str) -> Any:
    """%%cube_train --framework pytorch --workers 2 [--name N]: the cell as a distributed training job."""
    from cube_jupyter.jobs.magic import cube_train

    return cube_train(line, cell)


@functools.cache
def _machine_sources() -> list[OwnerSource]:
    """The features' process owners on this machine, read from its shared state (the workbench's
    records of jobs and runs), built on first use."""
    from cube_jupyter.config import load_settings
    from cube_jupyter.services import Workbench

    return Workbench(load_settings()).process_owners()


def machine_owners() -> list[ProcessOwner]:
    """Whose the job replicas, models and pipeline steps on this machine are: what the inline GPU
    monitor names their GPU processes after."""
    return [owner for source in _machine_sources() for owner in source()]


def load_ipython_extension(ipython: Any) -> None:
    from cube_jupyter import process_owners

    process_owners.register(machine_owners)
    ipython.register_magic_function(gpu_magic, magic_kind="line", magic_name="gpu")
    ipython.register_magic_function(cube_train_magic, magic_kind="cell", magic_name="cube_train")
