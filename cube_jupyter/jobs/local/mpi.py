"""The local MPI launcher: starts a job's ranks on this machine, as mpirun would from the hostfile.

    python -m cube_jupyter.jobs.local.mpi --hostfile H --np N [--mpirun PATH] -- RANK_ARGV...

With Open MPI's `mpirun` installed (Debian's `openmpi-bin`), it becomes `mpirun --hostfile H -np N
--tag-output RANK_ARGV`. Without it, this process starts the N ranks itself with the env mpirun
gives them (`OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK`, `PMI_RANK/SIZE`), tags their output lines
`[1,rank]<stdout>:` as `mpirun --tag-output` does, and, like mpirun, stops the others when one
fails and exits with the first failure's status. There is no MPI transport then: ranks that call
MPI_Init need the real mpirun; ranks that rendezvous by env alone (gloo, a tracker) work either way.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import IO

from cube_jupyter.jobs.local.rendezvous import mpi_rank_env

STOP_GRACE = 5.0


def mpirun_argv(mpirun: str, hostfile: str, np: int, rank_argv: Sequence[str], as_root: bool) -> list[str]:
    argv = [mpirun, "--hostfile", hostfile, "-np", str(np), "--tag-output"]
    if as_root:
        argv.append("--allow-run-as-root")
    return [*argv, *rank_argv]


def _pump(stream: IO[bytes], rank: int, channel: str, out: IO[bytes], lock: threading.Lock) -> None:
    prefix = f"[1,{rank}]<{channel}>:".encode()
    for line in iter(stream.readline, b""):
        with lock:
            out.write(prefix + line if line.endswith(b"\n") else prefix + line + b"\n")
            out.flush()


def run_ranks(np: int, rank_argv: Sequence[str], poll: float = 0.05) -> int:
    """Start `np` ranks, wait for them all; on the first failure stop the rest and return its status."""
    lock = threading.Lock()
    out = sys.stdout.buffer
    procs: list[subprocess.Popen[bytes]] = []
    pumps: list[threading.Thread] = []
    for rank in range(np):
        env = dict(os.environ, **mpi_rank_env(rank, np))
        proc = subprocess.Popen(
            list(rank_argv), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        procs.append(proc)
        for stream, channel in ((proc.stdout, "stdout"), (proc.stderr, "stderr")):
            assert stream is not None
            pump = threading.Thread(target=_pump, args=(stream, rank, channel, out, lock), daemon=True)
            pump.start()
            pumps.append(pump)
    status = 0
    while any(p.poll() is None for p in procs):
        failed = [p for p in procs if p.returncode not in (None, 0)]
        if failed:
            status = failed[0].returncode
            break
        time.sleep(poll)
    if status:
        _stop(procs)
    else:
        status = next((p.returncode for p in procs if p.returncode), 0)
    for pump in pumps:
        pump.join(timeout=2.0)
    return _as_exit_status(status)


def _as_exit_status(code: int) -> int:
    """A rank killed by signal N reports -N; a shell-style exit status is 128 + N."""
    return 128 - code if code < 0 else code


def _stop(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cube_jupyter.jobs.local.mpi")
    parser.add_argument("--hostfile", required=True)
    parser.add_argument("--np", type=int, required=True)
    parser.add_argument("--mpirun", default="", help="mpirun to use; '' starts the ranks directly")
    parser.add_argument("rank_argv", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    rank_argv = options.rank_argv[1:] if options.rank_argv[:1] == ["--"] else options.rank_argv
    if not rank_argv or options.np < 1:
        parser.error("give --np >= 1 and the ranks' command after --")
    if options.mpirun:
        mpirun = shutil.which(options.mpirun) or options.mpirun
        as_root = hasattr(os, "geteuid") and os.geteuid() == 0
        command = mpirun_argv(mpirun, options.hostfile, options.np, rank_argv, as_root)
        os.execv(mpirun, command)
    return run_ranks(options.np, rank_argv)


if __name__ == "__main__":
    sys.exit(main())
