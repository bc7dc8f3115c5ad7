"""The cluster tests' fixtures: one real control plane for the session (tests/cluster/controlplane.py),
installed as an admin would install cube-jupyter on a Kubeflow cluster:

- the CRDs of the projects it renders for (tests/upstream.py), Kubeflow's Profile among them, and
  Argo Workflows' own workflow-controller (built with the plane), as Kubeflow Pipelines ships it;
  Kubeflow Trainer v2's controller manager and JobSet's (built with the plane too), with Trainer's
  preset ClusterTrainingRuntimes, as Kubeflow ships them;
- Kubeflow's `kubeflow-edit` aggregated ClusterRole (Kubernetes' `edit` rules and those labelled for
  it, cube-jupyter-user's among them), as Kubeflow's manifests make it;
- `kubectl apply -k deploy/overlays/kubeflow --server-side`: the workbench's ServiceAccount, its
  ClusterRoles and binding, its Deployment, Service, VirtualService and AuthorizationPolicy;
- for each user, a Profile and what Kubeflow's profile controller makes of it: the namespace and its
  `default-editor` ServiceAccount bound to `kubeflow-edit`.

The workbench under test then talks to the API server with the token of its own ServiceAccount
(TokenRequest), so every request it makes goes through Kubernetes' RBAC authorizer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from cube_jupyter.kube.client import KubeClient
from tests.cluster import controlplane
from tests.cluster.controlplane import State
from tests.upstream import crd_documents, crd_files, trainer_runtimes

REPO = Path(__file__).resolve().parents[2]
OVERLAY = REPO / "deploy" / "overlays" / "kubeflow"
WORKBENCH_NAMESPACE = "kubeflow"
WORKBENCH_ACCOUNT = "cube-jupyter"
USERS = {"alice@example.com": "kubeflow-user-alice", "bob@example.com": "kubeflow-user-bob"}
KUBEFLOW_EDIT = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "metadata": {"name": "kubeflow-edit"},
    "aggregationRule": {
        "clusterRoleSelectors": [
            {"matchLabels": {"rbac.authorization.kubeflow.org/aggregate-to-kubeflow-edit": "true"}}
        ]
    },
    "rules": [],
}
# Kubeflow's bridge from Kubernetes' own `edit` role into `kubeflow-edit`: a profile's editors may
# make pods, services, jobs... as with kubectl in a terminal.
KUBEFLOW_KUBERNETES_EDIT = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "metadata": {
        "name": "kubeflow-kubernetes-edit",
        "labels": {"rbac.authorization.kubeflow.org/aggregate-to-kubeflow-edit": "true"},
    },
    "aggregationRule": {
        "clusterRoleSelectors": [{"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-edit": "true"}}]
    },
    "rules": [],
}


AGENT = "cube-jupyter-cluster-test"
_running = {"test": ""}  # the test under way: each client it makes says so in its User-Agent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Cluster tests get time to start the plane; the least-privilege proof runs last, over the audit
    log of everything the others made the workbench do."""
    cluster = [item for item in items if "tests/cluster/" in str(item.fspath)]
    for item in cluster:
        item.add_marker(pytest.mark.timeout(600))
    last = [item for item in cluster if "test_least_privilege" in str(item.fspath)]
    items[:] = [item for item in items if item not in last] + last


@pytest.fixture(autouse=True)
def _name_the_test(request: pytest.FixtureRequest) -> Iterator[None]:
    _running["test"] = request.node.nodeid
    yield
    _running["test"] = ""


class Kubectl:
    """kubectl as a given kubeconfig (the admin's, or a ServiceAccount's)."""

    def __init__(self, binary: Path, kubeconfig: Path) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig

    def __call__(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(self.binary), f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {done.stderr.strip()}")
        return done

    def apply(self, objects: list[dict[str, Any]]) -> None:
        self("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=yaml.safe_dump_all(objects))


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[State]:
    directory = tmp_path_factory.mktemp("control-plane")
    state = controlplane.up(directory)
    try:
        yield state
    finally:
        controlplane.down(directory)


@pytest.fixture(scope="session")
def kubectl(control_plane: State) -> Kubectl:
    return Kubectl(controlplane.kubectl(), control_plane.kubeconfig)


def api_client(kubeconfig: Path, *, agent: str = AGENT) -> k8s.ApiClient:
    """A client as `kubeconfig`'s user, its User-Agent naming the test that made it (the audit log
    says which test made which request); a test playing a person (kubectl) passes another `agent`."""
    client = k8s_config.new_client_from_config(config_file=str(kubeconfig))
    client.user_agent = f"{agent} {_running['test']}"
    return client


@pytest.fixture(scope="session")
def admin(control_plane: State) -> Iterator[k8s.ApiClient]:
    client = api_client(control_plane.kubeconfig)
    yield client
    client.close()


def wait_for(what: str, check: Callable[[], Any], timeout: float = 90.0) -> Any:
    """Poll `check` until it returns something true; its value."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)


@contextmanager
def without_crd(kubectl: Kubectl, crd: str) -> Iterator[None]:
    """The cluster with the CRD named `crd` deleted (every object of its kind goes with it), then
    installed again from its upstream file and served before the next test."""
    [path] = [p for p in crd_files() for doc in crd_documents(p) if doc["metadata"]["name"] == crd]
    group = crd.split(".", 1)[1]

    def discovered() -> bool:  # what a client's discovery sees, which follows the CRD a moment later
        return crd in kubectl("api-resources", f"--api-group={group}", "-o", "name").stdout.split()

    kubectl("delete", "crd", crd, "--wait=true")
    try:
        wait_for(f"{crd} gone from discovery", lambda: not discovered())
        yield
    finally:
        kubectl("apply", "--server-side", "-f", str(path))
        conditions = "jsonpath={range .status.conditions[*]}{.type}={.status} {end}"
        wait_for(
            f"{crd} served again",
            lambda: (
                "Established=True" in kubectl("get", "crd", crd, "-o", conditions).stdout and discovered()
            ),
        )


@contextmanager
def resource_quota(admin: k8s.ApiClient, namespace: str, name: str, hard: dict[str, str]) -> Iterator[None]:
    """An admin's own ResourceQuota (not the workbench's) while the block runs; admission refuses
    everything a quota covers until the quota controller has counted it, so it waits for that."""
    kube = KubeClient(admin)
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"hard": hard},
        }
    )
    try:
        wait_for(
            f"quota {name} counted",
            lambda: kube.get("v1", "ResourceQuota", namespace, name).get("status", {}).get("hard"),
        )
        yield
    finally:
        kube.delete("v1", "ResourceQuota", namespace, name)


@pytest.fixture(scope="session")
def installed(control_plane: State, kubectl: Kubectl, admin: k8s.ApiClient) -> State:
    """cube-jupyter installed on a Kubeflow cluster (module docstring)."""
    for path in crd_files():
        kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
    names = [doc["metadata"]["name"] for path in crd_files() for doc in crd_documents(path)]
    kubectl("wait", "--for=condition=Established", "--timeout=120s", *(f"crd/{name}" for name in names))
    controlplane.start_argo(control_plane)  # Kubeflow ships Argo's controller (for its pipelines)
    controlplane.start_trainer(control_plane)  # and Trainer v2 with JobSet, its runtimes preset
    for path in trainer_runtimes():
        kubectl("apply", "--server-side", "-f", str(path))
    home = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": WORKBENCH_NAMESPACE}}
    kubectl.apply([home, KUBEFLOW_EDIT, KUBEFLOW_KUBERNETES_EDIT])
    kubectl("apply", "--server-side", "--force-conflicts", "-k", str(OVERLAY))
    for user, namespace in USERS.items():
        kubectl.apply(profile_objects(user, namespace))
    return control_plane


def profile_objects(user: str, namespace: str) -> list[dict[str, Any]]:
    """A Profile and what Kubeflow's profile controller makes of it."""
    return [
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "Profile",
            "metadata": {"name": namespace},
            "spec": {"owner": {"kind": "User", "name": user}},
        },
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": namespace,
                "labels": {"istio-injection": "enabled", "app.kubernetes.io/part-of": "kubeflow-profile"},
                "annotations": {"owner": user},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "default-editor", "namespace": namespace},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "default-editor", "namespace": namespace},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "kubeflow-edit",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "default-editor", "namespace": namespace}],
        },
    ]


def cli_in_user_pod(
    kubeconfig: Path, namespace: str, folder: Path, config: list[str], argv: list[str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`cube-jupyter ARGV` in a notebook pod's terminal: the pod's role and namespace (what the
    rendered pod sets), `kubeconfig`'s token, the config lines `config` (`c.X.y = ...`) in `folder`."""
    (folder / "cube_config.py").write_text("".join(f"{line}\n" for line in config))
    environ = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "PYTHONPATH": os.pathsep.join(sys.path),
        "CUBE_JUPYTER_ROLE": "user",
        "CUBE_JUPYTER_NAMESPACE": namespace,
    }
    environ.pop("KUBERNETES_SERVICE_HOST", None)
    return subprocess.run(
        [sys.executable, "-m", "cube_jupyter.cli", *argv, "--config", "cube_config.py"],
        cwd=folder,
        env=environ,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def service_account_kubeconfig(state: State, namespace: str, account: str, path: Path) -> Path:
    """A kubeconfig holding a fresh token of `namespace/account` (TokenRequest, one hour)."""
    core = k8s.CoreV1Api(api_client(state.kubeconfig))
    request = k8s.AuthenticationV1TokenRequest(
        spec=k8s.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
    )
    status = core.create_namespaced_service_account_token(account, namespace, request).status
    assert status is not None and status.token, f"no token for {namespace}/{account}"
    token: str = status.token
    controlplane.write_kubeconfig(
        state, path, Path(state.directory) / "pki" / "ca.crt", token, user=f"{namespace}:{account}"
    )
    return path


@pytest.fixture(scope="session")
def workbench_kubeconfig(installed: State, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The workbench's own identity: its ServiceAccount's token, as its pod would mount it."""
    folder = tmp_path_factory.mktemp("workbench-identity")
    return service_account_kubeconfig(
        installed, WORKBENCH_NAMESPACE, WORKBENCH_ACCOUNT, folder / "kubeconfig"
    )


SANDBOX = "sandbox"  # a namespace whose `editor` ServiceAccount tests the client and informer with


@pytest.fixture(scope="session")
def sandbox_kubeconfig(installed: State, kubectl: Kubectl, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ServiceAccount with Kubernetes' `edit` role in its own namespace only: its requests are in
    the audit log (an admin's are not), and past that namespace it meets the authorizer's 403."""
    kubectl.apply(
        [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SANDBOX}},
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": "editor", "namespace": SANDBOX},
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "editor-edit", "namespace": SANDBOX},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
                "subjects": [{"kind": "ServiceAccount", "name": "editor", "namespace": SANDBOX}],
            },
        ]
    )
    folder = tmp_path_factory.mktemp("sandbox-editor")
    return service_account_kubeconfig(installed, SANDBOX, "editor", folder / "kubeconfig")


@dataclass(frozen=True)
class Audited:
    """One request the API server answered, as its audit log records it."""

    verb: str
    resource: str
    namespace: str
    name: str
    code: int
    path: str
    query: dict[str, str]


def requests_of(state: State, test: str) -> list[Audited]:
    """The requests clients made for `test` (by its node id in their User-Agent), in order."""
    made = []
    for line in (Path(state.directory) / controlplane.AUDIT_LOG).read_text().splitlines():
        event = json.loads(line)
        if event.get("stage") != "ResponseComplete" or event.get("userAgent") != f"{AGENT} {test}":
            continue
        ref = event.get("objectRef") or {}
        made.append(
            Audited(
                event["verb"],
                ref.get("resource", ""),
                ref.get("namespace", ""),
                ref.get("name", ""),
                int(event.get("responseStatus", {}).get("code", 0)),
                urlsplit(event.get("requestURI", "")).path,
                dict(parse_qsl(urlsplit(event.get("requestURI", "")).query)),
            )
        )
    return made


def as_json(obj: Any) -> Any:
    return json.loads(json.dumps(obj, default=str))


# --- Kueue: queue admission by Kueue's own controller ----------------------------------------------

KUEUE_API = "kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"  # on a Job, JobSet, TrainJob or pod: its LocalQueue
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"  # and its WorkloadPriorityClass


@pytest.fixture(scope="session")
def kueue(installed: State) -> State:
    """Kueue's controller started once (controlplane.start_kueue): from then on, for the rest of the
    session, whatever carries QUEUE_LABEL waits for its ClusterQueue's quota. Queues: `kueue_queue`."""
    controlplane.start_kueue(installed)
    return installed


@contextmanager
def applied(kubectl: Kubectl, objects: list[dict[str, Any]]) -> Iterator[None]:
    """`objects` created (server-side apply) while the block runs, deleted after it in reverse order."""
    kubectl.apply(objects)
    try:
        yield
    finally:
        for obj in reversed(objects):
            namespace = obj["metadata"].get("namespace")
            where = [f"--namespace={namespace}"] if namespace else []
            group = obj["apiVersion"].rpartition("/")[0]
            kind = f"{obj['kind'].lower()}.{group}" if group else obj["kind"].lower()
            kubectl("delete", kind, obj["metadata"]["name"], *where, "--ignore-not-found", "--wait=true")


def kueue_queue_objects(
    namespace: str,
    name: str,
    quota: dict[str, str],
    *,
    node_labels: dict[str, str] | None = None,
    tolerations: list[dict[str, str]] | None = None,
) -> list[dict[str, Any]]:
    """A ResourceFlavor, a ClusterQueue giving every namespace `quota` of it (nominal quota by
    resource name: {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "4"}), and the LocalQueue `name`
    in `namespace` submitting to it; all three named `name` (the flavor and ClusterQueue are cluster
    scoped: one name per test). A pod requesting a resource the quota leaves out is never admitted.
    The flavor's `node_labels` and `tolerations` are added to an admitted workload's pods, which
    places them on the flavor's nodes."""
    flavor: dict[str, Any] = {"nodeLabels": node_labels or {}, "tolerations": tolerations or []}
    resources = [{"name": resource, "nominalQuota": amount} for resource, amount in quota.items()]
    return [
        {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": flavor},
        {
            "apiVersion": KUEUE_API,
            "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {"coveredResources": list(quota), "flavors": [{"name": name, "resources": resources}]}
                ],
            },
        },
        {
            "apiVersion": KUEUE_API,
            "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterQueue": name},
        },
    ]


@contextmanager
def kueue_queue(
    kubectl: Kubectl,
    namespace: str,
    name: str,
    quota: dict[str, str],
    **flavor: Any,
) -> Iterator[str]:
    """The queue of `kueue_queue_objects` (needs the `kueue` fixture), active before the block runs,
    deleted after; `namespace` labelled controlplane.KUEUE_MANAGED while it runs, so that pods and
    StatefulSets there (a notebook server's) are Kueue's to admit too. Yields the LocalQueue's name:
    the value of a workload's QUEUE_LABEL."""
    labels = ",".join(f"{key}={value}" for key, value in controlplane.KUEUE_MANAGED.items())
    unlabels = [f"{key}-" for key in controlplane.KUEUE_MANAGED]
    kubectl("label", "namespace", namespace, labels, "--overwrite")
    objects = kueue_queue_objects(namespace, name, quota, **flavor)
    with applied(kubectl, objects):
        try:
            for kind, where in (("clusterqueue", []), ("localqueue", [f"--namespace={namespace}"])):
                kubectl("wait", f"{kind}.kueue.x-k8s.io/{name}", *where, "--for=condition=Active")
            yield name
        finally:
            kubectl("label", "namespace", namespace, *unlabels)


def workload_priority_class(name: str, value: int) -> dict[str, Any]:
    """A WorkloadPriorityClass (for `applied`): a workload labelled PRIORITY_LABEL=`name` is admitted
    before pending ones of lower `value` in its ClusterQueue."""
    return {
        "apiVersion": KUEUE_API,
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": name},
        "value": value,
    }
