"""`cube-jupyter schedule ...`: scheduled notebooks and training jobs, from a shell.

    cube-jupyter schedule create NAME (--notebook NB | --job FILE) (--cron EXPR | --every SECONDS)
                                 [--timezone TZ] [--start T] [--end T] [--catchup none|latest|all]
                                 [--max-concurrency N] [--concurrency-policy Allow|Forbid|Replace]
                                 [--retries N] [--retry-backoff S] [--depends-on NAME]
                                 [--depends-timeout S] [-p NAME VALUE]... [--paused] [--target T]
    cube-jupyter schedule list [--json]
    cube-jupyter schedule show NAME [--json]
    cube-jupyter schedule pause|resume|delete NAME
    cube-jupyter schedule snapshot NAME          take the notebook anew (runs execute the snapshot)
    cube-jupyter schedule run NAME [--wait]      a run now
    cube-jupyter schedule backfill NAME --from T --to T [--parallel N] [--dry-run] [--rerun] [--wait]
    cube-jupyter schedule render NAME            the CronWorkflow the kubernetes backend keeps

The command reads and writes the workbench's schedule store (`{state_dir}/schedules.sqlite`), as
`pipeline run` writes its run history: the running workbench's scheduler picks changes up within
`CubeSchedules.poll_seconds`, and the command says when no scheduler is running. A notebook path is
relative to the directory the workbench serves: run the command from there. Exit codes: 0 done (with
--wait: every run succeeded), 1 the request failed or a run did not succeed, 2 bad input (the
message names the field).
"""

from __future__ import annotations

import argparse

from cube_jupyter.cli.command import Command
from cube_jupyter.cli.pipeline import parameter_option

HANDLERS = "cube_jupyter.cli.schedule_commands"


def add_schedule_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    schedule = commands.add_parser("schedule", help="scheduled notebooks and training jobs")
    actions = schedule.add_subparsers(title="actions", metavar="ACTION", required=True)

    def action(
        name: str, help_text: str, *, named: bool = True, handler: str = ""
    ) -> argparse.ArgumentParser:
        sub = actions.add_parser(name, help=help_text)
        if named:
            sub.add_argument("name", metavar="NAME", help="the schedule")
        sub.add_argument("--config", metavar="FILE", help="a jupyter_server_config.py with c.Cube* settings")
        sub.add_argument("--user", help="whose schedules (default: CubeWorkbench.default_user)")
        sub.set_defaults(run=Command(f"{HANDLERS}:{handler or name}"))
        return sub

    create = action("create", "save a schedule (a notebook is snapshotted now)")
    what = create.add_mutually_exclusive_group(required=True)
    what.add_argument("--notebook", metavar="NB", help="a tagged notebook: its pipeline runs")
    what.add_argument("--job", metavar="FILE", help="a training job spec (YAML): a job runs")
    when = create.add_mutually_exclusive_group(required=True)
    when.add_argument("--cron", help="5 fields (minute hour day month weekday) or @daily, @hourly...")
    when.add_argument("--every", type=int, metavar="SECONDS", help="a fixed interval")
    create.add_argument("--timezone", default="UTC", help="IANA name the cron is read in (default UTC)")
    create.add_argument("--start", help="first fire time, ISO 8601 (default: now)")
    create.add_argument("--end", help="last fire time, ISO 8601")
    create.add_argument("--catchup", default="latest", help="missed fire times: none, latest, all")
    create.add_argument("--max-concurrency", type=int, default=1, metavar="N")
    create.add_argument("--concurrency-policy", default="Allow", help="Allow (wait), Forbid (skip), Replace")
    create.add_argument("--retries", type=int, default=0, metavar="N", help="retries of a failed run")
    create.add_argument("--retry-backoff", type=int, default=60, metavar="S", help="seconds; doubles")
    create.add_argument("--depends-on", metavar="NAME", help="a schedule whose run must succeed first")
    create.add_argument("--depends-timeout", type=int, default=3600, metavar="S")
    create.add_argument("--paused", action="store_true", help="save it paused")
    create.add_argument(
        "--target",
        choices=["local", "cluster", "kfp"],
        help="where runs go: cluster is Argo, kfp a KFP recurring run (default: the backend's)",
    )
    parameter_option(create)

    listing = action("list", "list schedules", named=False, handler="list_schedules")
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    show = action("show", "one schedule and its runs by logical time")
    show.add_argument("--json", action="store_true", help="print JSON")
    action("pause", "stop firing (missed fire times run per catchup on resume)")
    action("resume", "fire again")
    action("delete", "delete the schedule and its run history")
    action("snapshot", "take the notebook anew; later runs execute the new snapshot")
    run = action("run", "a run now (logical time: now)")
    run.add_argument("--wait", action="store_true", help="until the run has ended")
    backfill = action("backfill", "run the logical times in a range")
    backfill.add_argument("--from", dest="start", required=True, metavar="T", help="ISO 8601 date or time")
    backfill.add_argument("--to", dest="end", required=True, metavar="T", help="ISO 8601 date or time")
    backfill.add_argument("--parallel", type=int, default=1, metavar="N", help="runs at once")
    backfill.add_argument("--dry-run", action="store_true", help="list the logical times, run nothing")
    backfill.add_argument("--rerun", action="store_true", help="run those already succeeded too")
    backfill.add_argument("--wait", action="store_true", help="until every run has ended")
    action("render", "print the Argo CronWorkflow the kubernetes backend keeps (YAML)")
