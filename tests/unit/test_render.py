"""The Kubernetes renderer: every object it emits is what the cluster would accept, routed and locked
down the way the issue asks, and the same every time."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
import yaml
from traitlets.config import Config

from cube_jupyter.config import load_settings
from cube_jupyter.errors import ConfigError
from cube_jupyter.names import user_slug
from cube_jupyter.notebooks.config import NotebookSettings
from cube_jupyter.notebooks.render import (
    STOPPED_ANNOTATION,
    render_notebook_objects,
    route_prefix,
    stop_annotation_patch,
)
from cube_jupyter.notebooks.spec import NotebookSpec
from cube_jupyter.workbench import MOVED_TO_WORKBENCH
from tests.k8s_schemas import validate_object, validate_objects

KINDS = ["Notebook", "StatefulSet"]
CPU_PROFILE = {
    "name": "cpu",
    "image": "quay.io/jupyter/scipy-notebook:2025-03-17",
    "cpu": "500m",
    "memory": "1Gi",
}
GPU_PROFILE: dict[str, Any] = {
    "name": "gpu",
    "image": "kubeflownotebookswg/jupyter-pytorch-cuda-full:v1.9.0",
    "cpu": "4",
    "memory": "16Gi",
    "gpu": 2,
    "node_selector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "pool": "gpu"},
    "tolerations": [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {
            "key": "dedicated",
            "operator": "Equal",
            "value": "ml",
            "effect": "NoExecute",
            "tolerationSeconds": 60,
        },
    ],
    "env": {"ZETA": "last", "ALPHA": "first"},
}
VGPU_PROFILE = {
    "name": "vgpu",
    "image": "ccr.ccs.tencentyun.com/cube-studio/notebook:jupyter-ubuntu-cpu-base",
    "gpu": 50,
    "gpu_resource": "tencent.com/vcuda-core",
}
PROFILES = [CPU_PROFILE, GPU_PROFILE, VGPU_PROFILE]


def make_settings(resource_kind: str = "Notebook", **spawner: Any) -> NotebookSettings:
    c = Config()
    c.CubeSpawner.profiles = copy.deepcopy(PROFILES)
    c.CubeSpawner.resource_kind = resource_kind
    for key, value in spawner.items():
        setattr(c.CubeWorkbench if key in MOVED_TO_WORKBENCH else c.CubeSpawner, key, value)
    return load_settings(c).notebooks


def render(
    user: str = "alice", name: str = "nb1", profile: str = "cpu", kind: str = "Notebook", **spawner: Any
) -> list[dict[str, Any]]:
    settings = make_settings(kind, **spawner)
    return render_notebook_objects(NotebookSpec(user, name, settings.profile(profile)), settings)


def by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [obj] = [o for o in objects if o["kind"] == kind]
    return obj


def pod_spec(objects: list[dict[str, Any]]) -> dict[str, Any]:
    workload = next(o for o in objects if o["kind"] in ("Notebook", "StatefulSet"))
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    [c] = pod_spec(objects)["containers"]
    return c


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, as the API server applies it."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# --- shape and validity --------------------------------------------------------------------------------


def test_notebook_kind_objects_in_creation_order() -> None:
    """The policy comes first: until an ALLOW policy selects the tokenless pod, Istio admits anyone.
    No Service or VirtualService: Kubeflow's notebook controller makes those for a Notebook."""
    objects = render(kind="Notebook")
    assert [(o["apiVersion"], o["kind"]) for o in objects] == [
        ("security.istio.io/v1", "AuthorizationPolicy"),
        ("v1", "PersistentVolumeClaim"),
        ("v1", "ConfigMap"),
        ("kubeflow.org/v1", "Notebook"),
    ]
    assert [o["metadata"]["name"] for o in objects] == [
        "notebook-nb1",
        "nb1-workspace",
        "nb1-cube-config",
        "nb1",
    ]
    assert {o["metadata"]["namespace"] for o in objects} == {"cube-alice"}


@pytest.mark.parametrize("kind", KINDS)
def test_objects_go_to_the_namespace_given(kind: str) -> None:
    """The backend passes the namespace it found (a Kubeflow Profile's): every object and the route
    use it, not the template's."""
    settings = make_settings(kind)
    objects = render_notebook_objects(
        NotebookSpec("alice", "nb1", settings.profile("cpu")), settings, "team-a"
    )
    assert {o["metadata"]["namespace"] for o in objects} == {"team-a"}
    env = {e["name"]: e.get("value") for e in container(objects)["env"]}
    assert env["NB_PREFIX"] == "/notebook/team-a/nb1"
    validate_objects(objects)


def test_a_notebook_needs_the_controllers_route_prefix() -> None:
    """Kubeflow's controller routes every Notebook at /notebook/{namespace}/{name}/: another prefix
    would give Jupyter a base_url nothing routes to."""
    with pytest.raises(ConfigError, match="must be '/notebook' with resource_kind 'Notebook'") as refused:
        make_settings("Notebook", path_prefix="/lab/servers")
    assert refused.value.field == "CubeSpawner.path_prefix"
    make_settings("StatefulSet", path_prefix="/lab/servers")  # the workbench routes those itself


def test_statefulset_kind_objects_in_creation_order() -> None:
    objects = render(kind="StatefulSet")
    assert [(o["apiVersion"], o["kind"]) for o in objects] == [
        ("security.istio.io/v1", "AuthorizationPolicy"),
        ("v1", "PersistentVolumeClaim"),
        ("v1", "ConfigMap"),
        ("apps/v1", "StatefulSet"),
        ("v1", "Service"),
        ("networking.istio.io/v1", "VirtualService"),
    ]
    sts, svc = by_kind(objects, "StatefulSet"), by_kind(objects, "Service")
    assert sts["spec"]["replicas"] == 1
    assert sts["spec"]["serviceName"] == "nb1"
    assert svc["metadata"]["name"] == "nb1"
    assert svc["spec"]["ports"] == [
        {"name": "http-notebook", "port": 80, "targetPort": 8888, "protocol": "TCP"}
    ]
    assert svc["spec"]["selector"] == sts["spec"]["selector"]["matchLabels"] == {"statefulset": "nb1"}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("profile", ["cpu", "gpu", "vgpu"])
@pytest.mark.parametrize("storage_class", ["", "fast-ssd"])
def test_every_object_passes_strict_validation(kind: str, profile: str, storage_class: str) -> None:
    objects = render(user="Alice@Example.com", profile=profile, kind=kind, storage_class=storage_class)
    for obj in objects:
        validate_object(obj, strict=True)


@pytest.mark.parametrize("kind", KINDS)
def test_misspelt_pod_field_fails_strict_validation(kind: str) -> None:
    workload = by_kind(render(kind=kind), kind)
    workload["spec"]["template"]["spec"]["containerz"] = workload["spec"]["template"]["spec"].pop(
        "containers"
    )
    with pytest.raises(AssertionError, match=r"spec\.template\.spec\.containerz"):
        validate_object(workload)


def test_crd_schema_alone_would_not_catch_a_misspelling() -> None:
    """Why strict mode exists: CRD schemas prune unknown fields instead of rejecting them."""
    notebook = by_kind(render(kind="Notebook"), "Notebook")
    notebook["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    validate_object(notebook, strict=False)
    with pytest.raises(AssertionError, match=r"containers\[0\]\.imagePullPolicyy"):
        validate_object(notebook, strict=True)


@pytest.mark.parametrize(
    ("kind", "path", "bad_key"),
    [
        ("PersistentVolumeClaim", ["spec"], "accesModes"),
        ("VirtualService", ["spec", "http", 1], "rewite"),
        ("AuthorizationPolicy", ["spec"], "selecter"),
        ("AuthorizationPolicy", ["metadata"], "label"),
    ],
)
def test_misspelt_fields_fail_for_every_kind(kind: str, path: list[Any], bad_key: str) -> None:
    obj = by_kind(render(kind="StatefulSet"), kind)
    node = obj
    for step in path:
        node = node[step]
    node[bad_key] = {}
    with pytest.raises(AssertionError, match=bad_key):
        validate_object(obj)


def test_wrong_types_and_names_fail_validation() -> None:
    objects = render(kind="StatefulSet")
    service = copy.deepcopy(by_kind(objects, "Service"))
    service["metadata"]["name"] = "1nb"  # a DNS-1123 label, but not a valid Service name
    with pytest.raises(AssertionError, match="RFC 1035"):
        validate_object(service)
    notebook = by_kind(render(kind="Notebook"), "Notebook")
    notebook["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "lots"
    with pytest.raises(AssertionError, match="limits"):
        validate_object(notebook)
    notebook = by_kind(render(kind="Notebook"), "Notebook")
    notebook["spec"]["template"]["spec"]["containers"] = []  # the kustomized CRD requires one
    with pytest.raises(AssertionError, match="containers"):
        validate_object(notebook)
    sts = by_kind(objects, "StatefulSet")
    sts["spec"]["selector"]["matchLabels"]["statefulset"] = "other"
    with pytest.raises(AssertionError, match="does not match"):
        validate_object(sts)


# --- routing: base_url, route prefix and NB_PREFIX agree ----------------------------------------------


@pytest.mark.parametrize(
    ("kind", "path_prefix"),
    [
        ("Notebook", "/notebook"),
        ("StatefulSet", "/notebook"),
        ("StatefulSet", "/lab/servers"),
        ("StatefulSet", ""),
    ],
)
def test_base_url_equals_virtual_service_prefix_and_nb_prefix(kind: str, path_prefix: str) -> None:
    objects = render(user="bob", name="train", kind=kind, path_prefix=path_prefix)
    expected = f"{path_prefix}/cube-bob/train/"
    assert route_prefix(make_settings(kind, path_prefix=path_prefix), "cube-bob", "train") == expected
    args = container(objects)["args"]
    assert args[:2] == ["jupyter", "lab"]
    base_urls = [a.split("=", 1)[1] for a in args if a.startswith("--ServerApp.base_url=")]
    assert base_urls == [expected]
    env = {e["name"]: e.get("value") for e in container(objects)["env"]}
    assert env["NB_PREFIX"] + "/" == expected
    if kind == "StatefulSet":  # a Notebook's route is its controller's (test_kubeflow_controller_k8s)
        vs = by_kind(objects, "VirtualService")
        route = vs["spec"]["http"][-1]
        assert route["match"] == [{"uri": {"prefix": expected}}]
        assert route["rewrite"] == {"uri": expected}
    assert container(objects)["readinessProbe"]["httpGet"] == {
        "path": f"{expected}api/status",
        "port": 8888,
        "scheme": "HTTP",
    }


def test_jupyter_listens_on_all_interfaces_without_token() -> None:
    args = container(render())["args"]
    for flag in (
        "--ServerApp.ip=0.0.0.0",
        "--ServerApp.port=8888",
        "--IdentityProvider.token=",
    ):
        assert flag in args
    # Jupyter's own WebSocket origin check stays on: allow_origin would let another site's page open
    # a terminal with the user's gateway cookie.
    assert not [a for a in args if "allow_origin" in a]
    assert "command" not in container(render()), "the image's entrypoint must still run"


def test_custom_cmd_comes_first() -> None:
    args = container(render(cmd=["start-notebook.py"]))["args"]
    assert args[0] == "start-notebook.py"
    assert args[1].startswith("--ServerApp.base_url=")


def test_virtual_service_routes_to_service_and_never_times_out() -> None:
    vs = by_kind(render(kind="StatefulSet", istio_gateway="istio-system/main-gw"), "VirtualService")
    assert vs["metadata"]["name"] == "notebook-cube-alice-nb1"
    assert vs["spec"]["gateways"] == ["istio-system/main-gw"]
    assert vs["spec"]["hosts"] == ["*"]
    redirect, route = vs["spec"]["http"]
    assert redirect["match"] == [{"uri": {"exact": "/notebook/cube-alice/nb1"}}]
    assert redirect["redirect"] == {"uri": "/notebook/cube-alice/nb1/"}
    assert route["route"] == [
        {"destination": {"host": "nb1.cube-alice.svc.cluster.local", "port": {"number": 80}}}
    ]
    # Istio disables the route timeout unless one is set; Kubeflow sets 300s, which cuts WebSockets.
    assert all("timeout" not in r for r in vs["spec"]["http"])


def test_istio_rejects_a_zero_timeout_so_none_is_rendered() -> None:
    """`timeout: 0s` looks like "no timeout" but Istio's CRD rule needs >= 1ms: the API would refuse it."""
    vs = by_kind(render(kind="StatefulSet"), "VirtualService")
    vs["spec"]["http"][1]["timeout"] = "0s"
    with pytest.raises(AssertionError, match=r"spec\.http\[1\]\.timeout: must be a valid duration"):
        validate_object(vs)
    vs["spec"]["http"][1]["timeout"] = "300s"
    validate_object(vs)


# --- identity: only the owner gets in ----------------------------------------------------------------


def test_authorization_policy_admits_only_the_owner_through_the_gateway() -> None:
    objects = render(
        user="Alice@Example.com",
        user_header="x-goog-authenticated-user-email",
        user_header_prefix="accounts.google.com:",
    )
    policy = by_kind(objects, "AuthorizationPolicy")
    assert policy["spec"]["action"] == "ALLOW"
    assert policy["spec"]["selector"] == {"matchLabels": {"notebook-name": "nb1"}}
    rule, _workbench = policy["spec"]["rules"]
    assert rule["from"] == [
        {"source": {"principals": ["cluster.local/ns/istio-system/sa/istio-ingressgateway-service-account"]}}
    ]
    assert rule["when"] == [
        {
            "key": "request.headers[x-goog-authenticated-user-email]",
            "values": ["accounts.google.com:Alice@Example.com"],
        }
    ]
    assert "to" not in rule  # the owner may do anything in their server


def test_authorization_policy_lets_the_workbench_read_only_the_activity_lists() -> None:
    """The culler's rule: the workbench's principal, GET, the two list paths exactly. Not
    `api/kernels*`: a kernel's WebSocket (`api/kernels/{id}/channels`) is a GET that runs code."""
    policy = by_kind(
        render(workbench_principal="cluster.local/ns/ml-platform/sa/workbench"), "AuthorizationPolicy"
    )
    validate_object(policy)
    _owner, rule = policy["spec"]["rules"]
    assert rule == {
        "from": [{"source": {"principals": ["cluster.local/ns/ml-platform/sa/workbench"]}}],
        "to": [
            {
                "operation": {
                    "methods": ["GET"],
                    "paths": [
                        "/notebook/cube-alice/nb1/api/kernels",
                        "/notebook/cube-alice/nb1/api/terminals",
                    ],
                }
            }
        ],
    }
    assert "when" not in rule  # no user header: the workbench is not acting for a user
    default = by_kind(render(), "AuthorizationPolicy")["spec"]["rules"][1]
    assert default["from"][0]["source"]["principals"] == ["cluster.local/ns/kubeflow/sa/cube-jupyter"]


def test_misspelt_policy_operation_fails_strict_validation() -> None:
    policy = by_kind(render(), "AuthorizationPolicy")
    policy["spec"]["rules"][1]["to"][0]["operation"]["path"] = ["/x"]
    with pytest.raises(AssertionError, match="path"):
        validate_object(policy)


def test_policy_selector_matches_the_pod_label_for_both_kinds() -> None:
    for kind in KINDS:
        objects = render(kind=kind)
        selector = by_kind(objects, "AuthorizationPolicy")["spec"]["selector"]["matchLabels"]
        workload = by_kind(objects, kind)
        # Kubeflow's controller copies the Notebook's labels onto its pod; a StatefulSet's are explicit.
        pod_labels = workload["spec"]["template"].get("metadata", workload["metadata"])["labels"]
        assert selector.items() <= pod_labels.items()


def test_user_with_email_gets_an_escaped_namespace_and_keeps_the_raw_name() -> None:
    objects = render(user="Alice@Example.com")
    slug = user_slug("Alice@Example.com")
    assert slug != "alice-example-com" and slug.startswith("alice-example-com-")
    for obj in objects:
        meta = obj["metadata"]
        assert meta["namespace"] == f"cube-{slug}"
        assert meta["labels"]["cube-jupyter/user"] == slug
        assert meta["annotations"]["notebooks.kubeflow.org/creator"] == "Alice@Example.com"
        assert meta["annotations"]["cube-jupyter/user"] == "Alice@Example.com"
        validate_object(obj)
    env = {e["name"]: e.get("value") for e in container(objects)["env"]}
    assert env["NB_PREFIX"] == f"/notebook/cube-{slug}/nb1"


# --- resources and scheduling -------------------------------------------------------------------------


def test_cpu_profile_has_no_gpu_and_guaranteed_resources() -> None:
    resources = container(render(profile="cpu"))["resources"]
    assert resources == {
        "requests": {"cpu": "500m", "memory": "1Gi"},
        "limits": {"cpu": "500m", "memory": "1Gi"},
    }
    assert "nodeSelector" not in pod_spec(render()) and "tolerations" not in pod_spec(render())


@pytest.mark.parametrize("kind", KINDS)
def test_gpu_only_in_limits(kind: str) -> None:
    resources = container(render(profile="gpu", kind=kind))["resources"]
    assert resources["limits"] == {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "2"}
    assert resources["requests"] == {"cpu": "4", "memory": "16Gi"}


def test_vgpu_resource_name_is_used_as_given() -> None:
    resources = container(render(profile="vgpu"))["resources"]
    assert resources["limits"]["tencent.com/vcuda-core"] == "50"
    assert "nvidia.com/gpu" not in resources["limits"]


@pytest.mark.parametrize("kind", KINDS)
def test_node_selector_and_tolerations_from_profile(kind: str) -> None:
    pod = pod_spec(render(profile="gpu", kind=kind))
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "pool": "gpu"}
    assert pod["tolerations"] == GPU_PROFILE["tolerations"]


def test_profile_env_is_sorted_after_nb_prefix_and_before_the_user_servers() -> None:
    env = container(render(profile="gpu"))["env"]
    assert [e["name"] for e in env] == [
        "NB_PREFIX",
        "ALPHA",
        "ZETA",
        "CUBE_JUPYTER_ROLE",
        "CUBE_JUPYTER_USER",
        "CUBE_JUPYTER_NAMESPACE",
        "JUPYTER_CONFIG_PATH",
    ]


def test_workspace_pvc_and_storage_class() -> None:
    pvc = by_kind(render(workspace_size="50Gi"), "PersistentVolumeClaim")
    assert pvc["spec"] == {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "50Gi"}}}
    pvc = by_kind(render(storage_class="fast-ssd"), "PersistentVolumeClaim")
    assert pvc["spec"]["storageClassName"] == "fast-ssd"


@pytest.mark.parametrize("kind", KINDS)
def test_volumes_workspace_at_home_and_memory_backed_shm(kind: str) -> None:
    objects = render(kind=kind)
    pod = pod_spec(objects)
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["workspace"]["persistentVolumeClaim"] == {"claimName": "nb1-workspace"}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory"}
    mounts = {m["mountPath"]: m["name"] for m in container(objects)["volumeMounts"]}
    assert mounts == {"/home/jovyan": "workspace", "/dev/shm": "dshm", "/etc/cube-jupyter": "cube-config"}
    assert volumes["cube-config"]["configMap"] == {"name": "nb1-cube-config"}


def test_service_account_only_when_configured() -> None:
    assert pod_spec(render())["serviceAccountName"] == "default-editor"
    assert "serviceAccountName" not in pod_spec(render(service_account=""))


# --- labels and annotations ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_labels_and_annotations_on_everything(kind: str) -> None:
    objects = render(user="alice", profile="gpu", kind=kind)
    for obj in objects:
        assert obj["metadata"]["labels"] == {
            "app.kubernetes.io/managed-by": "cube-jupyter",
            "app.kubernetes.io/name": "notebook",
            "cube-jupyter/user": "alice",
            "notebook-name": "nb1",
        }
        assert obj["metadata"]["annotations"] == {
            "notebooks.kubeflow.org/creator": "alice",
            "cube-jupyter/profile": "gpu",
            "cube-jupyter/user": "alice",
        }
    if kind == "StatefulSet":
        labels = by_kind(objects, "StatefulSet")["spec"]["template"]["metadata"]["labels"]
        assert labels["notebook-name"] == "nb1" and labels["statefulset"] == "nb1"


# --- determinism -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_output_is_byte_identical(kind: str) -> None:
    first = yaml.safe_dump_all(render(user="Alice@Example.com", profile="gpu", kind=kind))
    second = yaml.safe_dump_all(render(user="Alice@Example.com", profile="gpu", kind=kind))
    assert first == second
    # Same profile, dict keys given in another order: still the same bytes.
    reordered = copy.deepcopy(GPU_PROFILE)
    reordered["env"] = dict(reversed(list(GPU_PROFILE["env"].items())))
    reordered["node_selector"] = dict(reversed(list(GPU_PROFILE["node_selector"].items())))
    c = Config()
    c.CubeSpawner.profiles = [CPU_PROFILE, reordered, VGPU_PROFILE]
    c.CubeSpawner.resource_kind = kind
    settings = load_settings(c).notebooks
    objects = render_notebook_objects(
        NotebookSpec("Alice@Example.com", "nb1", settings.profile("gpu")), settings
    )
    assert yaml.safe_dump_all(objects) == first
    assert yaml.safe_dump_all(objects, sort_keys=False) == yaml.safe_dump_all(
        render(user="Alice@Example.com", profile="gpu", kind=kind), sort_keys=False
    )


def test_render_does_not_share_mutable_state_with_settings() -> None:
    settings = make_settings("Notebook")
    spec = NotebookSpec("alice", "nb1", settings.profile("gpu"))
    objects = render_notebook_objects(spec, settings)
    pod_spec(objects)["tolerations"][0]["key"] = "mutated"
    pod_spec(objects)["nodeSelector"]["pool"] = "mutated"
    again = render_notebook_objects(spec, settings)
    assert pod_spec(again)["tolerations"] == GPU_PROFILE["tolerations"]
    assert pod_spec(again)["nodeSelector"]["pool"] == "gpu"


# --- stop / start ---------------------------------------------------------------------------------------


def test_stop_patch_for_notebook() -> None:
    now = datetime(2025, 3, 17, 9, 30, 5, 123456, tzinfo=UTC)
    assert STOPPED_ANNOTATION == "kubeflow-resource-stopped"
    # A stop or start by a user also removes the reason an earlier cull left.
    assert stop_annotation_patch(True, now) == {
        "metadata": {
            "annotations": {
                "kubeflow-resource-stopped": "2025-03-17T09:30:05Z",
                "cube-jupyter/stop-reason": None,
            }
        }
    }
    assert stop_annotation_patch(False, now) == {
        "metadata": {"annotations": {"kubeflow-resource-stopped": None, "cube-jupyter/stop-reason": None}}
    }
    culled = stop_annotation_patch(True, now, reason="culled after 60 s idle")
    assert culled["metadata"]["annotations"]["cube-jupyter/stop-reason"] == "culled after 60 s idle"
    assert stop_annotation_patch(False, now, reason="ignored")["metadata"]["annotations"] == {
        "kubeflow-resource-stopped": None,
        "cube-jupyter/stop-reason": None,
    }


def test_stop_patch_converts_to_utc() -> None:
    cest = timezone(timedelta(hours=2))
    patch = stop_annotation_patch(True, datetime(2025, 3, 17, 11, 0, 0, tzinfo=cest))
    assert patch["metadata"]["annotations"][STOPPED_ANNOTATION] == "2025-03-17T09:00:00Z"
    naive = stop_annotation_patch(True, datetime(2025, 3, 17, 9, 0, 0))
    assert naive["metadata"]["annotations"][STOPPED_ANNOTATION] == "2025-03-17T09:00:00Z"


@pytest.mark.parametrize("kind", KINDS)
def test_stop_then_start_patches_apply_to_the_rendered_workload(kind: str) -> None:
    workload = by_kind(render(kind=kind), kind)
    now = datetime(2025, 3, 17, 9, 0, 0, tzinfo=UTC)
    stopped = merge_patch(workload, stop_annotation_patch(True, now, kind, reason="culled after 60 s idle"))
    assert stopped["metadata"]["annotations"][STOPPED_ANNOTATION] == "2025-03-17T09:00:00Z"
    assert stopped["metadata"]["annotations"]["cube-jupyter/stop-reason"] == "culled after 60 s idle"
    validate_object(stopped)
    started = merge_patch(stopped, stop_annotation_patch(False, now, kind))
    assert STOPPED_ANNOTATION not in started["metadata"]["annotations"]
    validate_object(started)
    if kind == "StatefulSet":
        assert stopped["spec"]["replicas"] == 0 and started["spec"]["replicas"] == 1
    else:
        assert "replicas" not in stopped["spec"], "the Notebook CRD has no replicas field"
        assert started == workload


# --- the user server in the pod --------------------------------------------------------------------------


def test_the_pod_is_its_owners_user_server_with_the_workbenchs_config_and_no_secrets() -> None:
    c = Config()
    c.CubeSpawner.profiles = copy.deepcopy(PROFILES)
    c.CubeWorkbench.backend = "kubernetes"
    c.CubeWorkbench.workbench_url = "/cube/lab"
    c.CubeWorkbench.prometheus_url = "http://prometheus.monitoring:9090"
    c.CubeStorage.url = "s3://ml-artifacts/runs"
    c.CubeStorage.endpoint = "minio-service.kubeflow:9000"
    c.CubeStorage.secure = False
    c.CubeStorage.access_key = "AKIA-NOT-IN-THE-CONFIGMAP"
    c.CubeStorage.secret_key = "s3cr3t-not-in-the-configmap"
    c.CubeStorage.credentials_secret = "mlpipeline-minio-artifact"
    c.CubeJobs.default_image = "registry.example.com/cube-runtime:1"
    settings = load_settings(c).notebooks
    objects = render_notebook_objects(
        NotebookSpec("Alice@Example.com", "nb1", settings.profile("cpu")), settings
    )
    for obj in objects:
        validate_object(obj, strict=True)
    env = {e["name"]: e for e in container(objects)["env"]}
    assert env["CUBE_JUPYTER_ROLE"]["value"] == "user"
    assert env["CUBE_JUPYTER_USER"]["value"] == "Alice@Example.com"
    assert env["CUBE_JUPYTER_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["CUBE_JUPYTER_WORKBENCH_URL"]["value"] == "/cube/lab"
    assert env["JUPYTER_CONFIG_PATH"]["value"] == "/etc/cube-jupyter"
    assert env["MINIO_ENDPOINT"]["value"] == "http://minio-service.kubeflow:9000"
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert env[key]["valueFrom"] == {"secretKeyRef": {"name": "mlpipeline-minio-artifact", "key": key}}

    config_map = by_kind(objects, "ConfigMap")
    text = config_map["data"]["jupyter_server_config.json"]
    assert "NOT-IN-THE-CONFIGMAP" not in text and "not-in-the-configmap" not in text
    config = json.loads(text)
    # what the server decides from its pod is not in it; the rest is the workbench's, as loaded: its
    # backend, and the policy every server shares (the GPU quota, admins, users' namespaces)
    policy = {"admin_users", "gpu_quota_per_user", "namespace_template", "namespace_source"}
    policy |= {"create_namespaces", "user_cluster_role"}
    assert set(config["CubeWorkbench"]) == {"backend", "poll_seconds", "prometheus_url", *policy}
    assert config["CubeWorkbench"]["prometheus_url"].rstrip("/") == "http://prometheus.monitoring:9090"
    assert config["CubeStorage"]["url"] == "s3://ml-artifacts/runs"
    assert config["CubeJobs"]["default_image"] == "registry.example.com/cube-runtime:1"

    # loaded in the pod, it makes a user server of the owner, in the pod's namespace
    loaded = Config({cls: Config(values) for cls, values in config.items()})
    loaded.CubeWorkbench.role = "user"
    loaded.CubeWorkbench.default_user = "Alice@Example.com"
    loaded.CubeWorkbench.namespace = "kubeflow-alice"
    pod_settings = load_settings(loaded)
    assert pod_settings.user_server and not pod_settings.is_admin("Alice@Example.com")
    assert pod_settings.namespace_for("Alice@Example.com") == "kubeflow-alice"
    assert pod_settings.watch_namespace == "kubeflow-alice"
    assert pod_settings.storage.url == "s3://ml-artifacts/runs"


def test_a_gpu_quota_is_a_resource_quota_on_every_gpu_resource() -> None:
    assert all(o["kind"] != "ResourceQuota" for o in render())  # no quota: none
    objects = render(gpu_quota_per_user=2)
    quota = by_kind(objects, "ResourceQuota")
    validate_object(quota, strict=True)
    assert quota["metadata"]["name"] == "cube-gpu-quota" and quota["metadata"]["namespace"] == "cube-alice"
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "2", "requests.tencent.com/vcuda-core": "2"}
    # created before the workload, so the server's own pod is already held to it
    kinds = [o["kind"] for o in objects]
    assert kinds.index("ResourceQuota") < kinds.index("Notebook")


def test_a_user_server_without_a_namespace_is_a_config_error() -> None:
    c = Config()
    c.CubeWorkbench.backend = "kubernetes"
    c.CubeWorkbench.role = "user"
    c.CubeWorkbench.namespace = ""
    with pytest.raises(ConfigError, match="needs its namespace") as refused:
        load_settings(c)
    assert refused.value.field == "CubeWorkbench.namespace"


def test_a_profile_may_not_set_what_tells_a_server_who_it_is() -> None:
    c = Config()
    c.CubeSpawner.profiles = [{**CPU_PROFILE, "env": {"CUBE_JUPYTER_USER": "root-admin"}}]
    with pytest.raises(ConfigError, match="may not set CUBE_JUPYTER_USER") as refused:
        load_settings(c)
    assert refused.value.field == "CubeSpawner.profiles[0].env.CUBE_JUPYTER_USER"
