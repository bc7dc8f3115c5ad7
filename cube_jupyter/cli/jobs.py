"""`cube-jupyter train|tune|serve render|run|list|logs|delete`: jobs from a shell, specs as YAML files.

    cube-jupyter train render job.yaml          the Kubernetes objects, as YAML (like `helm template`)
    cube-jupyter train run job.yaml [--wait]    submit; with --wait, follow it until it finishes
    cube-jupyter train list [--json]
    cube-jupyter train logs NAME [--replica worker-0] [-f] [--tail N]
    cube-jupyter train delete NAME

`tune` and `serve` take the same actions for tuning and serving specs. `render` asks no cluster: a
training job is rendered with the API `CubeJobs.training_api` pins, or with `auto` as a cluster
serving both gets it (a Trainer v2 TrainJob when its nodes are alike, else the Training Operator's
kind). `run` runs on the configured backend: here, as processes (local), or as operator objects
(kubernetes), on the APIs the cluster serves. Exit codes: 0 done (with
--wait: Succeeded, or Ready for a served model), 1 the job failed or the request was refused, 2 the
spec or an argument is invalid (the message names the field), 130 interrupted.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from cube_jupyter.cli.command import Command

if TYPE_CHECKING:
    from cube_jupyter.jobs.model import JobKind

COMMANDS: dict[str, tuple[JobKind, str]] = {
    "train": ("training", "distributed training jobs (TFJob, PyTorchJob, XGBoostJob, MPIJob)"),
    "tune": ("tuning", "hyperparameter tuning experiments (Katib)"),
    "serve": ("serving", "served models (KServe InferenceService)"),
}


def add_job_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for command, (kind, help_text) in COMMANDS.items():
        parser = commands.add_parser(command, help=help_text)
        parser.set_defaults(kind=kind)  # the actions' namespaces inherit it
        actions = parser.add_subparsers(title="actions", metavar="ACTION", required=True)

        def action(name: str, help_text: str, parent: Any = actions) -> argparse.ArgumentParser:
            sub: argparse.ArgumentParser = parent.add_parser(name, help=help_text)
            sub.add_argument(
                "--config", metavar="FILE", help="a jupyter_server_config.py with c.Cube* settings"
            )
            sub.add_argument("--user", help="whose jobs (default: CubeWorkbench.default_user)")
            return sub

        render = action("render", "print the Kubernetes objects of a spec as YAML")
        render.add_argument("file", metavar="FILE", help="the spec, as YAML")
        render.set_defaults(run=Command("cube_jupyter.cli.jobs_commands:render"))

        run = action("run", "submit a spec to the configured backend")
        run.add_argument("file", metavar="FILE", help="the spec, as YAML")
        run.add_argument("--wait", action="store_true", help="follow the job until it has finished")
        run.add_argument("--timeout", type=float, default=None, help="seconds to wait with --wait")
        run.set_defaults(run=Command("cube_jupyter.cli.jobs_commands:run"))

        listing = action("list", "list jobs")
        listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
        listing.set_defaults(run=Command("cube_jupyter.cli.jobs_commands:list_jobs"))

        logs = action("logs", "print a replica's log")
        logs.add_argument("name", metavar="NAME")
        logs.add_argument("--replica", help="which replica, e.g. worker-0 (default: the first)")
        logs.add_argument("-f", "--follow", action="store_true", help="keep printing until it finishes")
        logs.add_argument("--tail", type=int, help="only the last N lines")
        logs.set_defaults(run=Command("cube_jupyter.cli.jobs_commands:logs"))

        delete = action("delete", "stop a job and remove it")
        delete.add_argument("name", metavar="NAME")
        delete.set_defaults(run=Command("cube_jupyter.cli.jobs_commands:delete"))
