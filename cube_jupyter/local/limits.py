"""CPU and memory limits of local children: a profile's `cpu` and `memory`, applied on this machine.

Where this process may make cgroups under its own (v2, or v1's memory and cpu hierarchies), every
limited child gets one of its own, `cube-jupyter/<pid>`: the memory limit and the CPU quota then hold
for the child and everything it starts (a server's kernels) together, as a pod's limits do. Where it
may not (an unprivileged container, a read-only /sys/fs/cgroup), memory falls back to RLIMIT_DATA on
each process and CPU to an affinity of whole cores. Which of them applies is found once, by making a
cgroup and writing its limits, never assumed; `Limiter` says which, for users to be told.

A spawned child joins its cgroup (or sets its rlimit and affinity) itself, between fork and exec; a
forked one (`forks`) is confined by its owner before it may go on. Either way no code of its own
ever runs unconfined and nothing it starts can escape.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import math
import os
import re
import resource
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cube_jupyter.fields import parse_quantity

GROUP = "cube-jupyter"
CPU_PERIOD_US = 100_000
MIN_CPU_QUOTA_US = 1_000  # the kernel's smallest CFS quota
CONTROLLERS = ("memory", "cpu")


@dataclass(frozen=True)
class Limits:
    """What one child may use: bytes of memory and (fractions of) CPU cores."""

    memory_bytes: int
    cpu_cores: float

    @classmethod
    def of(cls, cpu: str, memory: str, field: str = "resources") -> Limits:
        """From Kubernetes quantities ("500m", "2Gi"), as profiles and replicas give them."""
        return cls(
            memory_bytes=int(parse_quantity(memory, f"{field}.memory")),
            cpu_cores=parse_quantity(cpu, f"{field}.cpu"),
        )


class Method(enum.StrEnum):
    """How a limit is applied: to a child's whole process tree, or to each process on its own."""

    CGROUP = "cgroup"  # memory and CPU time of the child and all it starts, together
    RLIMIT = "rlimit"  # RLIMIT_DATA: the memory of each process on its own
    AFFINITY = "affinity"  # whole cores the child and all it starts may run on


@dataclass(frozen=True)
class Controller:
    """One cgroup controller ("memory" or "cpu") where this process may make groups: `group` is
    `cube-jupyter` under this process's own cgroup of that controller's hierarchy."""

    name: str
    version: int  # 1 or 2
    group: Path

    def settings(self, limits: Limits) -> list[tuple[str, str]]:
        """The files of a child's cgroup to write, in order, and what to write in them."""
        if self.name == "memory":
            file = "memory.max" if self.version == 2 else "memory.limit_in_bytes"
            return [(file, str(limits.memory_bytes))]
        quota = max(MIN_CPU_QUOTA_US, round(limits.cpu_cores * CPU_PERIOD_US))
        if self.version == 2:
            return [("cpu.max", f"{quota} {CPU_PERIOD_US}")]
        return [("cpu.cfs_period_us", str(CPU_PERIOD_US)), ("cpu.cfs_quota_us", str(quota))]


@dataclass(frozen=True)
class Limiter:
    """How this machine limits a child: a cgroup controller for memory and for CPU where one could
    be made, else RLIMIT_DATA and CPU affinity. `cores` are the CPUs this process may run on and
    `ram` the bytes of memory this machine has."""

    memory: Controller | None
    cpu: Controller | None
    cores: tuple[int, ...]
    ram: int

    @property
    def memory_method(self) -> Method:
        return Method.CGROUP if self.memory else Method.RLIMIT

    @property
    def cpu_method(self) -> Method:
        return Method.CGROUP if self.cpu else Method.AFFINITY

    def cpu_cores(self, limits: Limits) -> float | None:
        """The cores a child gets: the quota (cgroup) or whole cores (affinity); None when the limit
        asks for as many cores as this process has, or more, so it changes nothing."""
        cores = limits.cpu_cores if self.cpu else math.ceil(limits.cpu_cores)
        return cores if cores < len(self.cores) else None

    def memory_binds(self, limits: Limits) -> bool:
        """Whether the memory limit is below what this machine has (else it never holds anyone back)."""
        return limits.memory_bytes < self.ram

    def confine(self, limits: Limits) -> Callable[[int], None]:
        """What puts process `pid` under `limits` (its cgroup joined, or its rlimit and affinity
        set); raises OSError saying why it could not. Only system calls and no logging: it also runs
        in a child between fork and exec (`preexec`), where other threads of the parent may have
        held locks."""
        groups: dict[Path, list[tuple[str, str]]] = {}
        for controller in (self.memory, self.cpu):
            if controller is not None:
                groups.setdefault(controller.group, []).extend(controller.settings(limits))
        writes = [(str(group), settings) for group, settings in groups.items()]
        data = None if self.memory else _within_hard_limit(limits.memory_bytes)
        cores = self.cpu_cores(limits)
        pinned = None if self.cpu or cores is None else int(cores)
        allowed = self.cores

        def confine(pid: int) -> None:
            for group, settings in writes:
                _join(os.path.join(group, str(pid)), settings, pid)
            if data is not None:
                resource.prlimit(pid, resource.RLIMIT_DATA, (data, data))
            if pinned is not None:
                os.sched_setaffinity(pid, _spread(allowed, pinned, pid))

        return confine

    def preexec(self, limits: Limits) -> Callable[[], None]:
        """What a child runs between fork and exec to put itself under `limits`; why it could not is
        said in its log (its stderr), and Popen raises SubprocessError."""
        confine = self.confine(limits)

        def confine_self() -> None:
            try:
                confine(os.getpid())
            except OSError as exc:
                os.write(2, f"cube-jupyter: could not apply the limits: {exc}\n".encode())
                raise

        return confine_self

    def release(self) -> None:
        """Remove the cgroups of children that have exited: each whose process is gone (reaped) and
        that holds nothing it started. Also those of children killed from outside, so none pile up."""
        for group in {c.group for c in (self.memory, self.cpu) if c is not None}:
            try:
                leaves = [entry.name for entry in os.scandir(group) if entry.name.isdigit()]
            except OSError:
                continue
            for name in leaves:
                if not _alive(int(name)):
                    with contextlib.suppress(OSError):  # still holds a process: it stays
                        (group / name).rmdir()


@functools.cache
def limiter() -> Limiter:
    """This machine's Limiter, found once per process."""
    return probe(Path("/proc/self/mountinfo"), Path("/proc/self/cgroup"))


def probe(mountinfo: Path, membership: Path) -> Limiter:
    """Find, for memory and CPU, a cgroup controller under which this process can make a child's
    cgroup and write its limit (v2 first); those it cannot get fall back to rlimit and affinity."""
    try:
        texts = mountinfo.read_text(), membership.read_text()
    except OSError:
        texts = "", ""
    found = {name: next((c for c in candidates(name, *texts) if _prepare(c)), None) for name in CONTROLLERS}
    return Limiter(memory=found["memory"], cpu=found["cpu"], cores=available_cores(), ram=machine_ram())


def available_cores() -> tuple[int, ...]:
    return tuple(sorted(os.sched_getaffinity(0)))


def machine_ram() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def candidates(name: str, mountinfo: str, membership: str) -> list[Controller]:
    """Where children's cgroups for controller `name` could go, v2 first: `cube-jupyter` under this
    process's own cgroup in each mounted hierarchy that may have it (from /proc/self/mountinfo and
    /proc/self/cgroup). Never outside our own cgroup: children stay within the workbench's limits."""
    own = _own_cgroups(membership)
    found = []
    for mount in sorted(_cgroup_mounts(mountinfo), key=lambda m: -m.version):
        key = "" if mount.version == 2 else name
        if (mount.version == 1 and name not in mount.controllers) or key not in own:
            continue
        relative = os.path.relpath(own[key], mount.root)
        if not relative.startswith(".."):  # else our cgroup is outside what is mounted here
            found.append(Controller(name, mount.version, mount.path / relative / GROUP))
    return found


# -- internals -------------------------------------------------------------------------------------

# A sample limit the probe writes: what every child's cgroup will be given, in kind.
_PROBE_LIMITS = Limits(memory_bytes=1 << 30, cpu_cores=1.0)


@dataclass(frozen=True)
class _Mount:
    version: int
    root: str  # the hierarchy's path that is mounted
    path: Path  # where
    controllers: frozenset[str]  # v1: those bound to this hierarchy


def _cgroup_mounts(text: str) -> list[_Mount]:
    mounts = []
    for line in text.splitlines():
        before, _, after = line.partition(" - ")
        fields, rest = before.split(), after.split()
        if len(fields) < 5 or len(rest) < 3 or rest[0] not in ("cgroup", "cgroup2"):
            continue
        path = Path(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]))
        version = 2 if rest[0] == "cgroup2" else 1
        options = frozenset(rest[2].split(",")) if version == 1 else frozenset()
        mounts.append(_Mount(version, fields[3], path, options & set(CONTROLLERS)))
    return mounts


def _own_cgroups(text: str) -> dict[str, str]:
    """This process's cgroup path per v1 controller, and under "" its v2 one."""
    own = {}
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            own[name] = path
    return own


def _prepare(controller: Controller) -> bool:
    """Make `controller.group` and try a child's cgroup in it: True when its limit could be written."""
    group = controller.group
    try:
        if controller.version == 2:
            own = group.parent
            if controller.name not in (own / "cgroup.controllers").read_text().split():
                return False
            _enable(own, controller.name)  # fails (EBUSY) where our own cgroup holds processes
            group.mkdir(exist_ok=True)
            _enable(group, controller.name)
        else:
            group.mkdir(exist_ok=True)
        trial = group / f"probe-{os.getpid()}"
        trial.mkdir(exist_ok=True)
        try:
            for file, value in controller.settings(_PROBE_LIMITS):
                (trial / file).write_text(value)
        finally:
            trial.rmdir()
    except OSError:
        return False
    return True


def _enable(cgroup: Path, name: str) -> None:
    control = cgroup / "cgroup.subtree_control"
    if name not in control.read_text().split():
        control.write_text(f"+{name}")


def _join(leaf: str, settings: list[tuple[str, str]], pid: int) -> None:
    with contextlib.suppress(FileExistsError):  # left by an earlier process of this pid
        os.mkdir(leaf)
    for file, value in [*settings, ("cgroup.procs", str(pid))]:
        fd = os.open(os.path.join(leaf, file), os.O_WRONLY)
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)


def _alive(pid: int) -> bool:
    """Whether `pid` names a process (a zombie too: a child it names is not reaped yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _within_hard_limit(data: int) -> int:
    """`data`, or the hard RLIMIT_DATA this process already has when that is lower (it cannot rise)."""
    hard = resource.getrlimit(resource.RLIMIT_DATA)[1]
    return data if hard == resource.RLIM_INFINITY else min(data, hard)


def _spread(allowed: Sequence[int], count: int, pid: int) -> set[int]:
    """`count` of the `allowed` cores, starting at one picked by `pid`, so children spread out."""
    start = pid % len(allowed)
    return {allowed[(start + i) % len(allowed)] for i in range(count)}
