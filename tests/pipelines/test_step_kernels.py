"""How the worker starts step kernels. The kernels replacing the ones steps took start at once for
a step set up alone, and only once none is being set up when several are (a fan-out's branches),
so kernel starts do not slow the branches' setup; a kernel that failed to start holds nothing
back. An IPython kernel keeps its input history in memory; another kernel gets no IPython flag."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from jupyter_client.kernelspec import KernelSpec as JupyterKernelSpec

from cube_jupyter.pipelines.local.workers import (
    IN_MEMORY_HISTORY,
    KernelSpec,
    _KernelKeeper,
    _step_kernel_arguments,
)

SPEC = KernelSpec("python3", "/work")


class Kernel:
    """What the keeper hands out and retires: a started kernel, as far as it can tell."""

    def shutdown_kernel(self, now: bool = False) -> None:
        pass


class CountingKeeper(_KernelKeeper):
    """The keeper with its kernel start counted (and made to fail on demand) instead of forked."""

    def __init__(self, slots: int) -> None:
        super().__init__(slots, forks=None)  # type: ignore[arg-type]  # _start does not fork here
        self.started = 0
        self.fail_next = False
        self._count_lock = threading.Lock()

    def _start(self, spec: KernelSpec) -> Any:
        with self._count_lock:
            self.started += 1
            if self.fail_next:
                self.fail_next = False
                raise RuntimeError("the kernel died as it started")
        return Kernel()

    def settled(self) -> int:
        """Starts so far, once every start asked for has finished."""
        with self._lock:
            pending = list(self._spares)
        for spare in pending:
            spare.exception()
        return self.started


@pytest.fixture
def keeper() -> Iterator[CountingKeeper]:
    keeper = CountingKeeper(4)
    keeper.prepare(SPEC, 4)
    yield keeper
    keeper.close()


def test_a_step_set_up_alone_has_its_kernel_replaced_at_once(keeper: CountingKeeper) -> None:
    assert keeper.settled() == 4
    keeper.take(SPEC)
    assert keeper.settled() == 5  # before the step is under way
    keeper.under_way()
    assert keeper.settled() == 5


def test_steps_set_up_together_have_their_kernels_replaced_once_all_are_under_way(
    keeper: CountingKeeper,
) -> None:
    keeper.settled()
    for _ in range(4):  # a fan-out: four steps take kernels, the first alone so far
        keeper.take(SPEC)
    assert keeper.settled() == 5
    for _ in range(3):
        keeper.under_way()
        assert keeper.settled() == 5  # one branch is still being set up
    keeper.under_way()
    assert keeper.settled() == 8  # four spares again


def test_a_kernel_that_failed_to_start_holds_no_replacement_back() -> None:
    keeper = CountingKeeper(2)
    try:
        keeper.fail_next = True
        keeper.prepare(SPEC, 1)
        with pytest.raises(RuntimeError, match="died as it started"):
            keeper.take(SPEC)  # its step fails; no step is being set up now
        assert isinstance(keeper.take(SPEC), Kernel)
        assert keeper.settled() == 3  # the next step, alone, had its kernel replaced at once
    finally:
        keeper.close()


class Spec:
    """A kernel manager as `_step_kernel_arguments` reads it: its kernel spec's command."""

    def __init__(self, argv: list[str]) -> None:
        self.kernel_spec = JupyterKernelSpec(argv=argv)


def test_only_an_ipython_kernel_is_given_an_in_memory_history() -> None:
    python = [sys.executable, "-Xfrozen_modules=off", "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    assert _step_kernel_arguments(Spec(python)) == IN_MEMORY_HISTORY
    assert (
        _step_kernel_arguments(
            Spec(["R", "--slave", "-e", "IRkernel::main()", "--args", "{connection_file}"])
        )
        == []
    )
    assert (
        _step_kernel_arguments(Spec([sys.executable, "-m", "other_kernel", "-f", "{connection_file}"])) == []
    )
