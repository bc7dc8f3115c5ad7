"""Admin config: valid config loads, every bad value names its field."""

from __future__ import annotations

from typing import Any

import pytest
from traitlets.config import Config

from cube_jupyter.config import CONFIG_CLASSES, load_config_file, load_settings
from cube_jupyter.errors import ConfigError, InvalidInput
from cube_jupyter.images import NOTEBOOK_IMAGE, RUNTIME_IMAGE

GOOD_PROFILE = {"name": "cpu", "image": "jupyter/base", "cpu": "1", "memory": "2Gi"}

# One bad value per Configurable (and per shared base, named by the first class loaded that has it):
# (section, trait, value, the field the error names). tests/server/test_startup.py starts a server
# with each.
BAD_VALUE_PER_CLASS: list[tuple[str, str, Any, str]] = [
    ("CubeWorkbench", "poll_seconds", 0, "CubeWorkbench.poll_seconds"),
    ("CubeWorkbench", "prometheus_url", "prometheus:9090", "CubeWorkbench.prometheus_url"),
    ("CubeSpawner", "max_servers_per_user", -1, "CubeSpawner.max_servers_per_user"),
    ("CubeStorage", "credentials_secret", "Bad Secret", "CubeStorage.credentials_secret"),
    ("CubeGPU", "sample_seconds", 0, "CubeGPU.sample_seconds"),
    ("CubePipelines", "runner_command", [], "CubePipelines.runner_command"),
    ("CubeJobs", "katib_metrics_format", "(unclosed", "CubeJobs.katib_metrics_format"),
    ("CubeJobs", "ttl_seconds_after_finished", "a day", "CubeJobs.ttl_seconds_after_finished"),
    ("CubeSchedules", "max_catchup_runs", 0, "CubeSchedules.max_catchup_runs"),
    ("CubeQueues", "queues", {"trainin": "gpu-jobs"}, "CubeQueues.queues.trainin"),
    ("CubeQueues", "user_queues", ["ok", "Not_A_Name"], "CubeQueues.user_queues[1]"),
    ("CubePods", "service_account", "Bad_SA", "CubeSpawner.service_account"),
    ("CubeNamespaces", "namespace_template", "fixed", "CubeWorkbench.namespace_template"),
    ("CubePrometheus", "prometheus_url", "ftp://prom", "CubeWorkbench.prometheus_url"),
    (
        "CubeWorkload",
        "gpu_tolerations",
        [{"operator": "Sometimes"}],
        "CubePipelines.gpu_tolerations[0].operator",
    ),
    ("CubeWorkload", "images_with_runtime", ["ok/", "a/b:1"], "CubePipelines.images_with_runtime[1]"),
]


def settings_with(**spawner: Any) -> Any:
    config = Config()
    for key, value in spawner.items():
        setattr(config.CubeSpawner, key, value)
    return load_settings(config)


def workbench_with(**workbench: Any) -> Any:
    config = Config()
    for key, value in workbench.items():
        setattr(config.CubeWorkbench, key, value)
    return load_settings(config)


def test_defaults_load() -> None:
    settings = load_settings(Config())
    assert settings.workbench.backend == "local"
    assert settings.notebooks.profile(None).default
    assert settings.workbench.namespace_template == "cube-{username}"
    spawner = settings.notebooks.spawner
    assert spawner.path_prefix == "/notebook"
    assert spawner.server_url_template == "http://{name}.{namespace}.svc.cluster.local"
    assert spawner.workbench_principal == "cluster.local/ns/kubeflow/sa/cube-jupyter"


@pytest.mark.parametrize(
    "template",
    ["http://127.0.0.1:8888", "https://{name}.{namespace}:8443/", "http://{namespace}-{name}.internal"],
)
def test_server_url_templates_that_load(template: str) -> None:
    assert settings_with(server_url_template=template).notebooks.spawner.server_url_template == template


def test_profiles_parse_with_defaults_and_vgpu() -> None:
    settings = settings_with(
        profiles=[
            GOOD_PROFILE,
            {
                "name": "vgpu",
                "display_name": "Shared GPU",
                "image": "img",
                "cpu": "500m",
                "memory": "4Gi",
                "gpu": 20,
                "gpu_resource": "tencent.com/vcuda-core",
                "node_selector": {"gpu": "t4"},
                "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "env": {"A": "1"},
                "default": True,
            },
        ]
    )
    profiles = settings.notebooks
    assert profiles.profile(None).name == "vgpu"
    vgpu = profiles.profile("vgpu")
    assert vgpu.gpu_resource == "tencent.com/vcuda-core" and vgpu.gpu == 20
    assert profiles.profile("cpu").gpu_resource == "nvidia.com/gpu"
    # Every configured GPU resource name counts as GPUs, the profiles' among them.
    assert settings.gpu_resources == ("nvidia.com/gpu", "tencent.com/vcuda-core")


@pytest.mark.parametrize(
    ("spawner", "field"),
    [
        ({"profiles": []}, "CubeSpawner.profiles"),
        ({"profiles": [{**GOOD_PROFILE, "cpu": "two"}]}, "CubeSpawner.profiles[0].cpu"),
        ({"profiles": [{**GOOD_PROFILE, "memory": "2 GB"}]}, "CubeSpawner.profiles[0].memory"),
        ({"profiles": [{**GOOD_PROFILE, "gpu": -1}]}, "CubeSpawner.profiles[0].gpu"),
        ({"profiles": [{**GOOD_PROFILE, "gpu": True}]}, "CubeSpawner.profiles[0].gpu"),
        ({"profiles": [{**GOOD_PROFILE, "gpu_resource": "gpu"}]}, "CubeSpawner.profiles[0].gpu_resource"),
        ({"profiles": [{**GOOD_PROFILE, "name": "Not_DNS"}]}, "CubeSpawner.profiles[0].name"),
        ({"profiles": [{**GOOD_PROFILE, "imagee": "typo"}]}, "CubeSpawner.profiles[0].imagee"),
        ({"profiles": [GOOD_PROFILE, {**GOOD_PROFILE, "image": ""}]}, "CubeSpawner.profiles[1].image"),
        ({"profiles": [GOOD_PROFILE, GOOD_PROFILE]}, "CubeSpawner.profiles[1].name"),
        (
            {"profiles": [{**GOOD_PROFILE, "default": True}, {**GOOD_PROFILE, "name": "b", "default": True}]},
            "CubeSpawner.profiles",
        ),
        ({"profiles": [{**GOOD_PROFILE, "env": {"A": 1}}]}, "CubeSpawner.profiles[0].env"),
        (
            {"profiles": [{**GOOD_PROFILE, "tolerations": [{"effect": "Never"}]}]},
            "CubeSpawner.profiles[0].tolerations[0].effect",
        ),
        (
            {"profiles": [{**GOOD_PROFILE, "env": {"NB_PREFIX": "/x"}}]},
            "CubeSpawner.profiles[0].env.NB_PREFIX",
        ),
        ({"max_servers_per_user": -1}, "CubeSpawner.max_servers_per_user"),
        ({"cull_idle_seconds": -5}, "CubeSpawner.cull_idle_seconds"),
        ({"path_prefix": "notebook/"}, "CubeSpawner.path_prefix"),
        ({"workspace_size": "ten gigs"}, "CubeSpawner.workspace_size"),
        ({"user_header": ""}, "CubeSpawner.user_header"),
        ({"server_url_template": "{name}.{namespace}.svc"}, "CubeSpawner.server_url_template"),
        ({"server_url_template": "http://{name}.{user}.svc"}, "CubeSpawner.server_url_template"),
        (
            {"server_url_template": "http://{name}.{namespace}.svc/notebook"},
            "CubeSpawner.server_url_template",
        ),
        ({"server_url_template": "http://{name}:port"}, "CubeSpawner.server_url_template"),
        ({"server_url_template": "http://{0}"}, "CubeSpawner.server_url_template"),
        ({"workbench_principal": ""}, "CubeSpawner.workbench_principal"),
        (
            {"workbench_principal": "spiffe://cluster.local/ns/kubeflow/sa/x"},
            "CubeSpawner.workbench_principal",
        ),
        ({"workbench_principal": "cluster.local/ns/kubeflow"}, "CubeSpawner.workbench_principal"),
        ({"user_header": "kubeflow userid"}, "CubeSpawner.user_header"),
        ({"user_header": "x-user:"}, "CubeSpawner.user_header"),
        # Profile values the cluster would refuse at create time fail at startup instead.
        (
            {"profiles": [{**GOOD_PROFILE, "tolerations": [{"key": "k", "tolerationSeconds": "x"}]}]},
            "CubeSpawner.profiles[0].tolerations[0].tolerationSeconds",
        ),
        (
            {"profiles": [{**GOOD_PROFILE, "tolerations": [{"key": "k", "tolerationSeconds": 60}]}]},
            "CubeSpawner.profiles[0].tolerations[0].tolerationSeconds",
        ),
        (
            {"profiles": [{**GOOD_PROFILE, "tolerations": [{"key": "bad key", "operator": "Exists"}]}]},
            "CubeSpawner.profiles[0].tolerations[0].key",
        ),
        (
            {
                "profiles": [
                    {**GOOD_PROFILE, "tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]}
                ]
            },
            "CubeSpawner.profiles[0].tolerations[0].value",
        ),
        (
            {"profiles": [{**GOOD_PROFILE, "node_selector": {"gpu type": "a100"}}]},
            "CubeSpawner.profiles[0].node_selector.gpu type",
        ),
        (
            {"profiles": [{**GOOD_PROFILE, "node_selector": {"gpu": "A100 80GB"}}]},
            "CubeSpawner.profiles[0].node_selector.gpu",
        ),
        ({"profiles": [{**GOOD_PROFILE, "image": "jupyter/base notebook"}]}, "CubeSpawner.profiles[0].image"),
        ({"profiles": [{**GOOD_PROFILE, "image": " jupyter/base"}]}, "CubeSpawner.profiles[0].image"),
        # A quantity the API server would refuse at a user's create (" 2 ") fails at startup.
        ({"profiles": [{**GOOD_PROFILE, "cpu": " 2 "}]}, "CubeSpawner.profiles[0].cpu"),
        ({"profiles": [{**GOOD_PROFILE, "cpu": "0"}]}, "CubeSpawner.profiles[0].cpu"),
        ({"profiles": [{**GOOD_PROFILE, "memory": "0Gi"}]}, "CubeSpawner.profiles[0].memory"),
        ({"profiles": [{**GOOD_PROFILE, "env": {"A B": "1"}}]}, "CubeSpawner.profiles[0].env.A B"),
        (
            {"profiles": [{**GOOD_PROFILE, "gpu_resource": "nvidia.com/"}]},
            "CubeSpawner.profiles[0].gpu_resource",
        ),
    ],
)
def test_bad_config_names_the_field(spawner: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        settings_with(**spawner)
    assert caught.value.field == field
    assert field.split(".")[-1].split("[")[0] in caught.value.message


@pytest.mark.parametrize(
    ("workbench", "field"),
    [
        ({"gpu_quota_per_user": -2}, "CubeWorkbench.gpu_quota_per_user"),
        ({"namespace_template": "fixed"}, "CubeWorkbench.namespace_template"),
        ({"namespace_template": "Cube_{username}"}, "CubeWorkbench.namespace_template"),
        # Format errors are config errors, not KeyError/IndexError tracebacks.
        ({"namespace_template": "cube-{username}-{team}"}, "CubeWorkbench.namespace_template"),
        ({"namespace_template": "cube-{username}-{0}"}, "CubeWorkbench.namespace_template"),
        ({"namespace_template": "cube-{username}-{"}, "CubeWorkbench.namespace_template"),
        # Fits "x" but not the longest slug a user can get (53 characters).
        ({"namespace_template": "kubeflow-user-{username}"}, "CubeWorkbench.namespace_template"),
    ],
)
def test_bad_workbench_config_names_the_field(workbench: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        workbench_with(**workbench)
    assert caught.value.field == field
    assert field.split(".")[-1] in caught.value.message


@pytest.mark.parametrize("trait", ["admin_users", "gpu_quota_per_user", "namespace_template"])
def test_workbench_wide_traits_still_load_by_their_old_spawner_names_with_a_warning(trait: str) -> None:
    value = {"admin_users": ["root"], "gpu_quota_per_user": 3, "namespace_template": "ml-{username}"}[trait]
    config = Config()
    setattr(config.CubeSpawner, trait, value)
    settings = load_settings(config)
    assert getattr(settings.workbench, trait) == value
    [warning] = settings.deprecations
    assert f"CubeSpawner.{trait} is deprecated" in warning and f"CubeWorkbench.{trait}" in warning
    # The new name wins when both are given, and the old one is said to be ignored.
    setattr(config.CubeWorkbench, trait, getattr(load_settings(Config()).workbench, trait))
    both = load_settings(config)
    assert getattr(both.workbench, trait) != value
    assert "ignored" in both.deprecations[0]
    # A bad value given by the old name is refused, naming the trait where it lives now.
    bad = Config()
    bad.CubeSpawner.gpu_quota_per_user = -1
    with pytest.raises(ConfigError) as refused:
        load_settings(bad)
    assert refused.value.field == "CubeWorkbench.gpu_quota_per_user"
    assert "CubeSpawner.gpu_quota_per_user" in refused.value.message


def test_settings_are_frozen_once_loaded() -> None:
    settings = load_settings(Config())
    with pytest.raises(AttributeError, match="read-only"):
        settings.workbench.workbench_url = "http://elsewhere/lab"
    with pytest.raises(AttributeError, match="read-only"):
        settings.jobs.jobs.gpu_resource = "amd.com/gpu"


def test_longest_fitting_namespace_template_loads_and_fits_every_user() -> None:
    from cube_jupyter.names import MAX_SLUG_LENGTH

    template = "k" * (63 - MAX_SLUG_LENGTH - 1) + "-{username}"
    settings = workbench_with(namespace_template=template)
    assert len(settings.namespace_for("x" * 300 + "@example.com")) <= 63


def test_valid_profile_details_load() -> None:
    profile = {
        **GOOD_PROFILE,
        "image": "registry.example.com:5000/team/lab@sha256:" + "a" * 64,
        "node_selector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "pool": ""},
        "tolerations": [
            {"operator": "Exists"},
            {"key": "dedicated", "value": "ml", "effect": "NoExecute", "tolerationSeconds": 60},
        ],
        "env": {"HF_HOME": "/data/hf", "my.var-1": "x"},
    }
    loaded = settings_with(profiles=[profile]).notebooks.profile("cpu")
    assert loaded.image == profile["image"] and loaded.tolerations[1]["tolerationSeconds"] == 60


def test_bad_trait_types_name_the_trait() -> None:
    config = Config()
    config.CubeWorkbench.backend = "docker"
    with pytest.raises(ConfigError, match="backend"):
        load_settings(config)
    config = Config()
    config.CubeSpawner.resource_kind = "Deployment"
    with pytest.raises(ConfigError, match="resource_kind"):
        load_settings(config)


def test_unknown_profile_lists_the_offer() -> None:
    settings = settings_with(profiles=[GOOD_PROFILE]).notebooks
    with pytest.raises(InvalidInput) as caught:
        settings.profile("gpu")
    assert caught.value.field == "profile" and "cpu" in caught.value.message


def test_config_file_loads_and_errors_name_the_flag(tmp_path: Any) -> None:
    good = tmp_path / "cube_config.py"
    good.write_text('c.CubeSpawner.max_servers_per_user = 3\nc.CubeWorkbench.backend = "kubernetes"\n')
    settings = load_settings(load_config_file(good))
    assert settings.notebooks.spawner.max_servers_per_user == 3 and settings.workbench.backend == "kubernetes"
    broken = tmp_path / "broken.py"
    broken.write_text("c.CubeSpawner.profiles = [\n")
    with pytest.raises(ConfigError) as caught:
        load_config_file(broken)
    assert caught.value.field == "--config"
    with pytest.raises(ConfigError):
        load_config_file(tmp_path / "missing.py")


def test_every_configurable_and_shared_base_has_a_bad_value_case() -> None:
    sections = {section for section, *_ in BAD_VALUE_PER_CLASS}
    bases = {b for cls in CONFIG_CLASSES for b in cls.mro() if b.__name__.startswith("Cube")}
    configurable = {cls.__name__ for cls in bases if cls.class_own_traits(config=True)}
    assert configurable == sections


@pytest.mark.parametrize(("section", "trait", "value", "field"), BAD_VALUE_PER_CLASS)
def test_a_bad_value_in_any_configurable_fails_the_one_load(
    section: str, trait: str, value: Any, field: str
) -> None:
    config = Config()
    setattr(config[section], trait, value)
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    assert caught.value.field == field
    assert trait in caught.value.message


def test_shared_traits_are_set_once_for_every_class_or_per_class() -> None:
    config = Config()
    config.CubeWorkload.gpu_tolerations = [{"key": "gpu", "operator": "Exists"}]
    config.CubeWorkload.gpu_node_selector = {"pool": "gpu"}
    config.CubePipelines.gpu_node_selector = {"pool": "steps"}
    config.CubePods.service_account = "runner"
    config.CubeJobs.service_account = "trainer"
    settings = load_settings(config)
    for workload in (settings.jobs, settings.pipelines):
        assert workload.gpu_tolerations == [{"key": "gpu", "operator": "Exists"}]
    assert settings.jobs.gpu_node_selector == {"pool": "gpu"}
    assert settings.pipelines.gpu_node_selector == {"pool": "steps"}
    assert settings.notebooks.spawner.service_account == "runner"
    assert settings.pod_service_accounts == ("runner", "trainer")
    assert settings.pipelines.pipelines.service_account == "runner"
    assert settings.jobs.jobs.service_account == "trainer"


def test_jobs_follow_the_servers_namespace_unless_set() -> None:
    config = Config()
    config.CubeWorkbench.namespace_template = "kf-{username}"
    config.CubeJobs.namespace_template = " "  # '' (blank) is valid for jobs, not for servers
    settings = load_settings(config)
    assert settings.jobs.jobs.namespace_template == ""
    assert settings.jobs.jobs_namespace_for("alice") == "kf-alice"
    assert settings.user_namespaces("alice") == ("kf-alice",)
    config.CubeJobs.namespace_template = "jobs-{username}"
    assert load_settings(config).jobs.jobs_namespace_for("alice") == "jobs-alice"
    assert load_settings(config).gpu.user_namespaces("alice") == ("kf-alice", "jobs-alice")


def test_feature_configs_come_from_the_one_load() -> None:
    settings = load_settings(Config())
    assert settings.jobs.storage is settings.storage is settings.pipelines.storage
    assert settings.jobs.default_image == settings.pipelines.default_image == RUNTIME_IMAGE
    assert settings.notebooks.profile(None).image == NOTEBOOK_IMAGE


def test_valid_values_in_every_configurable_load_as_given() -> None:
    """Validators keep what they accept (or its normalized form), never replace it with something else."""
    values: dict[str, dict[str, Any]] = {
        "CubeWorkbench": {
            "poll_seconds": 2.5,
            "prometheus_url": " http://prom:9090 ",
            "namespace": "kubeflow",
            "create_namespaces": True,
            "user_cluster_role": "ml-user",
            "admin_users": ["root"],
            "gpu_quota_per_user": 4,
        },
        "CubeSpawner": {
            "workspace_size": "20Gi",
            "storage_class": "fast-ssd",
            "resource_kind": "StatefulSet",  # a Notebook's prefix is its controller's '/notebook'
            "path_prefix": "",
            "istio_gateway": "gw",
            "istio_ingress_principal": "td/ns/a/sa/b",
            "cmd": ["jupyter", "lab"],
            "service_account": "",
        },
        "CubeStorage": {"credentials_secret": "minio", "connect_timeout": 1.5, "retries": 0},
        "CubeGPU": {"history_seconds": 0, "cache_seconds": 0},
        "CubePipelines": {"default_cpu": "500m", "default_image": "img:1", "gpu_resource": "amd.com/gpu"},
        "CubeJobs": {
            "ttl_seconds_after_finished": None,
            "training_images": {"pytorch": "torch:2"},
            "serving_runtimes": {"sklearn": "kserve-sklearnserver"},
            "workspace_claim_template": "ws-{username}",
            "serving_prometheus_url": "http://keda-prom:9090/x",
            "runtime_image": "mirror.example.com/cube/runtime:1",
            "runtime_injection": "always",
            "images_with_runtime": ["registry.example.com/ml/", "registry.example.com/tools/step"],
        },
        "CubeSchedules": {"poll_seconds": 0.5, "on_time_seconds": 120.0, "max_catchup_runs": 50},
        "CubeQueues": {
            "queues": {"training": "gpu-jobs", "pipeline-step": "steps"},
            "profile_queues": {"standard": "notebooks"},
            "user_queues": ["cpu-batch"],
            "priority_classes": {"notebook": "interactive"},
            "gang_scheduler": "volcano",
        },
    }
    config = Config()
    for section, traits in values.items():
        for trait, value in traits.items():
            setattr(config[section], trait, value)
    settings = load_settings(config)
    loaded = {
        "CubeWorkbench": settings.workbench,
        "CubeSpawner": settings.notebooks.spawner,
        "CubeStorage": settings.storage,
        "CubeGPU": settings.gpu.gpu,
        "CubePipelines": settings.pipelines.pipelines,
        "CubeJobs": settings.jobs.jobs,
        "CubeSchedules": settings.schedules.schedules,
        "CubeQueues": settings.queues,
    }
    normalized = {
        ("CubeWorkbench", "prometheus_url"): "http://prom:9090/",
        ("CubeJobs", "serving_prometheus_url"): "http://keda-prom:9090/x/",
    }
    for section, traits in values.items():
        for trait, value in traits.items():
            assert getattr(loaded[section], trait) == normalized.get((section, trait), value), (
                section,
                trait,
            )
    assert settings.gpu.prometheus_url == "http://prom:9090/"  # the workbench's, CubeGPU setting none
    assert settings.jobs.prometheus_url == "http://keda-prom:9090/x/"
    assert settings.pipelines.default_image == "img:1"


def test_queue_of_a_profile_that_does_not_exist_is_refused_naming_it() -> None:
    config = Config()
    config.CubeQueues.profile_queues = {"gpu-large": "gpu-notebooks"}
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    assert caught.value.field == "CubeQueues.profile_queues.gpu-large" and "standard" in caught.value.message
