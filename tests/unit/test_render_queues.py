"""Notebook servers on Kueue queues: a profile's LocalQueue (`CubeQueues.profile_queues`), else the
admin's for servers, on the Notebook (whose controller copies its labels onto the pod: Kueue's pod
integration) or on the StatefulSet and its pod template (Kueue's StatefulSet integration); a server
with no queue gets no Kueue label. Kueue holding a server for real: tests/cluster."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from traitlets.config import Config

from cube_jupyter.config import load_settings
from cube_jupyter.notebooks.render import render_notebook_objects
from cube_jupyter.notebooks.spec import NotebookSpec
from cube_jupyter.queues import PRIORITY_LABEL, QUEUE_LABEL
from tests.k8s_schemas import validate_objects
from tests.unit.test_render import PROFILES, by_kind

QUEUES = {
    "queues": {"notebook": "notebooks"},
    "profile_queues": {"gpu": "gpu-notebooks"},
    "priority_classes": {"notebook": "interactive"},
}


def render(kind: str, profile: str, **queues: object) -> list[dict[str, Any]]:
    config = Config()
    config.CubeSpawner.profiles = copy.deepcopy(PROFILES)
    config.CubeSpawner.resource_kind = kind
    for key, value in queues.items():
        setattr(config.CubeQueues, key, value)
    settings = load_settings(config).notebooks
    return render_notebook_objects(NotebookSpec("alice", "nb1", settings.profile(profile)), settings)


@pytest.mark.parametrize(("profile", "queue"), [("gpu", "gpu-notebooks"), ("cpu", "notebooks")])
def test_a_notebook_and_so_its_pod_carry_the_profiles_queue(profile: str, queue: str) -> None:
    objects = render("Notebook", profile, **QUEUES)
    validate_objects(objects)
    labels = by_kind(objects, "Notebook")["metadata"]["labels"]
    assert labels[QUEUE_LABEL] == queue and labels[PRIORITY_LABEL] == "interactive"
    assert all(QUEUE_LABEL not in o["metadata"].get("labels", {}) for o in objects if o["kind"] != "Notebook")


def test_a_statefulset_and_its_pod_template_carry_the_queue() -> None:
    objects = render("StatefulSet", "gpu", **QUEUES)
    validate_objects(objects)
    statefulset = by_kind(objects, "StatefulSet")
    assert statefulset["metadata"]["labels"][QUEUE_LABEL] == "gpu-notebooks"
    assert statefulset["spec"]["template"]["metadata"]["labels"][QUEUE_LABEL] == "gpu-notebooks"


def test_without_queues_a_server_is_not_queued() -> None:
    for kind in ("Notebook", "StatefulSet"):
        assert QUEUE_LABEL not in str(render(kind, "gpu"))


def test_with_kueue_the_namespace_gpu_quota_is_kueues_not_a_resource_quota() -> None:
    """A namespace ResourceQuota would refuse the pod Kueue holds back at its gate (and an admitted
    job's pods past it): with any Kueue queue, the ClusterQueue's quota stands in for it."""

    def kinds(**queues: object) -> list[str]:
        config = Config()
        config.CubeSpawner.profiles = copy.deepcopy(PROFILES)
        config.CubeWorkbench.gpu_quota_per_user = 2
        for key, value in queues.items():
            setattr(config.CubeQueues, key, value)
        settings = load_settings(config).notebooks
        spec = NotebookSpec("alice", "nb1", settings.profile("gpu"))
        return [o["kind"] for o in render_notebook_objects(spec, settings)]

    assert "ResourceQuota" in kinds()
    assert "ResourceQuota" not in kinds(queues={"training": "gpu-jobs"})
