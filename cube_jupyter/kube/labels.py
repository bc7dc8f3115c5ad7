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


def logical_date_label(logical_date: str) -> str:
    """A logical time ('2026-11-28T02:00:00Z') as a label value may hold it: '20261128T020000Z'."""
    return logical_date.replace("-", "").replace(":", "")
