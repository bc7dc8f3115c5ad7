"""How schedules are bounded: the `CubeSchedules` traitlets admins set.

    c.CubeSchedules.max_schedules_per_user = 50
    c.CubeSchedules.max_catchup_runs = 1000

The scheduler lives in the central workbench (never a user's notebook server), so runs go on while
every notebook server is stopped. `load_settings` checks these once at startup.
"""

from __future__ import annotations

from dataclasses import dataclass

from traitlets import Float, Int

from cube_jupyter.configurable import CubeConfigurable, checked, positive
from cube_jupyter.workbench import WorkbenchSettings


class CubeSchedules(CubeConfigurable):
    """Scheduled pipelines and training jobs."""

    poll_seconds = Float(
        1.0,
        help="The scheduler looks for work (runs that finished, schedules the CLI changed) at least this "
        "often; it wakes at each fire time too, so runs start on time whatever this is.",
    )
    on_time_seconds = Float(
        60.0,
        help="A fire time found later than this after it passed (the workbench was down, the schedule "
        "paused) counts as missed, and runs only as the schedule's `catchup` says.",
    )
    max_schedules_per_user = Int(100, help="Schedules one user may have.")
    max_catchup_runs = Int(
        1000,
        help="With `catchup: all`, at most this many missed fire times run (the newest); older are dropped.",
    )
    max_backfill_runs = Int(10000, help="Logical times one backfill may ask for.")
    max_backfill_parallel = Int(16, help="The most runs of one backfill at once.")
    history_limit = Int(
        3, help="Finished Workflows Argo keeps per CronWorkflow (successful and failed each)."
    )

    _positive = checked(
        positive,
        "poll_seconds",
        "on_time_seconds",
        "max_schedules_per_user",
        "max_catchup_runs",
        "max_backfill_runs",
        "max_backfill_parallel",
        "history_limit",
    )


@dataclass(frozen=True, kw_only=True)
class ScheduleSettings(WorkbenchSettings):
    """What the schedules feature reads: `CubeSchedules` and the workbench-wide settings."""

    schedules: CubeSchedules
