"""The `cube-jupyter` command: the same core the server uses, from a shell.

    cube-jupyter notebook list|create|stop|start|delete|render [--config FILE] [--user U]

Exit codes: 0 done, 1 the request failed (the message names the field), 2 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime

import yaml
from traitlets.config import Config

from cube_jupyter.config import Settings, load_config_file, load_settings
from cube_jupyter.errors import CubeError
from cube_jupyter.gpu.cli import add_gpu_commands
from cube_jupyter.jobs.cli import add_job_commands
from cube_jupyter.names import validate_dns_label
from cube_jupyter.notebooks.backend import make_notebook_backend
from cube_jupyter.notebooks.render import render_notebook_objects
from cube_jupyter.notebooks.service import NotebookService, parse_create_request
from cube_jupyter.notebooks.spec import NotebookServer, ServerStatus
from cube_jupyter.pipelines.cli import add_pipeline_commands

SETTLED = {ServerStatus.RUNNING, ServerStatus.STOPPED, ServerStatus.FAILED}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help(sys.stderr)
        return 2
    try:
        settings = load_settings(load_config_file(args.config) if args.config else Config())
        return int(args.run(args, settings) or 0)
    except CubeError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cube-jupyter", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    _add_notebook_commands(commands)
    add_pipeline_commands(commands)
    add_job_commands(commands)
    add_gpu_commands(commands)
    return parser


def _add_notebook_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    notebook = commands.add_parser("notebook", help="per-user notebook servers")
    actions = notebook.add_subparsers(title="actions", metavar="ACTION", required=True)

    def action(name: str, help_text: str, needs_name: bool = True) -> argparse.ArgumentParser:
        sub = actions.add_parser(name, help=help_text)
        sub.add_argument("--config", metavar="FILE", help="a jupyter_server_config.py with c.Cube* settings")
        sub.add_argument("--user", help="whose servers (default: CubeWorkbench.default_user)")
        if needs_name:
            sub.add_argument("--name", required=True, help="server name (DNS-1123 label)")
        return sub

    listing = action("list", "list servers", needs_name=False)
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    listing.set_defaults(run=_list)

    create = action("create", "create and start a server")
    create.add_argument("--profile", help="profile name (default: the admin's default profile)")
    create.add_argument("--no-wait", dest="wait", action="store_false", help="return before it is running")
    create.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for running")
    create.set_defaults(run=_create)

    for verb, stopped in (("stop", True), ("start", False)):
        sub = action(verb, f"{verb} a server")
        sub.add_argument("--no-wait", dest="wait", action="store_false")
        sub.add_argument("--timeout", type=float, default=120.0)
        sub.set_defaults(run=_set_stopped, stopped=stopped)

    action("delete", "delete a server (its workspace is kept)").set_defaults(run=_delete)

    render = action("render", "print the Kubernetes objects a server would be, as YAML")
    render.add_argument("--profile", help="profile name (default: the admin's default profile)")
    render.add_argument(
        "--namespace",
        help="the user's namespace (default: CubeSpawner.namespace_template's; a Kubeflow Profile's, "
        "with namespace_source 'kubeflow-profile', only the cluster knows)",
    )
    render.set_defaults(run=_render)


def _user(args: argparse.Namespace, settings: Settings) -> str:
    return str(args.user or settings.workbench.default_user)


def _render(args: argparse.Namespace, settings: Settings) -> int:
    spec = parse_create_request(settings, _user(args, settings), {"name": args.name, "profile": args.profile})
    namespace = validate_dns_label(args.namespace, "--namespace") if args.namespace else None
    objects = render_notebook_objects(spec, settings, namespace)
    sys.stdout.write(yaml.safe_dump_all(objects, sort_keys=False, default_flow_style=False))
    return 0


def _list(args: argparse.Namespace, settings: Settings) -> int:
    async def run(service: NotebookService) -> int:
        servers = service.list_servers(_user(args, settings))
        if args.json:
            print(json.dumps([s.to_dict() for s in servers], indent=2))
        else:
            _print_table(servers)
        return 0

    return _with_service(settings, run)


def _create(args: argparse.Namespace, settings: Settings) -> int:
    async def run(service: NotebookService) -> int:
        user = _user(args, settings)
        server = await service.create(user, {"name": args.name, "profile": args.profile})
        if args.wait:
            server = await _wait_settled(service, user, server, args.timeout)
        return _report(server, wanted=ServerStatus.RUNNING if args.wait else None)

    return _with_service(settings, run)


def _set_stopped(args: argparse.Namespace, settings: Settings) -> int:
    async def run(service: NotebookService) -> int:
        user = _user(args, settings)
        server = await service.set_stopped(user, args.name, args.stopped)
        if args.wait:
            server = await _wait_settled(service, user, server, args.timeout)
        wanted = (ServerStatus.STOPPED if args.stopped else ServerStatus.RUNNING) if args.wait else None
        return _report(server, wanted)

    return _with_service(settings, run)


def _delete(args: argparse.Namespace, settings: Settings) -> int:
    async def run(service: NotebookService) -> int:
        await service.delete(_user(args, settings), args.name)
        print(f"deleted {args.name} (its workspace is kept)")
        return 0

    return _with_service(settings, run)


def _with_service(settings: Settings, run: Callable[[NotebookService], Awaitable[int]]) -> int:
    async def go() -> int:
        backend = make_notebook_backend(settings)
        # The workbench server supervises and culls; a short command must not (nor stop mid-way).
        await backend.start(supervise=False)
        try:
            return await run(NotebookService(settings, backend))
        finally:
            await backend.close()

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
            sys.stderr.write(f"\r{spinner[tick % 4]} {server.name}: {server.status.value} ({elapsed:.0f}s)  ")
            sys.stderr.flush()
            tick += 1
        await asyncio.sleep(0.25)
        server = service.get(user, server.name)
    if sys.stderr.isatty():
        sys.stderr.write("\r" + " " * 60 + "\r")
    return server


def _report(server: NotebookServer, wanted: ServerStatus | None) -> int:
    line = f"{server.name}: {server.status.value}  {server.url}"
    if server.reason:
        line += f"  ({server.reason})"
    print(line)
    return 0 if wanted is None or server.status == wanted else 1


def _print_table(servers: list[NotebookServer]) -> None:
    header = ("NAME", "PROFILE", "STATUS", "CPU", "MEMORY", "GPU", "AGE", "URL", "REASON")
    rows = [header] + [
        (
            s.name,
            s.profile,
            s.status.value,
            s.resources.cpu,
            s.resources.memory,
            f"{s.resources.gpu} {s.resources.gpu_resource}" if s.resources.gpu else "-",
            _age(s.created),
            s.url,
            (s.reason or "").replace("\n", " ")[:80],
        )
        for s in servers
    ]
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(header))]
    for row in rows:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def _age(created: str) -> str:
    try:
        seconds = (datetime.now(UTC) - datetime.fromisoformat(created.replace("Z", "+00:00"))).total_seconds()
    except ValueError:
        return "?"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(max(seconds, 0))}s"


if __name__ == "__main__":
    sys.exit(main())
