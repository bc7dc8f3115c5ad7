"""Compile a pipeline to Kubeflow Pipelines v2 IR (PipelineSpec YAML) with KFP's own SDK.

`cube-jupyter pipeline compile NB --target kfp -o pipeline.yaml` writes what `kfp.compiler` makes of
one `dsl.container_component` per step, called in a `dsl.pipeline`:

- Each step's container runs the same step runner as on Argo (`CubePipelines.runner_command`) in the
  step's image, with the step's part of the pipeline as JSON in its args (`--pipeline-json`: that
  step, the edges into it, the imports, functions and parameters cell), so the IR is self-contained.
- Data between steps are KFP artifacts (`out_<variable>` of one task is `in_<variable>` of the
  next), not keys in our store: the launcher downloads a task's inputs to local paths and uploads
  its outputs from them, under the pipeline root, so the KFP UI shows the lineage. The runner reads
  and writes those paths (`--input-file`, `--output-file`; `kfp_io.py`). An artifact's type is what
  the marshaller will most likely write (`artifact_type`): `Dataset` for frames and arrays, `Model`
  for estimators and torch modules, `Artifact` otherwise; the format the marshaller actually used
  is in the artifact's metadata (`kind`).
- Each step also outputs its executed notebook (`step_notebook`) and, when it records metrics, a
  `Metrics` artifact (`step_metrics`) whose metadata the KFP UI charts.
- Pipeline parameters come from the notebook's parameters cell, typed by their defaults (int, float,
  str, bool, list, dict); a default that is an expression stays in the parameters cell.
- `cpu:`/`memory:`/`gpu:` become requests and limits, GPU node selectors and tolerations from the
  admin's workload config go through kfp-kubernetes, `retries:` are task retries (with the admin's
  backoff), `timeout:` the pod's activeDeadlineSeconds (kfp-kubernetes `set_timeout`).
- A step pod needs no store credentials: KFP's launcher moves every artifact, with its own.
- Caching is KFP's: on, except for steps tagged `cache: false`. KFP's fingerprint covers the command
  line, which carries the step's code hash (`--code-hash`), so a changed step runs again; inputs
  that changed upstream change it too, as KFP keys on its input artifacts.
- KFP has no init-container API (nor does kfp-kubernetes), so a step image that lacks cube-jupyter
  gets the runtime through the launcher instead (`kfp_runtime.py`): one importer task brings the
  wheelhouse from `CubePipelines.kfp_runtime_wheels` into the pipeline, and such a step takes it as
  an input artifact and installs it before the runner starts. Without that trait such a step is
  refused, naming its image and the trait.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import inspect
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cube_jupyter import fields
from cube_jupyter.errors import ConfigError, InvalidInput
from cube_jupyter.kube import pods
from cube_jupyter.pipelines.config import PipelineSettings
from cube_jupyter.pipelines.kfp_io import METRICS_OUTPUT, NOTEBOOK_OUTPUT, RESERVED, input_name, output_name
from cube_jupyter.pipelines.kubernetes.kfp_runtime import RUNTIME_INPUT, bootstrap_command
from cube_jupyter.pipelines.model import Pipeline, PipelineError, Step
from cube_jupyter.pipelines.stepnb import step_metrics

PARAMETER_TYPES: dict[type, type] = {bool: bool, int: int, float: float, str: str, list: list, dict: dict}
# What the marshaller writes as a model (`marshal.kind_of`: estimators, boosters, torch modules),
# when made by a class of these; their functions, and pandas' and numpy's, make data.
MODEL_LIBRARIES = ("sklearn", "xgboost", "lightgbm", "catboost", "torch")
DATA_LIBRARIES = ("pandas", "numpy", "pyarrow", "polars")


def compile_kfp(
    pipeline: Pipeline,
    config: PipelineSettings,
    *,
    parameters: dict[str, Any] | None = None,
) -> str:
    """The KFP IR YAML running `pipeline`: the PipelineSpec, then kfp-kubernetes' platform spec
    (node selectors, tolerations, timeouts) when a step needs one. `parameters` override the
    notebook's defaults."""
    try:
        from kfp import compiler, dsl
    except ImportError:
        raise ConfigError(
            "compiling for Kubeflow Pipelines needs KFP's SDK: pip install 'cube-jupyter[kfp]'",
            field="target",
        ) from None
    if not pipeline.steps:
        raise PipelineError(f"{pipeline.path}: the notebook has no steps to run", field="steps")
    typed = _parameter_defaults(pipeline, parameters or {})
    types = {name: kind for name, (kind, _value) in typed.items()}
    components = {step.name: _component(dsl, pipeline, step, config, types) for step in pipeline.steps}
    needs_runtime = {step.name for step in pipeline.steps if _needs_runtime(step, config)}

    def body(*values: Any) -> None:
        given = dict(zip(types, values, strict=True))
        tasks: dict[str, Any] = {}
        runtime: dict[str, Any] = {}
        if needs_runtime:  # one import of the wheelhouse, for every step that installs it
            wheels = dsl.importer(
                artifact_uri=config.pipelines.kfp_runtime_wheels, artifact_class=dsl.Artifact, reimport=False
            )
            runtime[RUNTIME_INPUT] = wheels.set_display_name("cube-runtime-wheels").output
        for step in pipeline.steps:
            upstream = set(step.after) | {e.upstream for e in pipeline.edges if e.downstream == step.name}
            missing = sorted(upstream - set(tasks))
            if missing:
                raise PipelineError(
                    f"step {step.name!r} runs after {missing[0]!r}, which is not an earlier step",
                    field=f"steps.{step.name}.after",
                )
            arguments = {name: given[name] for name in types}
            for name in step.inputs:
                producer = tasks[_producer(pipeline, step, name).name]
                arguments[input_name(name)] = producer.outputs[output_name(name)]
            if step.name in needs_runtime:
                arguments |= runtime
            task = components[step.name](**arguments)
            task.after(*(tasks[name] for name in sorted(upstream)))
            _configure(task, step, config)
            tasks[step.name] = task

    body.__name__ = pipeline.name.replace("-", "_")
    body.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter(
                name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=kind, default=typed[name][1]
            )
            for name, kind in types.items()
        ]
    )
    compiled = dsl.pipeline(name=pipeline.name, description=f"cube-jupyter pipeline of {pipeline.path}")(body)
    with tempfile.TemporaryDirectory(prefix="cube-kfp-") as folder:
        target = Path(folder) / "pipeline.yaml"
        compiler.Compiler().compile(compiled, str(target))
        return target.read_text()


def code_hash(pipeline: Pipeline, step: Step) -> str:
    """What a step runs, hashed: its cells, the imports, functions and parameters cell, its inputs
    and outputs and the kernel. Part of its command line, so KFP's cache key changes with it."""
    material = {
        "kernel": pipeline.kernel_name,
        "source": list(step.source),
        "inputs": list(step.inputs),
        "outputs": list(step.outputs),
        "imports": list(pipeline.imports),
        "functions": list(pipeline.functions),
        "parameters_source": pipeline.parameters_source,
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def step_document(pipeline: Pipeline, step: Step) -> str:
    """The part of the pipeline one step's runner needs, as JSON: that step and the edges into it."""
    own = dataclasses.replace(
        pipeline,
        steps=(step,),
        edges=tuple(e for e in pipeline.edges if e.downstream == step.name),
        warnings=(),
    )
    return json.dumps(own.to_dict(), sort_keys=True, separators=(",", ":"))


def artifact_type(pipeline: Pipeline, step: Step, variable: str) -> str:
    """The KFP artifact type of `variable` as `step` last assigns it: `Model` for an instance of a
    class from an ML library (or what `.fit` returns), `Dataset` for what pandas, numpy or an ML
    library's functions return (`train_test_split`), `Artifact` otherwise. A guess from the code,
    after `marshal.kind_of`: the value's type is only known when the step runs."""
    names = _imported_names((*pipeline.imports, *step.source))
    kind = "Artifact"
    for tree in _parsed(step.source):
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if variable in {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}:
                    kind = _value_kind(node.value, names)
    return kind


def _value_kind(value: ast.expr, names: dict[str, str]) -> str:
    if not isinstance(value, ast.Call):
        return "Artifact"
    if isinstance(value.func, ast.Attribute) and value.func.attr == "fit":
        return "Model"  # estimator.fit(...) returns the estimator
    while isinstance(value.func, ast.Attribute) and isinstance(value.func.value, ast.Call):
        value = value.func.value  # pd.read_csv(...).dropna() is a frame as pd.read_csv(...) is
    chain = _dotted(value.func)
    if not chain:
        return "Artifact"
    module = names.get(chain[0], chain[0]).split(".")[0]
    if module in MODEL_LIBRARIES and chain[-1][:1].isupper():
        return "Model"
    if module in DATA_LIBRARIES or module in MODEL_LIBRARIES:
        return "Dataset"
    return "Artifact"


def _imported_names(sources: tuple[str, ...]) -> dict[str, str]:
    """{name bound by an import: the module it comes from} over `sources`."""
    names: dict[str, str] = {}
    for tree in _parsed(sources):
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names |= {(a.asname or a.name).split(".")[0]: a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                names |= {a.asname or a.name: node.module for a in node.names}
    return names


def _parsed(sources: tuple[str, ...]) -> list[ast.Module]:
    trees = []
    for source in sources:
        try:
            trees.append(ast.parse(source))
        except SyntaxError:  # a cell of magics: the graph warned about it already
            continue
    return trees


def _dotted(node: ast.expr) -> list[str]:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return parts[::-1]


def _parameter_defaults(pipeline: Pipeline, overrides: dict[str, Any]) -> dict[str, tuple[type, Any]]:
    """Each parameter with a literal value, its type the notebook's default's, its value the override
    (of that type) or the default; an expression default (`lr = 1 / 3`) is left to the step's
    parameters cell unless overridden."""
    known = {p.name for p in pipeline.parameters}
    unknown = sorted(set(overrides) - known)
    if unknown:
        offered = ", ".join(sorted(known)) or "none"
        raise InvalidInput(
            f"parameter {unknown[0]!r} is not in the notebook's parameters cell (parameters: {offered})",
            field=f"parameters.{unknown[0]}",
        )
    typed = {}
    for parameter in pipeline.parameters:
        if parameter.default is not None:
            kind = _parameter_type(parameter.name, parameter.default)
            value = overrides.get(parameter.name, parameter.default)
        elif parameter.name in overrides:
            value = overrides[parameter.name]
            kind = _parameter_type(parameter.name, value)
        else:
            continue
        if kind is float and type(value) is int:
            value = float(value)
        if type(value) is not kind:
            hint = f" (as text, it is the JSON string {json.dumps(str(value))})" if kind is str else ""
            raise InvalidInput(
                f"parameter {parameter.name!r} is a {kind.__name__} in the notebook, got "
                f"{type(value).__name__} {value!r}{hint}",
                field=f"parameters.{parameter.name}",
            )
        typed[parameter.name] = (kind, value)
    return typed


def _parameter_type(name: str, value: Any) -> type:
    kind = PARAMETER_TYPES.get(type(value))
    if kind is None:
        raise InvalidInput(
            f"parameter {name!r} must be a number, string, bool, list or dict for Kubeflow Pipelines, "
            f"got {type(value).__name__}",
            field=f"parameters.{name}",
        )
    return kind


def _component(
    dsl: Any, pipeline: Pipeline, step: Step, config: PipelineSettings, types: dict[str, type]
) -> Any:
    """The step as a `dsl.container_component`: its signature is the pipeline's parameters, its input
    artifacts and its outputs; its body the runner's command line with KFP's placeholders."""
    pipelines = config.pipelines
    image = _image(step, config)
    runtime = pipelines.injects_runtime(image)
    if runtime and not pipelines.kfp_runtime_wheels:
        raise PipelineError(
            f"step {step.name!r}: image {image!r} has no cube-jupyter, and Kubeflow Pipelines can add it "
            "only from the runtime's wheelhouse in the object store, which "
            "CubePipelines.kfp_runtime_wheels does not name (`python -m cube_jupyter.wheelhouse upload` "
            "puts it there); or build the image FROM the runtime image and list it in "
            "CubePipelines.images_with_runtime, or run on Argo",
            field=f"steps.{step.name}.image",
        )
    inputs = {
        input_name(name): getattr(dsl, artifact_type(pipeline, _producer(pipeline, step, name), name))
        for name in step.inputs
    }
    if runtime:
        inputs[RUNTIME_INPUT] = dsl.Artifact
    outputs = {output_name(name): getattr(dsl, artifact_type(pipeline, step, name)) for name in step.outputs}
    outputs[NOTEBOOK_OUTPUT] = dsl.Artifact
    if step_metrics(pipeline, step):
        outputs[METRICS_OUTPUT] = dsl.Metrics
    for name in types:
        if name in inputs or name in outputs:
            raise PipelineError(
                f"parameter {name!r} is named like one of step {step.name!r}'s KFP inputs or outputs "
                f"(in_*, out_*, step_notebook, step_metrics, {RUNTIME_INPUT}); rename it",
                field=f"parameters.{name}",
            )
    signature = [
        *((name, kind) for name, kind in types.items()),
        *((name, dsl.Input[kind]) for name, kind in inputs.items()),
        *((name, dsl.Output[kind]) for name, kind in outputs.items()),
    ]

    def body(*placeholders: Any) -> Any:
        given = dict(zip([name for name, _ in signature], placeholders, strict=True))
        args = [
            "--pipeline-json",
            step_document(pipeline, step),
            "--step",
            step.name,
            "--run-id",
            dsl.PIPELINE_JOB_ID_PLACEHOLDER,
            "--code-hash",
            code_hash(pipeline, step),
            "--executor-output",
            dsl.PIPELINE_TASK_EXECUTOR_OUTPUT_PATH_PLACEHOLDER,
        ]
        for name, kind in types.items():
            args += ["--text-parameter" if kind is str else "-p", name, given[name]]
        for name in step.inputs:
            args += ["--input-file", name, given[input_name(name)].path]
        for name in (*step.outputs, *(n for n in RESERVED if n in outputs)):
            placeholder = given[output_name(name)]
            args += ["--output-file", name, placeholder.path, placeholder.uri]
        command = list(pipelines.runner_command)
        if runtime:
            command = bootstrap_command(given[RUNTIME_INPUT].path, command)
        return dsl.ContainerSpec(image=image, command=command, args=args)

    body.__name__ = f"step_{step.name.replace('-', '_')}"
    body.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=kind)
            for name, kind in signature
        ]
    )
    return dsl.container_component(body)


def _image(step: Step, config: PipelineSettings) -> str:
    try:
        return fields.image_reference(step.options.image or config.default_image, f"steps.{step.name}.image")
    except InvalidInput as exc:
        raise PipelineError(f"step {step.name!r}: {exc.message}", field=exc.field) from None


def _needs_runtime(step: Step, config: PipelineSettings) -> bool:
    """Whether the step's image lacks cube-jupyter, so it installs the runtime first (kfp_runtime)."""
    return config.pipelines.injects_runtime(_image(step, config))


def _producer(pipeline: Pipeline, step: Step, variable: str) -> Step:
    for edge in pipeline.edges:
        if edge.downstream == step.name and variable in edge.variables:
            producer = pipeline.step(edge.upstream)
            if variable in producer.outputs:
                return producer
    raise PipelineError(
        f"step {step.name!r} needs {variable!r}, but no upstream edge carries it",
        field=f"steps.{step.name}.inputs",
    )


def _configure(task: Any, step: Step, config: PipelineSettings) -> None:
    """Resources, placement, retries, timeout and caching on a step's task."""
    from kfp import kubernetes

    options, pipelines, field = step.options, config.pipelines, f"steps.{step.name}"
    try:
        cpu = fields.quantity(options.cpu or pipelines.default_cpu, f"{field}.cpu")
        memory = fields.quantity(options.memory or pipelines.default_memory, f"{field}.memory")
    except InvalidInput as exc:
        raise PipelineError(f"step {step.name!r}: {exc.message}", field=exc.field) from None
    resources = pods.container_resources(cpu, memory, options.gpu, pipelines.gpu_resource)
    setters: dict[str, dict[str, Callable[[str], Any]]] = {
        "requests": {"cpu": task.set_cpu_request, "memory": task.set_memory_request},
        "limits": {"cpu": task.set_cpu_limit, "memory": task.set_memory_limit},
    }
    for kind, amounts in resources.items():
        for name, value in amounts.items():
            if name in setters[kind]:
                setters[kind][name](str(value))
    if options.gpu:
        task.set_accelerator_type(pipelines.gpu_resource)
        task.set_accelerator_limit(options.gpu)
    placement = pods.gpu_placement(options.gpu, pipelines)
    for key, value in placement.get("nodeSelector", {}).items():
        kubernetes.add_node_selector(task, key, value)
    for toleration in placement.get("tolerations", []):
        kubernetes.add_toleration(
            task,
            key=toleration.get("key"),
            operator=toleration.get("operator"),
            value=toleration.get("value"),
            effect=toleration.get("effect"),
            toleration_seconds=toleration.get("tolerationSeconds"),
        )
    if options.retries > 0:
        task.set_retry(
            options.retries, backoff_duration=f"{pipelines.retry_backoff_seconds}s", backoff_factor=2
        )
    if options.timeout is not None:
        if options.timeout <= 0:
            raise PipelineError(
                f"step {step.name!r}: timeout must be > 0 seconds, got {options.timeout}",
                field=f"{field}.timeout",
            )
        kubernetes.set_timeout(task, max(1, int(-(-options.timeout // 1))))
    for key, value in config.step_queue_labels(step.name, options).items():
        kubernetes.add_pod_label(task, key, value)
    task.set_caching_options(enable_caching=options.cache)
    task.set_env_variable("PYTHONUNBUFFERED", "1")
