"""Scheduled notebooks on the real control plane, as the central workbench runs them (its
ServiceAccount's token, the composition root's wiring): a cluster notebook schedule is a CronWorkflow
the API server takes strictly and Argo's own controller fires, each run labelled with its logical
time and recorded in the schedule's history; pause, a refused change and delete reach the cluster as
they should; a backfill submits one ordinary Workflow per logical time, labelled the same way."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from cube_jupyter.errors import InvalidInput, NotFound
from cube_jupyter.kube.client import KubeClient
from cube_jupyter.kube.cluster import Cluster
from cube_jupyter.kube.labels import LOGICAL_DATE_LABEL, SCHEDULE_LABEL
from cube_jupyter.schedules.kubernetes.cron import API_VERSION, KIND, logical_date_of
from cube_jupyter.schedules.kubernetes.mirror import CRON_WORKFLOW_LABEL
from cube_jupyter.schedules.kubernetes.upstream import phases_for
from cube_jupyter.schedules.service import ScheduleService
from cube_jupyter.services import Workbench
from tests.cluster.conftest import USERS, api_client
from tests.cluster.controlplane import State
from tests.cluster.servers import eventually
from tests.k8s_schemas import validate_object
from tests.kubernetes.conftest import make_settings
from tests.pipelines.notebooks import code, notebook, write

ALICE = "alice@example.com"
NAMESPACE = USERS[ALICE]
DATED = notebook(
    code("logical_date = None\nscale = 2", "parameters"),
    code("stamp = logical_date\nsize = scale * 10", "step:extract"),
    code("print('ran for', stamp, size)", "step:report"),
)
WORKFLOWS = ("argoproj.io/v1alpha1", "Workflow")


def run_workbench(
    kubeconfig: Path, root: Path, scenario: Callable[[ScheduleService], Awaitable[None]]
) -> None:
    """The central workbench's schedules (scheduler, CronWorkflow mirror) and cluster pipeline runs,
    on its own connection, around `scenario`."""
    settings = make_settings(
        {"namespace_source": "kubeflow-profile", "state_dir": str(root / "state")},
        storage={"url": "s3://ml-artifacts/runs"},
    )
    write(DATED, root / "dated.ipynb")

    async def go() -> None:
        workbench = Workbench(settings, root_dir=str(root), cluster=Cluster(settings, api_client(kubeconfig)))
        try:
            await workbench.started_pipelines()
            await workbench.schedules.start()
            await scenario(workbench.schedules)
        finally:
            await workbench.schedules.close()
            await workbench.close()

    asyncio.run(go())


def cron_workflow(admin: k8s.ApiClient, name: str) -> dict[str, Any]:
    return KubeClient(admin).get(API_VERSION, KIND, NAMESPACE, name)


def gone(admin: k8s.ApiClient, name: str) -> bool:
    try:
        cron_workflow(admin, name)
    except NotFound:
        return True
    return False


def dry_run(admin: k8s.ApiClient, obj: dict[str, Any]) -> None:
    """A create the API server checks in full (strict fields, the CRD's schema) and stores nothing."""
    k8s.CustomObjectsApi(admin).create_namespaced_custom_object(
        "argoproj.io", "v1alpha1", NAMESPACE, "cronworkflows", obj, dry_run="All", field_validation="Strict"
    )


def test_a_cluster_schedule_is_a_cron_workflow_argo_fires_and_the_history_records(
    installed: State, admin: k8s.ApiClient, workbench_kubeconfig: Path, tmp_path: Path
) -> None:
    seen: dict[str, Any] = {}

    async def scenario(schedules: ScheduleService) -> None:
        body = {
            "name": "every-minute",
            "path": "dated.ipynb",
            "cron": "* * * * *",
            "parameters": {"scale": 3},
        }
        schedule = await schedules.create(ALICE, body)
        assert schedule.spec.target == "cluster"  # the kubernetes backend's default
        cron = cron_workflow(admin, "every-minute")
        seen["cron"] = cron
        # Argo's own controller starts a Workflow at the next minute; kwok completes its pods.
        kube = KubeClient(admin)
        selector = f"{CRON_WORKFLOW_LABEL}=every-minute"

        def fired() -> list[dict[str, Any]]:
            found = kube.list(*WORKFLOWS, NAMESPACE, label_selector=selector).items
            return [w for w in found if (w.get("status") or {}).get("phase") in ("Succeeded", "Failed")]

        # Up to a minute until the next minute starts, then Argo's run on kwok.
        [workflow, *_] = await eventually("Argo firing the CronWorkflow", fired, bool, timeout=60 + 90)
        seen["workflow"] = workflow
        # In the history as it ran (origin cluster), then as it ended (the informer saw it finish).
        slots = await eventually(
            "Argo's finished run in the schedule's history",
            lambda: [
                s
                for s in schedules.runs(ALICE, "every-minute")
                if s.origin == "cluster" and s.run_id == workflow["metadata"]["name"] and s.state != "running"
            ],
            bool,
        )
        seen["slot"] = slots[-1]

        paused = await schedules.patch(ALICE, "every-minute", {"paused": True})
        assert paused.spec.paused and cron_workflow(admin, "every-minute")["spec"]["suspend"] is True
        with pytest.raises(InvalidInput) as refused:
            await schedules.patch(ALICE, "every-minute", {"cron": "0 2 * * MON"})
        assert refused.value.field == "cron"
        assert cron_workflow(admin, "every-minute")["spec"]["schedules"] == ["* * * * *"]  # unchanged
        await schedules.delete(ALICE, "every-minute")
        # gone once the garbage collector has orphaned its Workflows (runs going on finish)
        await eventually("the CronWorkflow deleted", lambda: gone(admin, "every-minute"), bool)
        assert KubeClient(admin).get(*WORKFLOWS, NAMESPACE, workflow["metadata"]["name"])

    run_workbench(workbench_kubeconfig, tmp_path, scenario)
    cron = seen["cron"]
    sent = {key: value for key, value in cron.items() if key != "status"}
    sent["metadata"] = {k: cron["metadata"][k] for k in ("name", "namespace", "labels", "annotations")}
    validate_object(sent)  # strict-valid offline, as the API server took it
    assert cron["spec"]["schedules"] == ["* * * * *"] and cron["spec"]["timezone"] == "UTC"
    assert cron["metadata"]["labels"][SCHEDULE_LABEL] == "every-minute"
    copied = copy.deepcopy(sent)
    copied["metadata"]["name"] = "dry-run"
    dry_run(admin, copied)
    copied["spec"]["schedules"] = ["0 2 * * MON"]  # what the workbench refused above, the API refuses too
    with pytest.raises(k8s.ApiException) as invalid:
        dry_run(admin, copied)
    assert invalid.value.status == 422 and "spec.schedules" in str(invalid.value.body)

    workflow, slot = seen["workflow"], seen["slot"]
    assert workflow["status"]["phase"] == "Succeeded", workflow["status"].get("message")
    labels = workflow["metadata"]["labels"]
    assert labels[SCHEDULE_LABEL] == "every-minute"
    # the logical time Argo scheduled it for, the one the history keeps for this run
    assert logical_date_of(workflow) == slot.logical
    # what a depends_on task of another schedule finds for that time, through the real API server
    assert phases_for(KubeClient(admin), NAMESPACE, "every-minute", slot.logical) == ["Succeeded"]
    assert slot.state == "succeeded" and slot.run_id == workflow["metadata"]["name"]
    steps = [t for t in workflow["spec"]["templates"] if "container" in t]
    assert all("{{workflow.scheduledTime}}" in t["container"]["args"] for t in steps)


def test_a_backfill_on_the_cluster_submits_one_labelled_workflow_per_logical_time(
    installed: State, admin: k8s.ApiClient, workbench_kubeconfig: Path, tmp_path: Path
) -> None:
    kube = KubeClient(admin)
    selector = f"{SCHEDULE_LABEL}=backfilled"

    def submitted() -> list[dict[str, Any]]:
        return kube.list(*WORKFLOWS, NAMESPACE, label_selector=selector).items

    # A daily hour half a day from now: Argo's own fire of the unpaused schedule can't come during the test.
    now = datetime.now(UTC).hour
    hour = max(range(1, 23), key=lambda h: min((h - now) % 24, (now - h) % 24))

    async def scenario(schedules: ScheduleService) -> None:
        body = {"name": "backfilled", "path": "dated.ipynb", "cron": f"0 {hour} * * *", "paused": True}
        await schedules.create(ALICE, body)
        assert cron_workflow(admin, "backfilled")["spec"]["suspend"] is True
        days = {"start": "2026-11-01T00:00:00Z", "end": "2026-11-03T23:00:00Z", "parallel": 2}
        result = schedules.backfill(ALICE, "backfilled", days)
        assert result["to_run"] == [f"2026-11-0{d}T{hour:02d}:00:00Z" for d in (1, 2, 3)]
        await schedules.patch(ALICE, "backfilled", {"paused": False})  # a paused schedule runs nothing

        def settled() -> list[Any] | None:
            slots = schedules.runs(ALICE, "backfilled")
            return slots if all(s.state == "succeeded" for s in slots) and len(slots) == 3 else None

        await eventually("the backfill's three runs succeeded", settled, bool)
        again = schedules.backfill(ALICE, "backfilled", days)
        assert again["to_run"] == [] and len(again["already_succeeded"]) == 3
        await asyncio.sleep(2)  # a scheduler pass or two: nothing more is submitted
        await schedules.delete(ALICE, "backfilled")

    run_workbench(workbench_kubeconfig, tmp_path, scenario)
    workflows = submitted()
    dates = sorted(w["metadata"]["labels"][LOGICAL_DATE_LABEL] for w in workflows)
    assert dates == [f"202611{d:02d}T{hour:02d}0000Z" for d in (1, 2, 3)]  # exactly once per logical time
    assert all(CRON_WORKFLOW_LABEL not in w["metadata"]["labels"] for w in workflows)  # the workbench's
    assert all(w["status"]["phase"] == "Succeeded" for w in workflows)
