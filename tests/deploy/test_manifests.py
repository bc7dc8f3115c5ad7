"""The install manifests (`deploy/`): both overlays render with `kubectl kustomize`, every object is
valid against its schema, the workbench runs locked down, its config loads into valid settings, the
route, policy and probes agree with that config, and the rendered container itself starts and serves
its probes, with the identity each overlay promises (the trusted header; the Secret's token)."""

from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from jupyter_server.serverapp import ServerApp
from jupyterlab.labapp import LabApp
from traitlets.config import Config, Configurable

from cube_jupyter import __version__
from cube_jupyter.config import CONFIG_CLASSES, Settings, load_settings
from cube_jupyter.images import image
from cube_jupyter.workbench import NAMESPACE_ENV, OWNER_ENV, ROLE_ENV, WORKBENCH_URL_ENV
from tests.deploy.pod import run_workbench
from tests.deploy.rendered import (
    DEPLOY_DIR,
    OVERLAYS,
    OVERLAYS_DIR,
    Obj,
    config_map_of,
    load_workbench_config,
    of_kind,
    pod_template,
    render,
    the,
    workbench_container,
)
from tests.k8s_schemas import validate_object

NAMESPACES = {"kubeflow": "kubeflow", "standalone": "cube-jupyter"}
BASE_KINDS = ["ClusterRole", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "Service"]
KINDS = {
    "kubeflow": sorted([*BASE_KINDS, "ServiceAccount", "VirtualService", "AuthorizationPolicy"]),
    "standalone": sorted([*BASE_KINDS, "ServiceAccount", "PersistentVolumeClaim"]),
}
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding"}
# An env var whose name says it holds a credential must take it from a Secret.
CREDENTIAL_NAME = re.compile(r"TOKEN|PASSWORD|SECRET|CREDENTIAL|ACCESS_KEY|PRIVATE", re.IGNORECASE)
TRUSTED_HEADER_PROVIDER = "cube_jupyter_server.identity.TrustedHeaderIdentityProvider"
CUBE_AUTHORIZER = "cube_jupyter_server.authorizer.CubeAuthorizer"
INGRESS_GATEWAY = "cluster.local/ns/istio-system/sa/istio-ingressgateway-service-account"
STANDALONE_TOKEN = {"cube-jupyter-token": {"token": "a-token-only-this-test-knows"}}


@cache
def rendered(overlay: str) -> list[Obj]:
    return render(OVERLAYS_DIR / overlay)


@pytest.fixture(autouse=True)
def no_server_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The config alone decides: not the env a notebook server would give the test process."""
    for name in (ROLE_ENV, OWNER_ENV, NAMESPACE_ENV, WORKBENCH_URL_ENV):
        monkeypatch.delenv(name, raising=False)


def workbench_config(overlay: str, tmp_path: Path) -> tuple[Config, Settings]:
    config = load_workbench_config(rendered(overlay), tmp_path / "config")
    return config, load_settings(config)


def configurable_classes() -> dict[str, type[Configurable]]:
    """Every class whose section the config may set: Jupyter's apps and each Cube* class with its
    Cube* bases (a base's section sets every class that shares it)."""
    classes: list[type[Any]] = [ServerApp, LabApp]
    for cls in CONFIG_CLASSES:
        classes += [base for base in cls.__mro__ if base.__name__.startswith("Cube")]
    return {cls.__name__: cls for cls in classes}


# -- every object --------------------------------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_rendered_object_is_valid_and_in_the_overlays_namespace(overlay: str) -> None:
    objects = rendered(overlay)
    assert sorted(obj["kind"] for obj in objects) == KINDS[overlay]
    for obj in objects:
        validate_object(obj)
        namespace = obj["metadata"].get("namespace")
        assert namespace == (None if obj["kind"] in CLUSTER_SCOPED else NAMESPACES[overlay]), obj["metadata"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_workbench_runs_as_non_root_without_privileges_on_a_read_only_root(overlay: str) -> None:
    template = pod_template(rendered(overlay))
    pod = template["spec"]["securityContext"]
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] == 1000 and pod["fsGroup"] == 100, pod
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    container = workbench_container(rendered(overlay))
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    # What Jupyter writes goes to volumes: $HOME (runtime files, settings, state) and /tmp.
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    writable = {
        m["mountPath"]
        for m in container["volumeMounts"]
        if not m.get("readOnly") and {"emptyDir", "persistentVolumeClaim"} & set(volumes[m["name"]])
    }
    env = {var["name"]: var.get("value") for var in container["env"]}
    assert {env["HOME"], "/tmp"} <= writable and container["workingDir"] == env["HOME"]
    # A config file that fails to load stops the server rather than being skipped.
    assert env["TRAITLETS_APPLICATION_RAISE_CONFIG_FILE_ERROR"] == "true"
    resources = container["resources"]
    assert set(resources["requests"]) == set(resources["limits"]) == {"cpu", "memory"}
    assert container["image"] == image("workbench") == f"ghcr.io/cube-jupyter/workbench:{__version__}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_probes_ask_jupyters_unauthenticated_api_under_the_base_url(overlay: str, tmp_path: Path) -> None:
    config, _ = workbench_config(overlay, tmp_path)
    container = workbench_container(rendered(overlay))
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"http": config.ServerApp.port}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        http = container[probe]["httpGet"]
        assert http["path"] == f"{config.ServerApp.base_url}api" and ports[http["port"]] == 8888, probe
    service = the(rendered(overlay), "Service", "cube-jupyter")
    assert service["spec"]["type"] == "ClusterIP"
    assert (
        service["spec"]["selector"].items() <= pod_template(rendered(overlay))["metadata"]["labels"].items()
    )
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["http"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_credential_is_written_in_the_manifests_or_the_config(overlay: str, tmp_path: Path) -> None:
    objects = rendered(overlay)
    assert not of_kind(objects, "Secret")
    for var in workbench_container(objects)["env"]:
        if CREDENTIAL_NAME.search(var["name"]):
            assert set(var) == {"name", "valueFrom"} and "secretKeyRef" in var["valueFrom"], var
    config, settings = workbench_config(overlay, tmp_path)
    assert not settings.storage.access_key and not settings.storage.secret_key
    for section in ("ServerApp", "IdentityProvider", "PasswordIdentityProvider"):
        assert not {"token", "password", "hashed_password"} & set(config[section]), config[section]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_config_sets_only_real_traits_and_loads_into_valid_settings(overlay: str, tmp_path: Path) -> None:
    config, settings = workbench_config(overlay, tmp_path)
    classes = configurable_classes()
    for section, values in config.items():
        assert section in classes, f"c.{section} is not a configurable class the workbench reads"
        traits = classes[section].class_traits(config=True)
        assert not set(values) - set(traits), f"c.{section} has no traits {sorted(set(values) - set(traits))}"
    assert (settings.workbench.backend, settings.workbench.role) == ("kubernetes", "workbench")
    assert [p.image for p in settings.notebooks.profiles] == [image("notebook"), image("notebook-gpu")]
    # The images of this version: the kustomization tags the workbench with the package version.
    kustomization = yaml.safe_load((DEPLOY_DIR / "base" / "kustomization.yaml").read_text())
    assert kustomization["images"] == [{"name": "ghcr.io/cube-jupyter/workbench", "newTag": __version__}]
    # The role a new user namespace's pods are bound to is the one rbac.yaml installs.
    the(rendered(overlay), "ClusterRole", settings.workbench.user_cluster_role)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_workbench_service_account_is_bound_to_its_cluster_role(overlay: str) -> None:
    objects = rendered(overlay)
    service_account = pod_template(objects)["spec"]["serviceAccountName"]
    the(objects, "ServiceAccount", service_account)
    binding = the(objects, "ClusterRoleBinding", "cube-jupyter")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "cube-jupyter",
    }
    the(objects, "ClusterRole", "cube-jupyter")
    subject = {"kind": "ServiceAccount", "name": service_account, "namespace": NAMESPACES[overlay]}
    assert binding["subjects"] == [subject]


# -- the kubeflow overlay ---------------------------------------------------------------------------------


def test_kubeflow_routes_the_base_url_on_the_gateway_to_the_service(tmp_path: Path) -> None:
    objects = rendered("kubeflow")
    config, settings = workbench_config("kubeflow", tmp_path)
    route = the(objects, "VirtualService", "cube-jupyter")["spec"]
    assert route["gateways"] == [settings.notebooks.spawner.istio_gateway] == ["kubeflow/kubeflow-gateway"]
    [http] = route["http"]
    assert http["match"] == [{"uri": {"prefix": config.ServerApp.base_url}}]
    assert "rewrite" not in http and "timeout" not in http  # base_url is the prefix; WebSockets stay up
    service = the(objects, "Service", "cube-jupyter")
    [destination] = http["route"]
    assert destination["destination"] == {
        "host": f"cube-jupyter.{service['metadata']['namespace']}.svc.cluster.local",
        "port": {"number": service["spec"]["ports"][0]["port"]},
    }


def test_kubeflow_trusts_the_header_only_from_the_ingress_gateway(tmp_path: Path) -> None:
    objects = rendered("kubeflow")
    config, settings = workbench_config("kubeflow", tmp_path)
    assert config.ServerApp.identity_provider_class == TRUSTED_HEADER_PROVIDER
    assert config.ServerApp.authorizer_class == CUBE_AUTHORIZER
    assert settings.notebooks.spawner.user_header == "kubeflow-userid"
    [policy] = of_kind(objects, "AuthorizationPolicy")
    labels = pod_template(objects)["metadata"]["labels"]
    assert policy["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert labels["sidecar.istio.io/inject"] == "true"  # without a sidecar no policy applies
    assert policy["spec"]["action"] == "ALLOW"
    source = {"principals": [settings.notebooks.spawner.istio_ingress_principal]}
    assert policy["spec"]["rules"] == [{"from": [{"source": source}]}]
    assert settings.notebooks.spawner.istio_ingress_principal == INGRESS_GATEWAY
    # The principal each notebook server's policy admits for activity checks is this pod's.
    namespace = the(objects, "Deployment", "cube-jupyter")["metadata"]["namespace"]
    service_account = pod_template(objects)["spec"]["serviceAccountName"]
    assert (
        settings.notebooks.spawner.workbench_principal == f"cluster.local/ns/{namespace}/sa/{service_account}"
    )
    assert settings.workbench.namespace_source == "kubeflow-profile"


def test_kubeflow_profiles_editors_get_the_user_role() -> None:
    user_role = the(rendered("kubeflow"), "ClusterRole", "cube-jupyter-user")
    assert (
        user_role["metadata"]["labels"]["rbac.authorization.kubeflow.org/aggregate-to-kubeflow-edit"]
        == "true"
    )
    central = the(rendered("kubeflow"), "ClusterRole", "cube-jupyter")
    assert not any(key.startswith("rbac.authorization.kubeflow.org") for key in central["metadata"]["labels"])


def test_the_dashboard_component_adds_the_workbench_to_kubeflows_menu(tmp_path: Path) -> None:
    """Built the way Kubeflow's manifests build the dashboard's ConfigMap, with the component added."""
    kubeflow_config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "centraldashboard-config", "namespace": "kubeflow"},
        "data": {"settings": '{"DASHBOARD_FORCE_IFRAME": true}', "links": '{"menuLinks": []}'},
    }
    (tmp_path / "configmap.yaml").write_text(yaml.safe_dump(kubeflow_config))
    component = DEPLOY_DIR / "components" / "kubeflow-dashboard-link"
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["configmap.yaml"],
        "components": [os.path.relpath(component, tmp_path)],  # kustomize takes no absolute paths
    }
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    [dashboard] = render(tmp_path)
    validate_object(dashboard)
    assert dashboard["data"]["settings"] == kubeflow_config["data"]["settings"]
    links = json.loads(dashboard["data"]["links"])
    menu = {item["text"]: item for item in links["menuLinks"]}
    config, _ = workbench_config("kubeflow", tmp_path)
    assert menu["Cube Workbench"] == {
        "type": "item",
        "link": f"{config.ServerApp.base_url}lab",
        "text": "Cube Workbench",
        "icon": "work",
    }
    # Kubeflow's own entries stay.
    assert {"Notebooks", "Katib Experiments", "KServe Endpoints", "Pipelines"} <= set(menu)
    assert {"externalLinks", "documentationItems", "quickLinks"} <= set(links)


# -- the standalone overlay ---------------------------------------------------------------------------


def test_standalone_has_no_istio_and_takes_its_token_from_a_secret(tmp_path: Path) -> None:
    objects = rendered("standalone")
    assert not [obj for obj in objects if obj["apiVersion"].split("/")[0].endswith("istio.io")]
    config, settings = workbench_config("standalone", tmp_path)
    assert "identity_provider_class" not in config.ServerApp  # Jupyter's own token auth
    token = {var["name"]: var for var in workbench_container(objects)["env"]}["JUPYTER_TOKEN"]
    assert token["valueFrom"] == {"secretKeyRef": {"name": "cube-jupyter-token", "key": "token"}}
    assert settings.workbench.default_user == "jovyan" and settings.workbench.create_namespaces
    # The one user works in this server: $HOME is a PVC, not an emptyDir.
    volumes = {v["name"]: v for v in pod_template(objects)["spec"]["volumes"]}
    claim = volumes["home"]["persistentVolumeClaim"]["claimName"]
    assert set(volumes["home"]) == {"name", "persistentVolumeClaim"}
    the(objects, "PersistentVolumeClaim", claim)


# -- the rendered container, run ---------------------------------------------------------------------


@pytest.fixture
def unreachable_cluster(tmp_path: Path, refused_port: int) -> Iterator[Path]:
    """A kubeconfig naming an API server nobody runs: the workbench must serve (and say why its
    backends are down) without one."""
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "none", "cluster": {"server": f"http://127.0.0.1:{refused_port}"}}],
        "users": [{"name": "none", "user": {"token": "unused"}}],
        "contexts": [{"name": "none", "context": {"cluster": "none", "user": "none"}}],
        "current-context": "none",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig))
    yield path


def probe_paths(objects: list[Obj]) -> set[str]:
    container = workbench_container(objects)
    return {container[p]["httpGet"]["path"] for p in ("startupProbe", "readinessProbe", "livenessProbe")}


def test_the_kubeflow_workbench_pod_answers_its_probes_and_names_users_by_the_header(
    tmp_path: Path, unreachable_cluster: Path
) -> None:
    objects = rendered("kubeflow")
    base_url = workbench_config("kubeflow", tmp_path)[0].ServerApp.base_url
    with run_workbench(objects, tmp_path, secrets={}, kubeconfig=unreachable_cluster) as pod:
        for path in probe_paths(objects):
            answer = requests.get(pod.url(path), timeout=10)
            assert answer.status_code == 200 and "version" in answer.json(), path
        info = pod.url(f"{base_url}cube/api/v1/info")
        assert requests.get(info, timeout=10).status_code == 403
        answer = requests.get(info, headers={"kubeflow-userid": "alice@example.com"}, timeout=10)
        assert answer.status_code == 200, answer.text
        assert answer.json()["user"] == "alice@example.com"
        assert (answer.json()["role"], answer.json()["backend"]) == ("workbench", "kubernetes")
        lab = requests.get(
            pod.url(f"{base_url}lab"), headers={"kubeflow-userid": "alice@example.com"}, timeout=30
        )
        assert lab.status_code == 200 and "JupyterLab" in lab.text


def test_the_standalone_workbench_pod_answers_its_probes_and_wants_the_secrets_token(
    tmp_path: Path, unreachable_cluster: Path
) -> None:
    objects = rendered("standalone")
    base_url = workbench_config("standalone", tmp_path)[0].ServerApp.base_url
    token = STANDALONE_TOKEN["cube-jupyter-token"]["token"]
    with run_workbench(objects, tmp_path, secrets=STANDALONE_TOKEN, kubeconfig=unreachable_cluster) as pod:
        for path in probe_paths(objects):
            assert requests.get(pod.url(path), timeout=10).status_code == 200, path
        status = pod.url(f"{base_url}api/status")
        assert requests.get(status, timeout=10).status_code == 403
        assert requests.get(status, headers={"Authorization": "token wrong"}, timeout=10).status_code == 403
        answer = requests.get(
            pod.url(f"{base_url}cube/api/v1/info"), headers={"Authorization": f"token {token}"}, timeout=10
        )
        assert answer.status_code == 200 and answer.json()["user"] == "jovyan", answer.text


def test_a_config_file_that_fails_to_load_stops_the_workbench(
    tmp_path: Path, unreachable_cluster: Path
) -> None:
    """Jupyter would log the error and serve on defaults (the local backend, spawning processes in
    the pod); the Deployment's env makes it exit instead, so the rollout stops on it."""
    objects = copy.deepcopy(rendered("kubeflow"))
    config_map = config_map_of(objects, "config")
    config_map["data"]["kubeflow.py"] += "\nraise RuntimeError('a broken config file')\n"
    with (
        pytest.raises(AssertionError, match=r"(?s)the workbench exited.*a broken config file"),
        run_workbench(objects, tmp_path, secrets={}, kubeconfig=unreachable_cluster),
    ):
        pass
