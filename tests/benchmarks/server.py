"""The command line of a real `jupyter server` the benchmarks measure through."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def jupyter_server_argv(config: Path, port: int, root: Path) -> list[str]:
    """`jupyter server` with `config`, on `port`, serving `root` (as root only with --allow-root)."""
    argv = [
        sys.executable,
        "-m",
        "jupyter",
        "server",
        "--no-browser",
        f"--config={config}",
        f"--ServerApp.port={port}",
        f"--ServerApp.root_dir={root}",
    ]
    if os.geteuid() == 0:
        argv.append("--allow-root")
    return argv
