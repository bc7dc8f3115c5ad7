"""CubeJobs: admin config validated once; a bad value is a ConfigError naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from cube_jupyter.errors import ConfigError
from cube_jupyter.images import RUNTIME_IMAGE
from tests.jobs.helpers import make_config


def test_defaults_resolve_from_the_workbench() -> None:
    config = make_config()
    assert config.default_image == config.jobs.runtime_image == RUNTIME_IMAGE
    assert config.image_for("pytorch") == RUNTIME_IMAGE
    assert config.jobs_namespace_for("alice") == config.namespace_for("alice")
    assert config.prometheus_url == ""
    assert config.serving_service_account == config.jobs.service_account


def test_overrides() -> None:
    config = make_config(
        CubeJobs={
            "training_images": {"pytorch": "registry.example.com/torch:2.5"},
            "namespace_template": "jobs-{username}",
            "serving_service_account": "kserve-s3",
            "serving_prometheus_url": "http://prometheus.monitoring:9090",
        }
    )
    assert config.image_for("pytorch") == "registry.example.com/torch:2.5"
    assert config.image_for("mpi") == config.default_image
    assert config.jobs_namespace_for("alice") == "jobs-alice"
    assert config.serving_service_account == "kserve-s3"
    assert config.prometheus_url == "http://prometheus.monitoring:9090/"
    from_gpu = make_config(CubeGPU={"prometheus_url": "http://prom:9090"})
    assert from_gpu.prometheus_url == "http://prom:9090/"


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"default_cpu": "lots"}, "CubeJobs.default_cpu"),
        ({"default_memory": "0"}, "CubeJobs.default_memory"),
        ({"gpu_resource": "gpu"}, "CubeJobs.gpu_resource"),
        ({"service_account": "Bad_SA"}, "CubeJobs.service_account"),
        ({"serving_service_account": "bad sa"}, "CubeJobs.serving_service_account"),
        ({"training_images": {"jax": "x/y:1"}}, "CubeJobs.training_images.jax"),
        ({"training_images": {"pytorch": "bad image"}}, "CubeJobs.training_images.pytorch"),
        ({"serving_runtimes": {"custom": "x"}}, "CubeJobs.serving_runtimes.custom"),
        ({"serving_runtimes": {"sklearn": "Bad_Runtime"}}, "CubeJobs.serving_runtimes.sklearn"),
        ({"namespace_template": "jobs"}, "CubeJobs.namespace_template"),
        ({"namespace_template": "{username}-" + "x" * 20}, "CubeJobs.namespace_template"),
        ({"workspace_claim_template": "{user}-ws"}, "CubeJobs.workspace_claim_template"),
        ({"ttl_seconds_after_finished": -1}, "CubeJobs.ttl_seconds_after_finished"),
        ({"entry_command": []}, "CubeJobs.entry_command"),
        ({"default_image": "bad image"}, "CubeJobs.default_image"),
        ({"katib_metrics_format": "(unclosed"}, "CubeJobs.katib_metrics_format"),
        ({"katib_metrics_format": r"\w+=\d+"}, "CubeJobs.katib_metrics_format"),
        ({"gpu_utilization_query": "avg(x{pod=~{pod}})"}, "CubeJobs.gpu_utilization_query"),
        ({"gpu_node_selector": {"bad key!": "x"}}, "CubeJobs.gpu_node_selector.bad key!"),
        ({"gpu_tolerations": [{"operator": "Sometimes"}]}, "CubeJobs.gpu_tolerations[0].operator"),
        ({"serving_prometheus_url": "ftp://prom"}, "CubeJobs.serving_prometheus_url"),
        ({"training_api": "trainer-v3"}, "CubeJobs.training_api"),
        ({"training_runtimes": {"tensorflow": "tf-distributed"}}, "CubeJobs.training_runtimes.tensorflow"),
        ({"training_runtimes": {"pytorch": "Torch_Runtime"}}, "CubeJobs.training_runtimes.pytorch"),
        ({"cpu_slots": -1}, "CubeJobs.cpu_slots"),
        ({"max_running_jobs_per_user": -2}, "CubeJobs.max_running_jobs_per_user"),
        ({"max_queued_per_user": -1}, "CubeJobs.max_queued_per_user"),
        ({"user_priorities": {"alice": "high"}}, "CubeJobs.user_priorities"),
    ],
)
def test_bad_values_name_the_field(values: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        make_config(CubeJobs=values)
    assert caught.value.field == field


def test_wrong_trait_type_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        make_config(CubeJobs={"ttl_seconds_after_finished": "a day"})


def test_the_training_api_is_pinned_and_runtimes_are_named_over_the_presets() -> None:
    config = make_config()
    assert config.jobs.training_api == "auto"
    assert config.training_runtimes == {"pytorch": "torch-distributed", "xgboost": "xgboost-distributed"}
    pinned = make_config(
        CubeJobs={"training_api": "Trainer-V2", "training_runtimes": {"pytorch": "torch-gpu", "xgboost": ""}}
    )
    assert pinned.jobs.training_api == "trainer-v2"
    assert pinned.training_runtimes == {"pytorch": "torch-gpu"}  # '' runs xgboost on the operator
