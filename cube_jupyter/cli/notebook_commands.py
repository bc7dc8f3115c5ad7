"""The `cube-jupyter notebook` handlers (parsers in `notebook.py`): one request to the notebook
service each, on the configured backend started for the command only."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from cube_jupyter.cli.table import print_rows
from cube_jupyter.config import Settings
from cube_jupyter.names import validate_dns_label
from cube_jupyter.notebooks.service import NotebookService, parse_create_request
from cube_jupyter.notebooks.spec import NotebookServer, ServerStatus

SETTLED = {ServerStatus.RUNNING, ServerStatus.STOPPED, ServerStatus.FAILED}


def _user(args: argparse.Namespace, settings: Settings) -> str:
    return str(args.user or settings.workbench.default_user)


def render(args: argparse.Namespace, settings: Settings) -> int:
    import yaml

    from cube_jupyter.notebooks.render import render_notebook_objects

    user = _user(args, settings)
    spec = parse_create_request(settings.notebooks, user, {"name": args.name, "profile": args.profile})
    namespace = validate_dns_label(args.namespace, "--namespace") if args.namespace else None
    objects = render_notebook_objects(spec, settings.notebooks, namespace)
    sys.stdout.write(yaml.safe_dump_all(objects, sort_keys=False, default_flow_style=False))
    return 0


def list_servers(args: argparse.Namespace, settings: Settings) -> int:
    async def run(service: NotebookService) -> int:
        servers = service.list_servers(_user(args, settings))
        if args.json:
            print(json.dumps([s.to_dict() for s in servers], indent=2))
        else:
            _print_table(servers)
        return 0

    return _with_service(settings, run)


def create(args: argparse.Namespace, settings: Settings) -> int:
    async def run(service: NotebookService) -> int:
        user = _user(args, settings)
        server = await service.create(user, {"name": args.name, "profile": args.profile})
        if args.wait:
            server = await _wait_settled(service, user, server, args.timeout)
        return _report(server, wanted=ServerStatus.RUNNING if args.wait else None)

    return _with_service(settings, run)


def set_stopped(args: argparse.Namespace, settings: Settings) -> int:
    async def run(service: NotebookService) -> int:
        user = _user(args, settings)
        server = await service.set_stopped(user, args.name, args.stopped)
        if args.wait:
            server = await _wait_settled(service, user, server, args.timeout)
        wanted = (ServerStatus.STOPPED if args.stopped else ServerStatus.RUNNING) if args.wait else None
        return _report(server, wanted)

    return _with_service(settings, run)


def delete(args: argparse.Namespace, settings: Settings) -> int:
    async def run(service: NotebookService) -> int:
        await service.delete(_user(args, settings), args.name)
        print(f"deleted {args.name} (its workspace is kept)")
        return 0

    return _with_service(settings, run)


def _with_service(settings: Settings, run: Callable[[NotebookService], Awaitable[int]]) -> int:
    """The notebook service of the composition root for one command: the backend only read (the
    workbench server supervises and culls; a short command must not, nor stop mid-way), and the GPU
    quota counted with jobs too, under the lock the workbench server shares."""
    from cube_jupyter.services import open_workbench

    async def go() -> int:
        async with open_workbench(settings) as workbench:
            return await run(await workbench.started_notebooks())

    return asyncio.run(go())


async def _wait_settled(
    service: NotebookService, user: str, server: NotebookServer, timeout: float
) -> NotebookServer:
    """Poll until the server settles, showing a one-line live status on a terminal."""
    deadline = time.monotonic() + timeout
    started = time.monotonic()
    spinner = "|/-\\"
    tick = 0
    while server.status not in SETTLED and time.monotonic() < deadline:
        if sys.stderr.isatty():
            elapsed = time.monotonic() - started
            sys.stderr.write(f"\r{spinner[tick % 4]} {server.name}: {server.state} ({elapsed:.0f}s)  ")
            sys.stderr.flush()
            tick += 1
        await asyncio.sleep(0.25)
        server = service.get(user, server.name)
    if sys.stderr.isatty():
        sys.stderr.write("\r" + " " * 60 + "\r")
    return server


def _report(server: NotebookServer, wanted: ServerStatus | None) -> int:
    line = f"{server.name}: {server.state}  {server.url}"
    if server.reason:
        line += f"  ({server.reason})"
    print(line)
    return 0 if wanted is None or server.status == wanted else 1


def _print_table(servers: list[NotebookServer]) -> None:
    header = ("NAME", "PROFILE", "STATUS", "CPU", "MEMORY", "GPU", "AGE", "URL", "QUEUE", "REASON")
    rows = [
        (
            s.name,
            s.profile,
            s.status.value,
            s.resources.cpu,
            s.resources.memory,
            f"{s.resources.gpu} {s.resources.gpu_resource}" if s.resources.gpu else "-",
            _age(s.created),
            s.url,
            s.queue_place or "-",
            (s.reason or "").replace("\n", " ")[:80],
        )
        for s in servers
    ]
    print_rows(header, rows)


def _age(created: str) -> str:
    try:
        seconds = (datetime.now(UTC) - datetime.fromisoformat(created.replace("Z", "+00:00"))).total_seconds()
    except ValueError:
        return "?"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(max(seconds, 0))}s"
