"""Steps of a notebook that imports torch run in kernels forked from a fork server that imported
torch before them, without initialising CUDA, so each step can still use CUDA (its kernel is not
"in bad fork"), a `gpu:N` step on the GPUs it was given; steps of a notebook that does not import
torch get the plain server, and no torch."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest

from tests.pipelines.executing import Env, executor_env
from tests.pipelines.notebooks import code

pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(240)

# The top of the `imports` cell, run first in each step's kernel: what the kernel found at its start,
# its fork server's command line (the modules that preloads) and whether torch was imported already.
KERNEL_STATE = (
    "import json, sys, psutil\n"
    "state = {'server': psutil.Process().parent().cmdline(), 'torch': 'torch' in sys.modules}\n"
)
REPORT = "print('state', json.dumps(state))"
CUDA_STATE = (
    "state['in_bad_fork'] = torch.cuda._is_in_bad_fork()\n"
    "state['cuda_initialised'] = torch.cuda.is_initialized()\n"
    f"{REPORT}"
)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with executor_env(tmp_path_factory.mktemp("torch-steps")) as env:
        yield env


class GivesGpu1:
    """The local GPU gate of a machine whose GPU 1 is free for every `gpu:N` step."""

    async def acquire(
        self,
        user: str,
        run_id: str,
        step: str,
        wanted: int,
        *,
        waiting: Callable[[str], None],
        cancelled: Callable[[], bool],
    ) -> list[str]:
        return ["1"]

    def released(self) -> None:
        pass


def kernel_states(
    env: Env, name: str, imports: str, *steps: str, step_tags: tuple[str, ...] = ()
) -> list[dict[str, object]]:
    """What each step's kernel found, its `imports` cell going on with `imports`."""
    cells = [code(KERNEL_STATE + imports, "imports")]
    cells += [code(step, f"step:s{i}", *step_tags) for i, step in enumerate(steps)]
    run = env.run(env.pipeline(name, *cells), parallel=1, gpus=GivesGpu1())
    assert run.status == "succeeded", run.error
    printed = [env.step_text(step.notebook).splitlines() for step in run.steps]
    return [json.loads(next(line for line in lines if line.startswith("state "))[6:]) for lines in printed]


def test_a_notebook_that_imports_torch_has_its_steps_forked_with_torch_and_cuda_untouched(env: Env) -> None:
    states = kernel_states(
        env, "with_torch", "import torch", CUDA_STATE, f"x = torch.ones(2).sum()\n{CUDA_STATE}"
    )
    for state in states:
        assert state["torch"] is True  # imported by the fork server, before the step's first cell
        server = state["server"]
        assert isinstance(server, list) and "cube_jupyter.local.fork_server" in server and "torch" in server
        assert state["in_bad_fork"] is False and state["cuda_initialised"] is False
    assert states[0]["server"] == states[1]["server"]  # one server for every step


def test_a_notebook_without_torch_has_its_steps_forked_without_it(env: Env) -> None:
    for state in kernel_states(env, "without_torch", "import math", REPORT, REPORT):
        server = state["server"]
        assert isinstance(server, list) and "cube_jupyter.local.fork_server" in server
        assert "torch" not in server and state["torch"] is False


def test_a_gpu_step_of_a_torch_notebook_has_its_gpus_and_torch_preloaded(env: Env) -> None:
    gpus = f"import os\nstate['gpus'] = os.environ.get('CUDA_VISIBLE_DEVICES')\n{CUDA_STATE}"
    (state,) = kernel_states(env, "gpu_torch", "import torch", gpus, step_tags=("gpu:1",))
    assert state["gpus"] == "1"  # its own, set as its kernel was forked: CUDA will read it then
    assert state["torch"] is True and "torch" in state["server"]  # type: ignore[operator]
    assert state["in_bad_fork"] is False and state["cuda_initialised"] is False
