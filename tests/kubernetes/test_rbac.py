"""Least privilege, proven: the ClusterRoles `deploy/base` renders allow every request the workbench
makes, and grant nothing it never uses.

Each role (the central workbench; a notebook pod's user server) takes a tour of every Kubernetes code
path it has, through the real backends, against a fresh emulator that records each request the way
the API server's RBAC sees it (`audit.py`). "Nothing unused" is decided by the tour alone, whichever
tests pytest runs; the requests of every other test (errors, retries, re-lists, rollbacks) are
checked for "allowed" at the end of the session (`rbac_session.py`). A new request the code makes is
caught either way: not allowed, or allowed only by a new rule, which the tour must then use.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import kmock as kmock_lib
import pytest
import yaml

from cube_jupyter.config import Settings
from cube_jupyter.errors import BackendUnavailable, InvalidInput, NotFound, NotServed
from cube_jupyter.jobs.config import TRAINING_APIS
from cube_jupyter.jobs.kubernetes.backend import KubernetesJobBackend
from cube_jupyter.jobs.serving_spec import ServingSpec
from cube_jupyter.jobs.training_spec import FRAMEWORKS
from cube_jupyter.jobs.tuning_spec import TuningSpec
from cube_jupyter.kube.client import KubeClient
from cube_jupyter.kube.labels import USER_LABEL
from cube_jupyter.kube.namespace_objects import render_namespace_objects
from cube_jupyter.kube.resources import resource_type
from cube_jupyter.notebooks.render import render_notebook_objects
from cube_jupyter.notebooks.spec import NotebookSpec
from cube_jupyter.storage.config import CREDENTIAL_KEYS
from tests.kubernetes import rbac, test_jobs_k8s, test_workflows
from tests.kubernetes.actors import kubeflow_profile
from tests.kubernetes.audit import ApiRequest, request_info
from tests.kubernetes.conftest import make_settings
from tests.kubernetes.emulator import ApiServerEmulator
from tests.kubernetes.test_jobs_k8s import (
    JOB_RESOURCES,
    NS,
    SERVE,
    TUNE,
    Kubelet,
    job_of,
    replica_pod,
    training,
)
from tests.kubernetes.test_workflows import WORKFLOWS, submit
from tests.upstream import trainer_runtimes
from tests.waiting import wait_until_async

HOME = "kubeflow"  # the workbench's own namespace
SECRET = "cube-s3-credentials"  # the one Secret name deploy/base/rbac.yaml lets the workbench read


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def creating(**spawner: Any) -> Settings:
    """Settings making users' namespaces, copying the store's credentials into each."""
    return make_settings(
        {"namespace": HOME}, storage={"credentials_secret": SECRET}, create_namespaces=True, **spawner
    )


def contributor(namespace: str, user: str, role: str) -> dict[str, Any]:
    """The RoleBinding KFAM writes when an owner shares their namespace."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {
            "name": f"user-{user.replace('@', '-').replace('.', '-')}-clusterrole-{role}",
            "namespace": namespace,
            "annotations": {"user": user, "role": role},
        },
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": f"kubeflow-{role}",
        },
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }


pytestmark = pytest.mark.timeout(180)

Make = Callable[..., Awaitable[Any]]

# The fixtures that start each feature's backend on the emulator (and close it), and the kubelet.
kubelet = test_jobs_k8s.kubelet
make_jobs = test_jobs_k8s.make_jobs
make_runs = test_workflows.make_runs


@pytest.fixture
def kmock(kmock: ApiServerEmulator, kubelet: Kubelet) -> ApiServerEmulator:
    """A Kubeflow cluster with every operator the workbench drives (Argo Workflows, Trainer v2 with its
    preset runtimes, the Training Operator, Katib, KServe), a kubelet serving pod logs, and the
    workbench's own namespace holding the artifact store's credentials."""
    kmock.resources[WORKFLOWS] = kmock_lib.ResourceInfo(kind="Workflow", namespaced=True)
    for name, info in JOB_RESOURCES.items():
        kmock.resources[name] = kmock_lib.ResourceInfo(**info)
    presets = trainer_runtimes()
    credentials = {key: b64(key.lower()) for key in CREDENTIAL_KEYS}
    kmock.preload(
        [
            *(yaml.safe_load(path.read_text()) for path in presets),
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": HOME}},
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": SECRET, "namespace": HOME},
                "data": credentials,
            },
        ]
    )
    (
        kmock[kmock_lib.action.FETCH, kmock_lib.resource("v1/pods"), kmock_lib.subresource("log")]
        << kubelet.serve
    )
    return kmock


# -- the tour ------------------------------------------------------------------------------------


async def notebook_servers(make_backend: Make, kmock: ApiServerEmulator, settings: Settings) -> None:
    """Everything a user does with servers; a delete that fails halfway, whose leftovers (the policy,
    the user-server config, the workspace) the next create of that name adopts; a create that fails
    halfway, rolled back."""
    backend = await make_backend(settings)
    gpu = NotebookSpec("alice", "nb1", settings.notebooks.profile("gpu"))
    await backend.create_server(gpu)
    await backend.create_server(NotebookSpec("alice", "nb2", settings.notebooks.profile("cpu")))
    await backend.set_stopped("alice", "nb1", True)
    await backend.set_stopped("alice", "nb1", False)
    kmock.fail_next("delete", "v1/configmaps", 500, "etcd is down")
    with pytest.raises(BackendUnavailable):
        await backend.delete_server("alice", "nb1")
    await backend.create_server(gpu)
    for name in ("nb1", "nb2"):
        await backend.delete_server("alice", name)
    # A create refused at its last object: everything it made (the workspace too) is deleted again.
    spec = NotebookSpec("alice", "nb3", settings.notebooks.profile("cpu"))
    last = render_notebook_objects(spec, settings.notebooks)[-1]
    plural = resource_type(last["apiVersion"], last["kind"]).plural
    kmock.fail_next("create", f"{last['apiVersion']}/{plural}", 500, "etcd is down")
    with pytest.raises(BackendUnavailable):
        await backend.create_server(spec)
    assert backend.list_servers("alice") == []


async def user_namespaces(make_backend: Make, kube: KubeClient) -> None:
    """`create_namespaces`: a user's namespace made ready; made ready again after each object in it
    drifted (an older workbench labelled it otherwise), and after its RoleBinding named another role."""
    settings = creating()
    backend = await make_backend(settings)

    async def server(name: str) -> None:
        await backend.create_server(NotebookSpec("carol", name, settings.notebooks.profile("cpu")))

    await server("nb1")
    made = render_namespace_objects(settings, "carol", "cube-carol", dict.fromkeys(CREDENTIAL_KEYS, ""))
    for obj in made:
        meta, drift = obj["metadata"], {"metadata": {"labels": {USER_LABEL: None}}}
        await asyncio.to_thread(
            kube.patch, obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"], drift
        )
    await server("nb2")
    [binding] = [obj for obj in made if obj["kind"] == "RoleBinding"]
    await asyncio.to_thread(kube.delete_object, binding)
    await asyncio.to_thread(
        kube.create, {**binding, "roleRef": {**binding["roleRef"], "name": "an-older-role"}}
    )
    await server("nb3")


async def kubeflow_profiles(make_backend: Make, kmock: ApiServerEmulator) -> None:
    """`namespace_source = "kubeflow-profile"`: an owner's server goes to their Profile's namespace;
    a contributor without one is told where they contribute."""
    owner, other = "alice@example.com", "bob@example.com"
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml-team"}}
    kmock.preload([kubeflow_profile("ml-team", owner), namespace, contributor("ml-team", other, "edit")])
    settings = make_settings(namespace_source="kubeflow-profile")
    backend = await make_backend(settings)
    server = await backend.create_server(NotebookSpec(owner, "nb1", settings.notebooks.profile("cpu")))
    assert server.namespace == "ml-team"
    with pytest.raises(NotFound, match="contributor in: ml-team"):
        await backend.create_server(NotebookSpec(other, "nb1", settings.notebooks.profile("cpu")))


async def pipeline_runs(make_runs: Make, settings: Settings) -> None:
    runs = await make_runs(settings)
    await submit(runs)
    assert (await runs.cancel("alice", "run-1")).status == "cancelled"


async def jobs_of_every_kind(
    make_jobs: Make, kube: KubeClient, kubelet: Kubelet, workbench: dict[str, Any] | None = None
) -> None:
    """Training in every framework on every training API an admin can pin (refused before any
    request where that API cannot run the framework), a replica's log, tuning, serving and a canary
    roll-out; then every job deleted."""
    for api in TRAINING_APIS:
        jobs: KubernetesJobBackend = await make_jobs(make_settings(workbench, jobs={"training_api": api}))
        for framework in FRAMEWORKS:
            spec = {"name": f"{framework}-{api}", "framework": framework, "replicas": {"worker": 2}}
            with contextlib.suppress(InvalidInput, NotServed):
                await jobs.submit("training", training({**spec, "command": ["python", "train.py"]}))
    pod = await replica_pod(kube, "pytorch-training-operator-v1", "worker", 0, "Running")
    await wait_until_async(lambda: job_of(jobs, "pytorch-training-operator-v1").replicas[0].pod == pod)
    kubelet.write(NS, pod, "epoch 1\n")
    kubelet.terminate(NS, pod)
    assert [line async for line in jobs.logs(job_of(jobs, "pytorch-training-operator-v1"), "worker-0")] == [
        "epoch 1\n"
    ]
    await jobs.submit("tuning", TuningSpec.from_dict(TUNE, user="alice"))
    await jobs.submit("serving", ServingSpec.from_dict(SERVE, user="alice"))
    canary = {**SERVE, "storage_uri": "s3://models/iris-v2", "canary_traffic_percent": 20}
    await jobs.roll_out(ServingSpec.from_dict(canary, user="alice"))
    for job in jobs.list("alice"):
        await jobs.delete("alice", job.name)


USER_SERVER = {"role": "user", "default_user": "alice", "namespace": NS}


@pytest.fixture
def tour(
    kmock: ApiServerEmulator,
    kube: KubeClient,
    kubelet: Kubelet,
    make_backend: Make,
    make_runs: Make,
    make_jobs: Make,
) -> Callable[[str], Awaitable[None]]:
    """What each role does on a cluster (as cube_jupyter_server.app wires it): the central workbench
    serves notebook servers, pipelines and jobs; a user server, its owner's pipelines and jobs in its
    own namespace, reading its owner's servers there for the GPU ledger."""

    async def workbench() -> None:
        for kind in ("Notebook", "StatefulSet"):
            settings = make_settings(resource_kind=kind, gpu_quota_per_user=2)
            await notebook_servers(make_backend, kmock, settings)
        await user_namespaces(make_backend, kube)
        await kubeflow_profiles(make_backend, kmock)
        await pipeline_runs(make_runs, make_settings())
        await jobs_of_every_kind(make_jobs, kube, kubelet)

    async def user() -> None:
        for kind in ("Notebook", "StatefulSet"):
            assert (await make_backend(make_settings(USER_SERVER, resource_kind=kind))).list_servers(
                "alice"
            ) == []
        settings = make_settings(USER_SERVER)
        await pipeline_runs(make_runs, settings)
        await jobs_of_every_kind(make_jobs, kube, kubelet, USER_SERVER)

    tours = {"workbench": workbench, "user": user}
    assert set(tours) == set(rbac.ROLE_CLUSTER_ROLES)
    return lambda role: tours[role]()


# What runs as the notebook pods' ServiceAccount besides the extension, and no test here can run:
# Argo's executor (3.4 and later) in each pipeline step pod reports the step's outputs as a
# WorkflowTaskResult (https://argo-workflows.readthedocs.io/en/latest/workflow-rbac/).
ARGO_EXECUTOR = [
    ApiRequest("user", verb, "argoproj.io", "workflowtaskresults", namespace="cube-alice")
    for verb in ("create", "patch")
]


@pytest.mark.parametrize("role", sorted(rbac.ROLE_CLUSTER_ROLES))
async def test_each_role_is_granted_exactly_what_its_code_uses(
    role: str, tour: Callable[[str], Awaitable[None]], kmock: ApiServerEmulator
) -> None:
    await tour(role)
    recorded = list(kmock.audit)
    # Only the role's own requests were recorded: none of the tests' controllers and kubelet.
    assert {request.role for request in recorded} == {role}
    recorded += ARGO_EXECUTOR if role == "user" else []
    policy = await asyncio.to_thread(rbac.base_policy)
    denied = rbac.denied(policy, recorded)
    assert not denied, "not allowed:\n" + "\n".join(denied)
    unused = rbac.unused(role, policy, recorded)
    assert not unused, "granted, never used:\n" + "\n".join(unused)


# -- the judge itself ----------------------------------------------------------------------------


def test_requests_are_read_as_the_api_servers_rbac_reads_them() -> None:
    def read(method: str, path: str, **query: str) -> tuple[Any, ...]:
        info = request_info(method, path, query, "workbench")
        return (info.verb, info.group, info.combined_resource, info.namespace, info.name, info.path)

    assert read("GET", "/api/v1/pods", watch="true") == ("watch", "", "pods", None, "", "")
    assert read("GET", "/apis/kubeflow.org/v1/namespaces/a/notebooks") == (
        "list",
        "kubeflow.org",
        "notebooks",
        "a",
        "",
        "",
    )
    assert read("GET", "/api/v1/namespaces/a/pods/p/log") == ("get", "", "pods/log", "a", "p", "")
    assert read("PATCH", "/apis/apps/v1/namespaces/a/statefulsets/s") == (
        "patch",
        "apps",
        "statefulsets",
        "a",
        "s",
        "",
    )
    assert read("DELETE", "/api/v1/namespaces/a/pods") == ("deletecollection", "", "pods", "a", "", "")
    assert read("GET", "/api/v1/namespaces/a") == ("get", "", "namespaces", "a", "a", "")
    assert read("PUT", "/api/v1/namespaces/a/finalize") == ("update", "", "namespaces/finalize", "a", "a", "")
    assert read("POST", "/api/v1/namespaces") == ("create", "", "namespaces", None, "", "")
    assert read("GET", "/apis/kubeflow.org/v1/profiles", fieldSelector="metadata.name=p")[:5] == (
        "list",
        "kubeflow.org",
        "profiles",
        None,
        "p",
    )
    assert read("GET", "/apis/trainer.kubeflow.org/v1alpha1") == (
        "get",
        "",
        "",
        None,
        "",
        "/apis/trainer.kubeflow.org/v1alpha1",
    )


def test_rules_match_as_the_rbac_authorizer_matches_them() -> None:
    def request(verb: str, resource: str, namespace: str | None = "a", name: str = "") -> ApiRequest:
        plural, _, subresource = resource.partition("/")
        return ApiRequest("workbench", verb, "", plural, subresource, namespace, name)

    logs = rbac.Rule(("",), ("pods/log",), ("get",))
    assert logs.allows(request("get", "pods/log")) and not logs.allows(request("get", "pods"))
    assert rbac.Rule(("",), ("*/log",), ("get",)).allows(request("get", "pods/log"))
    assert not rbac.Rule(("",), ("pods",), ("get",)).allows(request("get", "pods/log"))
    assert not rbac.Rule(("apps",), ("pods",), ("get",)).allows(request("get", "pods"))
    named = rbac.Rule(("",), ("secrets",), ("get",), resource_names=("s3",))
    assert named.allows(request("get", "secrets", name="s3")) and not named.allows(
        request("get", "secrets", name="x")
    )
    assert not named.allows(request("list", "secrets"))

    manifests = [
        {
            "kind": "ClusterRole",
            "metadata": {"name": "cube-jupyter"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "*"]}],
        },
        {"kind": "ClusterRoleBinding", "roleRef": {"kind": "ClusterRole", "name": "cube-jupyter"}},
        {
            "kind": "ClusterRole",
            "metadata": {"name": "cube-jupyter-user"},
            "rules": [{"apiGroups": [""], "resources": ["pods", "events"], "verbs": ["list"]}],
        },
    ]
    policy = rbac.Policy.from_manifests(manifests)
    cluster_wide = request("list", "pods", None)
    assert rbac.denied(policy, [cluster_wide]) == []
    user = ApiRequest("user", "list", "", "pods")
    assert "bound per namespace only" in rbac.denied(policy, [user])[0]
    assert rbac.denied(policy, [ApiRequest("user", "list", "", "pods", namespace="a")]) == []
    assert "names no role" in rbac.denied(policy, [ApiRequest(None, "list", "", "pods", namespace="a")])[0]
    assert rbac.denied(policy, [ApiRequest("user", "get", path="/apis/argoproj.io/v1alpha1")]) == []
    assert rbac.unused("workbench", policy, [cluster_wide]) == [
        'cube-jupyter grants `*` (* pods in group ""): name what is used'
    ]
    assert rbac.unused("user", policy, [ApiRequest("user", "list", "", "pods", namespace="a")]) == [
        'cube-jupyter-user grants list events in group "", which nothing used'
    ]
    # Writing a binding to a role needs `bind` on it, or every permission the role grants.
    bind = ApiRequest(
        "workbench", "bind", "rbac.authorization.k8s.io", "clusterroles", "", "a", "cube-jupyter-user"
    )
    assert "not allowed to the workbench role" in rbac.denied(policy, [bind])[0]  # it lacks `list events`
    manifests[0]["rules"][0]["resources"].append("events")
    assert rbac.denied(rbac.Policy.from_manifests(manifests), [bind]) == []
