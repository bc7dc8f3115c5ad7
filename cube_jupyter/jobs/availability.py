"""What this workbench can run, for the launch forms (`GET /cube/api/v1/jobs/config`): for each
training framework, for tuning and for serving, whether a job can be submitted, as what, and if not,
why. Locally everything runs as processes; on a cluster it depends on the operators it serves
(`jobs.kubernetes.apis.cluster_availability`)."""

from __future__ import annotations

from typing import Any

from cube_jupyter.jobs.config import JobSettings
from cube_jupyter.jobs.training_spec import FRAMEWORKS
from cube_jupyter.queues import QUEUE_LABEL


def usable(via: str | None, reason: str | None = None) -> dict[str, Any]:
    """One entry: `via` what the job becomes (a kind, or processes), None with the `reason`."""
    return {"available": via is not None, "via": via, "reason": None if via is not None else reason}


def availability(
    backend: str,
    config: JobSettings,
    *,
    served: dict[str, bool] | None,
    training: dict[str, dict[str, Any]],
    tuning: dict[str, Any],
    serving: dict[str, Any],
) -> dict[str, Any]:
    """The whole answer: `served` is each job kind the cluster was asked about (None: not asked yet)."""
    queues = config.queues
    cluster = backend == "kubernetes"  # Kueue's queues are the cluster's; locally one queue for all
    return {
        "backend": backend,
        "training_api": config.jobs.training_api,
        "discovered": served is not None,
        "served": served or {},
        "training": training,
        "tuning": tuning,
        "serving": serving,
        "queues": {
            "offered": list(queues.user_queues) if cluster else [],
            "priorities": list(queues.user_priority_classes) if cluster else [],
            "defaults": {
                kind: queues.choose(kind).get(QUEUE_LABEL) if cluster else None
                for kind in ("training", "tuning")
            },
        },
    }


def local_availability(config: JobSettings) -> dict[str, Any]:
    return availability(
        "local",
        config,
        served={},
        training={framework: usable("processes") for framework in FRAMEWORKS},
        tuning=usable("processes"),
        serving=usable("processes"),
    )
