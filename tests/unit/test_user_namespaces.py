"""A user's namespace: templates that can spell Kubeflow's profile names, the config that decides where
servers go and whether the workbench makes namespaces, the objects of a namespace it makes (each
valid strictly), and Kubeflow's owner and contributor conventions."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from cube_jupyter.errors import ConfigError, InvalidInput
from cube_jupyter.jobs.config import JobSettings
from cube_jupyter.kube.namespace_objects import render_namespace_objects
from cube_jupyter.kube.profiles import Contribution, contributions, owned_namespaces
from cube_jupyter.names import kubeflow_username, namespace_from_template, namespace_pattern, user_slug
from tests.jobs.helpers import make_config
from tests.k8s_schemas import validate_object
from tests.kubernetes.actors import kubeflow_profile as profile

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "QUtJQQ==", "AWS_SECRET_ACCESS_KEY": "czNjcjN0", "OTHER": "eA=="}


def settings_with(**sections: dict[str, Any]) -> JobSettings:
    return make_config(**sections)


# --- templates -------------------------------------------------------------------------------------------


def test_a_template_can_spell_kubeflows_default_profile_name() -> None:
    """Kubeflow's manifests name user@example.com's profile `kubeflow-user-example-com`; the escaped
    `{username}` never could (it adds a digest to keep names apart)."""
    settings = settings_with(CubeWorkbench={"namespace_template": "kubeflow-{username_kubeflow}"})
    assert settings.namespace_for("user@example.com") == "kubeflow-user-example-com"
    assert settings.namespace_for("Jane.Doe@Example.COM") == "kubeflow-jane-doe-example-com"
    assert kubeflow_username("a.b@x") == kubeflow_username("a-b@x") == "a-b-x"  # why it is not the default
    escaped = settings_with(CubeWorkbench={"namespace_template": "kubeflow-{username}"})
    assert escaped.namespace_for("user@example.com") == f"kubeflow-{user_slug('user@example.com')}"
    assert escaped.namespace_for("user@example.com") != "kubeflow-user-example-com"


def test_jobs_templates_take_the_same_fields() -> None:
    settings = settings_with(CubeJobs={"namespace_template": "jobs-{username_kubeflow}"})
    assert settings.jobs_namespace_for("user@example.com") == "jobs-user-example-com"


@pytest.mark.parametrize(
    ("template", "says"),
    [
        ("kubeflow", "must contain {username} or {username_kubeflow}"),
        ("kubeflow-{username_kubeflow}-{team}", "only {username} or {username_kubeflow} may be used"),
        ("Kubeflow-{username_kubeflow}", "may only have lower-case letters"),
    ],
)
def test_bad_templates_fail_at_startup_naming_the_field(template: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as refused:
        settings_with(CubeWorkbench={"namespace_template": template})
    assert refused.value.field == "CubeWorkbench.namespace_template"


def test_a_kubeflow_name_too_long_for_a_namespace_is_the_users_error_not_the_apis() -> None:
    template = "kubeflow-{username_kubeflow}"
    with pytest.raises(
        InvalidInput, match=r"gets no valid namespace from CubeWorkbench\.namespace_template"
    ) as e:
        namespace_from_template(template, "x" * 60 + "@example.com", "CubeWorkbench.namespace_template")
    assert e.value.field == "user" and "the limit is 63" in e.value.message
    with pytest.raises(InvalidInput, match="'@@' gets no valid namespace"):  # nothing left of the name
        namespace_from_template("{username_kubeflow}", "@@", "CubeWorkbench.namespace_template")


def test_namespace_pattern_matches_what_each_field_can_make() -> None:
    pattern = namespace_pattern("kubeflow-{username_kubeflow}")
    assert pattern.match("kubeflow-user-example-com") and not pattern.match("cube-user")
    both = namespace_pattern("{username}-in-{username_kubeflow}")
    assert both.match("alice-in-alice-example-com") and not both.match("alice-in-")


# --- the settings that decide ------------------------------------------------------------------------------


def test_defaults_use_the_template_and_make_no_namespaces() -> None:
    workbench = settings_with().workbench
    assert (workbench.namespace_source, workbench.create_namespaces) == ("template", False)
    assert workbench.user_cluster_role == "cube-jupyter-user"


@pytest.mark.parametrize(
    ("sections", "field", "says"),
    [
        (
            {"CubeWorkbench": {"namespace_source": "kubeflow-profile", "create_namespaces": True}},
            "CubeWorkbench.create_namespaces",
            "Kubeflow's profile controller creates",
        ),
        (
            {"CubeWorkbench": {"create_namespaces": True}, "CubeStorage": {"credentials_secret": "minio"}},
            "CubeWorkbench.namespace",
            "copies CubeStorage.credentials_secret from the workbench's own namespace",
        ),
        (
            {"CubeWorkbench": {"namespace_source": "ldap"}},
            "CubeWorkbench.namespace_source",
            "namespace_source",
        ),
        (
            {"CubeWorkbench": {"user_cluster_role": "Cube User"}},
            "CubeWorkbench.user_cluster_role",
            "DNS-1123",
        ),
    ],
)
def test_settings_that_cannot_work_together_fail_at_startup(
    sections: dict[str, dict[str, Any]], field: str, says: str
) -> None:
    with pytest.raises(ConfigError, match=says) as refused:
        settings_with(**sections)
    assert refused.value.field == field


# --- the objects of a namespace the workbench makes ---------------------------------------------------------


def namespace_settings(**workbench: Any) -> JobSettings:
    return settings_with(
        CubeWorkbench={"namespace": "kubeflow", "create_namespaces": True, **workbench},
        CubeStorage={"credentials_secret": "s3-credentials"},
        CubeJobs={"service_account": "trainer", "serving_service_account": "predictor"},
        CubePipelines={"service_account": "pipeline-runner"},
    )


def test_every_namespace_object_passes_strict_validation_in_creation_order() -> None:
    objects = render_namespace_objects(
        namespace_settings(), "Alice@Example.com", "cube-alice", copy.deepcopy(CREDENTIALS)
    )
    for obj in objects:
        validate_object(obj, strict=True)
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("Namespace", "cube-alice"),
        ("ServiceAccount", "default-editor"),
        ("ServiceAccount", "pipeline-runner"),
        ("ServiceAccount", "predictor"),
        ("ServiceAccount", "trainer"),
        ("RoleBinding", "cube-jupyter-pods"),
        ("Secret", "s3-credentials"),
    ]
    assert {o["metadata"].get("namespace") for o in objects[1:]} == {"cube-alice"}


def test_the_namespace_is_mesh_injected_and_says_whose_it_is() -> None:
    [namespace, *_] = render_namespace_objects(namespace_settings(), "Alice@Example.com", "cube-alice")
    assert namespace["metadata"]["labels"] == {
        "istio-injection": "enabled",  # no sidecar: no AuthorizationPolicy guards the tokenless server
        "app.kubernetes.io/managed-by": "cube-jupyter",
        "cube-jupyter/user": user_slug("Alice@Example.com"),
    }
    # Kubeflow's profile controller reads `owner`: a Profile of another user cannot take it over.
    assert namespace["metadata"]["annotations"] == {
        "owner": "Alice@Example.com",
        "cube-jupyter/user": "Alice@Example.com",
    }


def test_every_pod_service_account_is_bound_to_the_user_cluster_role() -> None:
    objects = render_namespace_objects(namespace_settings(user_cluster_role="ml-user"), "alice", "cube-alice")
    [binding] = [o for o in objects if o["kind"] == "RoleBinding"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "ml-user",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": name, "namespace": "cube-alice"}
        for name in ("default-editor", "pipeline-runner", "predictor", "trainer")
    ]


def test_pods_on_the_namespaces_default_account_get_it_bound_not_created() -> None:
    settings = settings_with(CubePods={"service_account": ""}, CubeWorkbench={"create_namespaces": True})
    objects = render_namespace_objects(settings, "alice", "cube-alice")
    assert [o["kind"] for o in objects] == ["Namespace", "RoleBinding"]  # the API server makes `default`
    assert objects[1]["subjects"] == [
        {"kind": "ServiceAccount", "name": "default", "namespace": "cube-alice"}
    ]


def test_the_credentials_copy_holds_only_the_keys_pods_read() -> None:
    objects = render_namespace_objects(namespace_settings(), "alice", "cube-alice", CREDENTIALS)
    [secret] = [o for o in objects if o["kind"] == "Secret"]
    assert secret["type"] == "Opaque"
    assert secret["data"] == {"AWS_ACCESS_KEY_ID": "QUtJQQ==", "AWS_SECRET_ACCESS_KEY": "czNjcjN0"}
    assert "stringData" not in secret
    without_store = settings_with(CubeWorkbench={"create_namespaces": True})
    assert all(o["kind"] != "Secret" for o in render_namespace_objects(without_store, "alice", "cube-alice"))


@pytest.mark.parametrize(
    ("kind", "bad_key"), [("RoleBinding", "roleref"), ("Namespace", "spek"), ("Secret", "dta")]
)
def test_misspelt_namespace_object_fields_fail_strict_validation(kind: str, bad_key: str) -> None:
    objects = render_namespace_objects(namespace_settings(), "alice", "cube-alice", CREDENTIALS)
    [obj] = [o for o in objects if o["kind"] == kind]
    obj[bad_key] = {}
    with pytest.raises(AssertionError, match=bad_key):
        validate_object(obj, strict=True)


# --- Kubeflow's conventions -------------------------------------------------------------------------


def binding(namespace: str, user: str | None, role: str | None, name: str = "b") -> dict[str, Any]:
    annotations = {k: v for k, v in (("user", user), ("role", role)) if v is not None}
    return {"metadata": {"name": name, "namespace": namespace, "annotations": annotations}}


def test_a_users_namespaces_are_the_profiles_they_own() -> None:
    profiles = [
        profile("team-b", "alice@x.com"),
        profile("kubeflow-bob", "bob@x.com"),
        profile("a-lab", "alice@x.com"),
    ]
    assert owned_namespaces(profiles, "alice@x.com") == ["a-lab", "team-b"]
    assert owned_namespaces(profiles, "carol@x.com") == []


def test_contributors_are_kfams_annotated_role_bindings_in_profile_namespaces() -> None:
    bindings = [
        binding("team-b", "carol@x.com", "edit", "user-carol-x-com-clusterrole-edit"),
        binding("a-lab", "carol@x.com", "view"),
        binding("team-b", "carol@x.com", None),  # not KFAM's: no role
        binding("team-b", "dave@x.com", "edit"),
        binding("kube-system", "carol@x.com", "admin"),  # not a profile's namespace
        binding("a-lab", "carol@x.com", "owner"),  # not one of KFAM's roles
    ]
    assert contributions(bindings, "carol@x.com", ["team-b", "a-lab"]) == [
        Contribution("a-lab", "view"),
        Contribution("team-b", "edit"),
    ]
