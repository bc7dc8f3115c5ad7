"""A fork server that preloads torch, for kernels of notebooks that import it: its forks start with
torch imported, and CUDA uninitialised, in the server and so in them (a fork of a process that
initialised CUDA cannot use it: torch marks it "in bad fork"). Servers with and without torch live
side by side; one that cannot start leaves its forks to the plain server. Which notebooks' kernels
get torch preloaded: those whose code imports it, as Python reads the code."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from cube_jupyter.local import forks as forks_module
from cube_jupyter.local.fork_server import EXIT_NOTE
from cube_jupyter.local.forks import ForkRequest, Forks, preloadable_imports
from tests.waiting import wait_until

pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(120)

PREFIX = (sys.executable,)
TORCH = ("torch",)
# What a fork finds at its start, before it imports anything itself; torch's state only where the
# server preloaded it (importing it here would hide whether it had).
PROBE = textwrap.dedent(
    """
    import json, sys
    state = {"preloaded": "torch" in sys.modules}
    if state["preloaded"]:
        import torch
        state["in_bad_fork"] = torch._C._cuda_isInBadFork()
        state["cuda_initialised"] = torch.cuda.is_initialized() or torch.cuda._initialized
    print(json.dumps(state), flush=True)
    """
)


@pytest.fixture
def lib(tmp_path: Path) -> Path:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "torch_probe.py").write_text(PROBE)
    (lib / "starts_a_thread.py").write_text(
        "import threading, time\nthreading.Thread(target=time.sleep, args=(60,)).start()\n"
    )
    return lib


@pytest.fixture
def forks(tmp_path: Path) -> Iterator[Forks]:
    forks = Forks(tmp_path / "forks")
    yield forks
    forks.close()


def probe(forks: Forks, lib: Path, out: Path, extra: tuple[str, ...]) -> tuple[dict[str, object], int]:
    """What a fork by the server for `extra` found at its start, and that server's pid."""
    env = {**os.environ, "PYTHONPATH": str(lib)}
    servers: list[int] = []
    with open(out, "wb") as log, open(os.devnull, "rb") as stdin:

        def request(server: int) -> ForkRequest:
            servers.append(server)
            return ForkRequest(
                "torch_probe", [], str(lib), env, stdio=(stdin.fileno(), log.fileno(), log.fileno())
            )

        assert forks.fork(PREFIX, env, request, extra=extra) is not None
    wait_until(lambda: EXIT_NOTE in out.read_text(), timeout=60)
    first, note = out.read_text().splitlines()[:2]
    assert note == f"{EXIT_NOTE}0", out.read_text()
    return json.loads(first), servers[-1]


def test_a_fork_of_the_torch_server_starts_with_torch_imported_and_cuda_untouched(
    forks: Forks, lib: Path, tmp_path: Path
) -> None:
    state, server = probe(forks, lib, tmp_path / "out", TORCH)
    assert state == {"preloaded": True, "in_bad_fork": False, "cuda_initialised": False}
    # the server itself never loaded the CUDA driver (CUDA's initialisation does, where there is one)
    assert "libcuda.so" not in Path(f"/proc/{server}/maps").read_text()


def test_servers_with_and_without_torch_live_side_by_side(forks: Forks, lib: Path, tmp_path: Path) -> None:
    plain, plain_server = probe(forks, lib, tmp_path / "plain", ())
    with_torch, torch_server = probe(forks, lib, tmp_path / "torch", TORCH)
    again, plain_again = probe(forks, lib, tmp_path / "again", ())
    assert plain == again == {"preloaded": False}
    assert with_torch["preloaded"] is True
    assert plain_server == plain_again != torch_server


def test_a_server_with_extra_modules_that_cannot_start_leaves_its_forks_to_the_plain_one(
    forks: Forks, lib: Path, tmp_path: Path
) -> None:
    state, server = probe(forks, lib, tmp_path / "out", ("starts_a_thread",))  # it never forks
    assert state == {"preloaded": False}
    assert probe(forks, lib, tmp_path / "plain", ())[1] == server


@pytest.mark.parametrize(
    "source",
    [
        "import torch",
        "import numpy as np, torch.nn as nn",
        "from torch import nn",
        "from torch.utils.data import DataLoader",
        "%matplotlib inline\nimport torch",
        "def model():\n    import torch\n    return torch.zeros(1)",
    ],
)
def test_code_that_imports_torch_has_it_preloaded(source: str) -> None:
    assert preloadable_imports(["x = 1", source]) == TORCH


@pytest.mark.parametrize(
    "source",
    [
        "import numpy",
        "import torchvision",
        "from .torch import nn",  # a package's own module named torch
        "# import torch",
        "print('import torch')",
        "!pip install torch",
        "import torch as",  # does not parse: not Python, imports nothing
    ],
)
def test_code_that_does_not_import_torch_has_nothing_preloaded(source: str) -> None:
    assert preloadable_imports([source]) == ()


def test_torch_is_not_preloaded_where_it_is_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forks_module.importlib.util, "find_spec", lambda name: None)
    assert preloadable_imports(["import torch"]) == ()


def test_a_program_wanting_other_thread_counts_than_the_torch_server_loaded_with_is_spawned(
    forks: Forks, lib: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenMP reads OMP_NUM_THREADS as torch loads it: a fork of the torch server would keep the
    server's count. The plain server loaded no OpenMP: its forks read their own."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    probe(forks, lib, tmp_path / "torch", TORCH)  # the servers start without it
    probe(forks, lib, tmp_path / "plain", ())
    env = {**os.environ, "PYTHONPATH": str(lib), "OMP_NUM_THREADS": "1"}
    request = ForkRequest("torch_probe", [], str(lib), env)
    assert forks.fork(PREFIX, env, lambda _server: request, extra=TORCH) is None  # to be spawned
    assert forks.fork(PREFIX, env, lambda _server: request) is not None
