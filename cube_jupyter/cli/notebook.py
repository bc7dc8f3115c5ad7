"""`cube-jupyter notebook list|create|stop|start|delete|render`: per-user notebook servers, from a shell.

    cube-jupyter notebook list|create|stop|start|delete|render [--config FILE] [--user U]

Exit codes: 0 done, 1 the request failed (the message names the field), 2 bad usage.
"""

from __future__ import annotations

import argparse

from cube_jupyter.cli.command import Command


def add_notebook_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    listing.set_defaults(run=Command("cube_jupyter.cli.notebook_commands:list_servers"))

    create = action("create", "create and start a server")
    create.add_argument("--profile", help="profile name (default: the admin's default profile)")
    create.add_argument("--no-wait", dest="wait", action="store_false", help="return before it is running")
    create.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for running")
    create.set_defaults(run=Command("cube_jupyter.cli.notebook_commands:create"))

    for verb, stopped in (("stop", True), ("start", False)):
        sub = action(verb, f"{verb} a server")
        sub.add_argument("--no-wait", dest="wait", action="store_false")
        sub.add_argument("--timeout", type=float, default=120.0)
        sub.set_defaults(run=Command("cube_jupyter.cli.notebook_commands:set_stopped"), stopped=stopped)

    delete = action("delete", "delete a server (its workspace is kept)")
    delete.set_defaults(run=Command("cube_jupyter.cli.notebook_commands:delete"))

    render = action("render", "print the Kubernetes objects a server would be, as YAML")
    render.add_argument("--profile", help="profile name (default: the admin's default profile)")
    render.add_argument(
        "--namespace",
        help="the user's namespace (default: CubeWorkbench.namespace_template's; a Kubeflow Profile's, "
        "with namespace_source 'kubeflow-profile', only the cluster knows)",
    )
    render.set_defaults(run=Command("cube_jupyter.cli.notebook_commands:render"))
