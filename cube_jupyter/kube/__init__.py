"""Shared infrastructure for the cluster: one API client, one informer registry (`cluster.Cluster`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cube_jupyter.config import Settings
    from cube_jupyter.kube.cluster import Cluster


def cluster_for(settings: Settings) -> Cluster | None:
    """The cluster every Kubernetes backend of this process shares; None with the local backend,
    which never loads the Kubernetes client."""
    if settings.workbench.backend != "kubernetes":
        return None
    from cube_jupyter.kube.cluster import Cluster

    return Cluster(settings)
