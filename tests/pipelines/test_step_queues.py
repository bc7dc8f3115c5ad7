"""Pipeline step pods on Kueue queues: the admin's LocalQueue for steps, or a step's own `queue:` /
`priority:` tag among those offered, as pod labels of Argo's templates and of KFP's executors (Kueue's
pod integration gates each step pod until admitted); a queue not offered is refused naming the step;
a `label:` tag cannot set Kueue's labels around that rule."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cube_jupyter.pipelines.kubernetes.argo import STEP_LABEL, compile_workflow, step_template_name
from cube_jupyter.pipelines.kubernetes.kfp import compile_kfp
from cube_jupyter.pipelines.model import PipelineError
from cube_jupyter.pipelines.tags import parse_cell_tags
from cube_jupyter.queues import PRIORITY_LABEL, QUEUE_LABEL
from tests.k8s_schemas import validate_object
from tests.pipelines.test_argo import fan_out_fan_in, make_settings, step, templates
from tests.pipelines.test_kfp_compile import documents

QUEUES = {
    "queues": {"pipeline-step": "steps"},
    "user_queues": ["gpu-steps"],
    "user_priority_classes": ["urgent"],
}


def test_step_tags_read_queue_and_priority_and_refuse_what_is_no_name() -> None:
    tags = parse_cell_tags(["step:train", "queue:gpu-steps", "priority:urgent"], 3)
    assert tags.options == {"queue": "gpu-steps", "priority": "urgent"}
    with pytest.raises(PipelineError) as caught:
        parse_cell_tags(["step:train", "queue:GPU Steps"], 3)
    assert caught.value.field == "cells[3].tags"


def test_argo_step_pods_carry_the_admins_queue_or_the_steps_offered_choice() -> None:
    pipeline = replace(
        fan_out_fan_in(), steps=(step("prepare"), step("train", gpu=1, queue="gpu-steps", priority="urgent"))
    )
    workflow = compile_workflow(pipeline, make_settings(CubeQueues=QUEUES), run_id="r")
    validate_object(workflow)
    labels = {
        name: templates(workflow)[step_template_name(name)]["metadata"]["labels"]
        for name in ("prepare", "train")
    }
    assert labels["prepare"] == {STEP_LABEL: "prepare", QUEUE_LABEL: "steps"}
    assert labels["train"] == {STEP_LABEL: "train", QUEUE_LABEL: "gpu-steps", PRIORITY_LABEL: "urgent"}
    unqueued = compile_workflow(replace(pipeline, steps=(step("prepare"),)), make_settings(), run_id="r")
    assert QUEUE_LABEL not in templates(unqueued)[step_template_name("prepare")]["metadata"]["labels"]


def test_a_queue_not_offered_or_a_kueue_label_tag_is_refused_naming_the_step() -> None:
    settings = make_settings(CubeQueues=QUEUES)
    for options, field in (
        ({"queue": "someone-elses"}, "steps.prepare.queue"),
        ({"priority": "critical"}, "steps.prepare.priority"),
        ({"labels": {QUEUE_LABEL: "someone-elses"}}, "steps.prepare.labels"),
    ):
        pipeline = replace(fan_out_fan_in(), steps=(step("prepare", **options),))
        with pytest.raises(PipelineError) as caught:
            compile_workflow(pipeline, settings, run_id="r")
        assert caught.value.field == field


def test_kfp_executors_carry_the_queue_as_pod_labels() -> None:
    pipeline = replace(fan_out_fan_in(), steps=(step("prepare"), step("train", queue="gpu-steps")))
    _, platform = documents(compile_kfp(pipeline, make_settings(CubeQueues=QUEUES)))
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert executors["exec-step-prepare"]["podMetadata"]["labels"] == {QUEUE_LABEL: "steps"}
    assert executors["exec-step-train"]["podMetadata"]["labels"] == {QUEUE_LABEL: "gpu-steps"}
    with pytest.raises(PipelineError) as caught:
        compile_kfp(
            replace(pipeline, steps=(step("prepare", queue="nope"),)), make_settings(CubeQueues=QUEUES)
        )
    assert caught.value.field == "steps.prepare.queue"
