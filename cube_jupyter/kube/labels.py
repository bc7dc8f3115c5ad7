"""Labels and annotations every object the workbench creates carries, whatever the feature: who
manages it (the informers select on it) and whose it is."""

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "cube-jupyter"
SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
USER_LABEL = "cube-jupyter/user"  # the user's slug: a label value
USER_ANNOTATION = "cube-jupyter/user"  # the raw user name, which a label value could not hold
HOME = "/home/jovyan"  # the docker-stacks user's home, where workspaces and shipped code go
# A scheduled run's Workflow, however it was started (Argo's CronWorkflow, or the workbench catching
# up or backfilling): its schedule and logical time, so a run for one logical time is found by label.
SCHEDULE_LABEL = "cube-jupyter/schedule"
LOGICAL_DATE_LABEL = "cube-jupyter/logical-date"
# Why the workbench itself stopped a server or a training job (culling), and when (RFC 3339); a
# server's is removed by any user stop or start.
STOP_REASON_ANNOTATION = "cube-jupyter/stop-reason"
STOPPED_AT_ANNOTATION = "cube-jupyter/stopped-at"


def logical_date_label(logical_date: str) -> str:
    """A logical time ('2026-11-28T02:00:00Z') as a label value may hold it: '20261128T020000Z'."""
    return logical_date.replace("-", "").replace(":", "")


def logical_date_from_label(value: str) -> str | None:
    """The logical time a `logical_date_label` holds ('20261128T020000Z' → '2026-11-28T02:00:00Z')."""
    if len(value) != 16 or value[8] != "T" or not value.endswith("Z"):
        return None
    date, time = value[:8], value[9:15]
    if not (date + time).isdigit():
        return None
    return f"{date[:4]}-{date[4:6]}-{date[6:]}T{time[:2]}:{time[2:4]}:{time[4:]}Z"
