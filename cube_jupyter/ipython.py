"""The package's IPython extension: the workbench's magics in every kernel started from the
"Python 3 (cube-jupyter)" kernelspec (`--ext=cube_jupyter.ipython`), or after
`%load_ext cube_jupyter.ipython`.

Each feature keeps its magic (`gpu.magic`, `jobs.magic`); this registers them, each imported on its
first use so that a kernel starts without either feature's code. A mistake in a magic's arguments is
an IPython `UsageError` (`cube_jupyter.magics`): the usage text, not a traceback.
"""

from __future__ import annotations

from typing import Any


def gpu_magic(line: str) -> None:
    """%gpu [--interval S] [--history N] | %gpu --once | %gpu stop"""
    from cube_jupyter.gpu.magic import gpu_magic

    gpu_magic(line)


def cube_train_magic(line: str, cell: str) -> Any:
    """%%cube_train --framework pytorch --workers 2 [--name N]: the cell as a distributed training job."""
    from cube_jupyter.jobs.magic import cube_train

    return cube_train(line, cell)


def load_ipython_extension(ipython: Any) -> None:
    ipython.register_magic_function(gpu_magic, magic_kind="line", magic_name="gpu")
    ipython.register_magic_function(cube_train_magic, magic_kind="cell", magic_name="cube_train")
