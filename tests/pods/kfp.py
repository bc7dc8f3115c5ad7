"""KFP v2's part of running a compiled pipeline (its IR, PipelineSpec YAML), for the pod harness: the
driver's (task order, inputs resolved, outputs provisioned) and the launcher's (executor input,
placeholders, artifacts downloaded before and uploaded after the user's command, the executor output
read back), each task's container run as a pod of tests/pods/harness.py.

What is KFP's, from its backend (backend/src/v2/driver, backend/src/v2/component/launcher_v2.go):

- order: a task of `root.dag.tasks` runs once every task it depends on succeeded: its
  `dependentTasks` and the producers of its `taskOutputParameter`/`taskOutputArtifact` inputs; tasks
  ready together run at once. A task whose dependency did not succeed is not run (state NOT_RUN);
  independent tasks go on (`fail_fast=True`: nothing new starts after a failure, Argo's DAG default);
- the run's pipeline root is `<pipeline root>/<pipeline name>/<run id>` (the root given, else the IR's
  `defaultPipelineRoot`, else KFP's default `minio://mlpipeline/v2/artifacts`); an output artifact's URI
  is `<run's root>/<task name>/<salt>/<output name>`, the salt a fresh UUID per task (the driver's
  `provisionOutputs`); output parameter files are `/tmp/kfp/outputs/<name>` and the executor output file
  `/tmp/kfp_outputs/output_metadata.json`;
- input parameters: the run's parameters typed as `root.inputDefinitions` says (a missing required
  one, or one of the wrong type, fails the run before any task), a producer's output parameter, or a
  `runtimeValue` constant (`{{$.pipeline_job_name}}`, `_resource_name`, `_uuid`, `{{$.pipeline_task_name}}`,
  `_uuid` resolved as the driver does); the component's defaults added by the launcher;
  input artifacts: a producer's output artifact as recorded (name: its id; type; uri; metadata);
- placeholders (the launcher's): `{{$}}`, `{{$.inputs.parameters['x']}}` (numbers as Go's
  FormatFloat(v, 'f', -1), lists and dicts as JSON), `{{$.inputs.artifacts['x'].uri|path|metadata}}`,
  `{{$.outputs.artifacts['x'].uri|path}}`, `{{$.outputs.parameters['x'].output_file}}`,
  `{{$.outputs.output_file}}`; and the run's `{{$.pipeline_job_name}}` ... `{{$.pipeline_root}}`. The
  structured `{"Concat": [...]}` (one argument) and `{"IfPresent": {"InputName", "Then", "Else"}}`
  (spliced arguments) as the SDK defines them. A `{{$...}}` left unresolved fails the task (stricter
  than the launcher_v2.go read, which replaces the placeholders it knows and leaves others as text: a
  compiler's typo should fail here, not run with a literal `{{$...}}`); the run-level placeholders in
  command/args and the structured ones are resolved as Vertex AI and the SDK's docs define them (the
  KFP backend sources read resolve run-level ones only as `runtimeValue` constants);
- local paths (LocalPathForURI): gs://b/k → /gcs/b/k, minio://b/k → /minio/b/k, s3://b/k → /s3/b/k;
  input artifacts are downloaded there (a single object, or every object under `k/`), and after the
  command exits 0 the executor output file is read (its parameterValues first, then each output
  parameter's file read as its type says; a missing one fails the task), each output artifact merged
  with what the component wrote for it (uri, metadata) and its local path uploaded (a file, or a
  directory's files under the key; nothing there is no error);
- a failed attempt (the launcher failing, or the command exiting non-zero) is retried in a new pod
  up to the task's `retryPolicy.maxRetryCount` (no backoff waited here);
- an importer task (`dsl.importer`, an `importer` executor; its launcher's importer mode) runs no
  user container: it records an artifact of its type at its URI (`artifactUri`: a constant, or the
  task's input parameter `runtimeParameter` names), with its `metadata`, as its output `artifact`.
  Without `reimport` the artifact already recorded for that URI and type is reused (the same id),
  as KFP finds it in MLMD; its consumers download it like any input (a directory: every object
  under it).

Where KFP's containers are concerned, the harness's one path rule applies: /s3, /minio, /gcs (KFP's
scratch emptyDirs) and the container's /tmp/kfp_outputs, /tmp/kfp/outputs are directories of the pod,
replaced in what the launcher substitutes (paths, and the paths inside `{{$}}`). The KFP SDK derives
an artifact's path from its URI inside the process, so an image running SDK components
(`kfp_sdk_image`) carries a start-up hook that points the SDK's mount prefixes at the pod's directories
(env CUBE_HARNESS_KFP_MOUNTS, set only by this harness).

The object store: every bucket of every scheme is one S3 endpoint (the loopback S3 server), reached
with the `minio` client the test gives. The env of a container: the IR container's `env`, KFP_POD_NAME
and KFP_POD_UID, and from a kfp-kubernetes platform document (a second YAML document, `platforms:`)
`secretAsEnv` (from the cluster's Secrets), `pvcMount` (the cluster's claims) and `podMetadata`.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import re
import uuid
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml
from minio import Minio

from tests.pods.harness import Cluster, Pod, PodRun
from tests.pods.images import ImageVenv, cached_venv, workbench_image

DEFAULT_PIPELINE_ROOT = "minio://mlpipeline/v2/artifacts"  # KFP's launcher config default
OUTPUT_METADATA_FILE = "/tmp/kfp_outputs/output_metadata.json"
OUTPUT_PARAMETERS_DIR = "/tmp/kfp/outputs"
SCHEMES = {"gs://": "/gcs/", "minio://": "/minio/", "s3://": "/s3/"}
# The pod's directories standing for the container's paths KFP uses.
MOUNTS = {"/gcs": "gcs", "/minio": "minio", "/s3": "s3", "/tmp/kfp_outputs": "tmp-kfp_outputs"}
MOUNTS[OUTPUT_PARAMETERS_DIR] = "tmp-kfp-outputs"
SDK_PREFIXES = {"_GCS_LOCAL_MOUNT_PREFIX": "/gcs", "_MINIO_LOCAL_MOUNT_PREFIX": "/minio"}
SDK_PREFIXES["_S3_LOCAL_MOUNT_PREFIX"] = "/s3"
MOUNTS_ENV = "CUBE_HARNESS_KFP_MOUNTS"
PLACEHOLDER = re.compile(r"\{\{\$(?:\.[^{}]*)?\}\}")
INPUT_PARAMETER = re.compile(r"^\{\{\$\.inputs\.parameters\['([^']+)'\]\}\}$")
ARTIFACT_FIELD = re.compile(r"^\{\{\$\.(inputs|outputs)\.artifacts\['([^']+)'\]\.(uri|path|metadata)\}\}$")
OUTPUT_PARAMETER_FILE = re.compile(r"^\{\{\$\.outputs\.parameters\['([^']+)'\]\.output_file\}\}$")
STRUCTURED = re.compile(r'^\s*\{\s*"(Concat|IfPresent)"\s*:')

# A Python start-up hook of the image running KFP SDK components: the SDK's mount prefixes (where
# it puts an artifact's URI on the container's filesystem) become the pod's directories.
MOUNTS_HOOK = f"""import json as _json, os as _os
_mounts = _os.environ.get({MOUNTS_ENV!r})
if _mounts:
    from kfp.dsl.types import artifact_types as _types
    for _name, _local in _json.loads(_mounts).items():
        setattr(_types, _name, _local)
"""


class LauncherError(Exception):
    """What fails a task in KFP's launcher (or driver) before or after its command."""


@dataclass
class TaskRun:
    """A task as it ran: its attempts (one pod each), what the driver gave it, what it produced."""

    name: str
    state: str = "NOT_RUN"  # SUCCEEDED | FAILED | NOT_RUN
    attempts: list[PodRun] = field(default_factory=list)
    executor_input: dict[str, Any] = field(default_factory=dict)
    parameters: dict[str, Any] = field(default_factory=dict)  # output parameters, by name
    artifacts: dict[str, dict[str, Any]] = field(default_factory=dict)  # output name → RuntimeArtifact
    errors: list[str] = field(default_factory=list)  # the launcher's error of each failed attempt
    task_uuid: str = field(default_factory=lambda: str(uuid.uuid4()))  # {{$.pipeline_task_uuid}}

    def describe(self) -> str:
        pods = "\n".join(run.describe() for run in self.attempts)
        return f"=== task {self.name}: {self.state} {self.errors}\n{pods}"


@dataclass
class KfpRun:
    run_id: str
    pipeline_name: str
    pipeline_root: str  # the run's: <pipeline root>/<pipeline name>/<run id>
    tasks: dict[str, TaskRun]

    @property
    def succeeded(self) -> bool:
        return all(task.state == "SUCCEEDED" for task in self.tasks.values())

    def describe(self) -> str:
        return "\n".join(task.describe() for task in self.tasks.values())


def kfp_sdk_image() -> ImageVenv:
    """An image for KFP's lightweight Python components built with `install_kfp_package=False`: this
    checkout's venv (it has kfp, the version the IR was compiled with) as a layer, and the mounts hook."""
    sites = [str(p) for p in workbench_image().prefix.glob("lib/python*/site-packages")]

    def install(prefix: Path) -> None:
        [own] = prefix.glob("lib/python*/site-packages")
        (own / "layers.pth").write_text("\n".join(sites) + "\n")
        (own / "_cube_harness_kfp_mounts.py").write_text(MOUNTS_HOOK)
        # .pth files run in name order: after layers.pth has put kfp on the path.
        (own / "zz_cube_harness_kfp_mounts.pth").write_text("import _cube_harness_kfp_mounts\n")

    return cached_venv("kfp-sdk", [*sites, MOUNTS_HOOK], install)


# -- values --------------------------------------------------------------------------------------


def _protojson(value: Any) -> Any:
    """A structpb value as protojson writes it: numbers are doubles, integral ones without '.0'."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        number = float(value)
        return int(number) if number.is_integer() and abs(number) < 2**53 else number
    if isinstance(value, list):
        return [_protojson(v) for v in value]
    if isinstance(value, dict):
        return {k: _protojson(v) for k, v in value.items()}
    raise LauncherError(f"not a protobuf Value: {value!r}")


def typed(name: str, value: Any, parameter_type: str) -> Any:
    """`value` as a parameter of `parameter_type`, or an error as KFP refuses a run's parameter."""
    ok = {
        "STRING": isinstance(value, str),
        "BOOLEAN": isinstance(value, bool),
        "NUMBER_INTEGER": isinstance(value, int | float)
        and not isinstance(value, bool)
        and float(value).is_integer(),
        "NUMBER_DOUBLE": isinstance(value, int | float) and not isinstance(value, bool),
        "LIST": isinstance(value, list),
        "STRUCT": isinstance(value, dict),
    }
    if parameter_type not in ok:
        raise LauncherError(f"parameter {name!r}: unknown parameterType {parameter_type!r}")
    if not ok[parameter_type]:
        raise LauncherError(f"parameter {name!r} requires type {parameter_type} but got {value!r}")
    return _protojson(value)


def format_float(value: float) -> str:
    """Go's strconv.FormatFloat(v, 'f', -1, 64): the shortest digits, never an exponent."""
    if math.isnan(value) or math.isinf(value):
        return {"nan": "NaN", "inf": "+Inf", "-inf": "-Inf"}[repr(value)]
    if value.is_integer():
        return str(int(value))
    return format(Decimal(repr(value)), "f")


def placeholder_text(value: Any) -> str:
    """An input parameter as the launcher puts it in a placeholder."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return format_float(float(value))
    return json.dumps(value, separators=(",", ":"))


def text_to_value(text: str, parameter_type: str) -> Any:
    """An output parameter's file read as its type (metadata.TextToPbValue)."""
    try:
        if parameter_type == "STRING":
            return text
        if parameter_type == "NUMBER_INTEGER":
            return int(text.strip())
        if parameter_type == "NUMBER_DOUBLE":
            return _protojson(float(text.strip()))
        if parameter_type == "BOOLEAN":
            lowered = text.strip()
            if lowered in ("1", "t", "T", "true", "TRUE", "True"):
                return True
            if lowered in ("0", "f", "F", "false", "FALSE", "False"):
                return False
            raise ValueError(f"invalid syntax {text!r}")
        if parameter_type in ("LIST", "STRUCT"):
            value = json.loads(text)
            if not isinstance(value, list if parameter_type == "LIST" else dict):
                raise ValueError(f"not a {parameter_type}: {text!r}")
            return _protojson(value)
    except ValueError as exc:
        raise LauncherError(f"cannot read {text!r} as {parameter_type}: {exc}") from exc
    raise LauncherError(f"unknown parameterType {parameter_type!r}")


# -- the object store ----------------------------------------------------------------------------


def local_path_for_uri(uri: str) -> str:
    """The launcher's LocalPathForURI: where an artifact lies in the container."""
    for scheme, mount in SCHEMES.items():
        if uri.startswith(scheme):
            return mount + uri.removeprefix(scheme)
    raise LauncherError(f"failed to generate local path for URI {uri}: unsupported storage scheme")


def bucket_and_key(uri: str) -> tuple[str, str]:
    for scheme in SCHEMES:
        if uri.startswith(scheme):
            bucket, _, key = uri.removeprefix(scheme).partition("/")
            return bucket, key.strip("/")
    raise LauncherError(f"URI {uri!r} is in no object store")


def download(client: Minio, uri: str, local: Path) -> None:
    """objectstore.DownloadBlob: the object at the key to `local`, or every object under `key/` into
    the directory `local`."""
    bucket, key = bucket_and_key(uri)
    found = False
    for obj in client.list_objects(bucket, prefix=key, recursive=True):
        name = obj.object_name or ""
        if name == key:
            target = local
        elif name.startswith(key + "/"):
            target = local / name.removeprefix(key + "/")
        else:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        client.fget_object(bucket, name, str(target))
        found = True
    if not found:
        raise LauncherError(f"failed to download input artifact from remote storage URI {uri!r}")


def upload(client: Minio, local: Path, uri: str) -> None:
    """objectstore.UploadBlob: a file to the key, a directory's files under it; nothing: nothing."""
    bucket, key = bucket_and_key(uri)
    if local.is_file():
        client.fput_object(bucket, key, str(local))
    elif local.is_dir():
        for path in sorted(p for p in local.rglob("*") if p.is_file()):
            client.fput_object(bucket, f"{key}/{path.relative_to(local).as_posix()}", str(path))


# -- the driver ----------------------------------------------------------------------------------


@dataclass
class _Run:
    cluster: Cluster
    client: Minio
    spec: dict[str, Any]
    platform: dict[str, Any]
    run_id: str
    run_name: str
    pipeline_root: str
    parameters: dict[str, Any]
    tasks: dict[str, TaskRun]
    # MLMD's artifact ids; next() on a count is atomic, and ready tasks run in threads at once
    artifact_ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    imported: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # (uri, type) → artifact

    def component(self, task: dict[str, Any]) -> dict[str, Any]:
        return self.spec["components"][task["componentRef"]["name"]]

    def executor(self, task: dict[str, Any]) -> dict[str, Any]:
        return self.spec["deploymentSpec"]["executors"][self.component(task)["executorLabel"]]

    def import_artifact(self, executor_input: dict[str, Any], importer: dict[str, Any]) -> dict[str, Any]:
        """The importer launcher: the artifact at its URI as MLMD records it, the one already recorded
        for that URI and type unless it reimports."""
        source = importer["artifactUri"]
        if "constant" in source:
            uri = source["constant"]
        else:
            uri = executor_input.get("inputs", {}).get("parameterValues", {}).get(source["runtimeParameter"])
        if not isinstance(uri, str) or not uri:
            raise LauncherError(f"no artifact URI in {source}")
        artifact = {"type": importer["typeSchema"], "uri": uri, "metadata": importer.get("metadata", {})}
        key = (uri, json.dumps(importer["typeSchema"], sort_keys=True))
        if importer.get("reimport") or key not in self.imported:
            self.imported[key] = self.record_artifact("artifact", artifact)
        return copy.deepcopy(self.imported[key])

    def resolve_parameter(self, task_name: str, name: str, spec: dict[str, Any]) -> Any:
        if "componentInputParameter" in spec:
            key = spec["componentInputParameter"]
            if key not in self.parameters:
                raise LauncherError(f"task {task_name}: no pipeline parameter {key!r}")
            return self.parameters[key]
        if "taskOutputParameter" in spec:
            source = spec["taskOutputParameter"]
            produced = self.tasks[source["producerTask"]].parameters
            if source["outputParameterKey"] not in produced:
                raise LauncherError(
                    f"task {task_name}: producer {source['producerTask']} has no output parameter "
                    f"{source['outputParameterKey']!r}"
                )
            return produced[source["outputParameterKey"]]
        if "runtimeValue" in spec:
            constant = spec["runtimeValue"]["constant"]
            run_values = {
                "{{$.pipeline_job_name}}": self.run_name,
                "{{$.pipeline_job_resource_name}}": self.run_name,
                "{{$.pipeline_job_uuid}}": self.run_id,
                "{{$.pipeline_task_name}}": task_name,
                "{{$.pipeline_task_uuid}}": self.tasks[task_name].task_uuid,
            }
            return run_values.get(constant, constant) if isinstance(constant, str) else constant
        raise LauncherError(f"task {task_name}: the harness cannot resolve input {name!r}: {spec}")

    def resolve_artifact(self, task_name: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        if "taskOutputArtifact" not in spec:
            raise LauncherError(f"task {task_name}: the harness cannot resolve artifact {name!r}: {spec}")
        source = spec["taskOutputArtifact"]
        produced = self.tasks[source["producerTask"]].artifacts
        if source["outputArtifactKey"] not in produced:
            raise LauncherError(
                f"task {task_name}: cannot find output artifact key {source['outputArtifactKey']!r} "
                f"in producer task {source['producerTask']!r}"
            )
        return copy.deepcopy(produced[source["outputArtifactKey"]])

    def executor_input(self, task_name: str, task: dict[str, Any]) -> dict[str, Any]:
        """What the driver hands the launcher: inputs resolved, outputs provisioned."""
        component = self.component(task)
        parameters = {
            name: self.resolve_parameter(task_name, name, spec)
            for name, spec in task.get("inputs", {}).get("parameters", {}).items()
        }
        artifacts = {
            name: {"artifacts": [self.resolve_artifact(task_name, name, spec)]}
            for name, spec in task.get("inputs", {}).get("artifacts", {}).items()
        }
        salt = str(uuid.uuid4())
        outputs_spec = component.get("outputDefinitions", {})
        outputs: dict[str, Any] = {}
        if outputs_spec.get("parameters"):
            outputs["parameters"] = {
                name: {"outputFile": f"{OUTPUT_PARAMETERS_DIR}/{name}"} for name in outputs_spec["parameters"]
            }
        if outputs_spec.get("artifacts"):
            outputs["artifacts"] = {}
            for name, spec in outputs_spec["artifacts"].items():
                artifact: dict[str, Any] = {
                    "type": spec["artifactType"],
                    "uri": f"{self.pipeline_root.rstrip('/')}/{task_name}/{salt}/{name}",
                }
                if spec.get("metadata"):
                    artifact["metadata"] = spec["metadata"]
                outputs["artifacts"][name] = {"artifacts": [artifact]}
        outputs["outputFile"] = OUTPUT_METADATA_FILE
        inputs: dict[str, Any] = {}
        if parameters:
            inputs["parameterValues"] = parameters
        if artifacts:
            inputs["artifacts"] = artifacts
        return {"inputs": inputs, "outputs": outputs} if inputs else {"outputs": outputs}

    def record_artifact(self, name: str, artifact: dict[str, Any]) -> dict[str, Any]:
        """The output artifact as MLMD keeps it and hands a consumer (ToRuntimeArtifact)."""
        artifact_id = next(self.artifact_ids)
        metadata = {"display_name": name, **artifact.get("metadata", {})}
        return {
            "name": str(artifact_id),
            "type": artifact["type"],
            "uri": artifact["uri"],
            "metadata": metadata,
        }


def dependencies(task: dict[str, Any]) -> set[str]:
    found = set(task.get("dependentTasks", []))
    for kind, key in (("parameters", "taskOutputParameter"), ("artifacts", "taskOutputArtifact")):
        for spec in task.get("inputs", {}).get(kind, {}).values():
            if key in spec:
                found.add(spec[key]["producerTask"])
    return found


def _check_supported(name: str, task: dict[str, Any], component: dict[str, Any]) -> None:
    unsupported = sorted(set(task) & {"triggerPolicy", "iteratorPolicy", "parameterIterator"})
    unsupported += ["a sub-DAG"] if "dag" in component else []
    if unsupported:
        raise AssertionError(f"task {name}: the harness does not run {unsupported}")


# -- the launcher --------------------------------------------------------------------------------


class _Launcher:
    """One attempt of one task: its pod, its placeholders, its artifacts in and out."""

    def __init__(self, run: _Run, task_name: str, task: dict[str, Any], attempt: int) -> None:
        self.run = run
        self.task_name = task_name
        self.component = run.component(task)
        self.executor_input: dict[str, Any] = run.tasks[task_name].executor_input
        executor = run.executor(task)
        if "container" not in executor:
            raise AssertionError(f"task {task_name}: the harness runs container executors, not {executor}")
        self.container: dict[str, Any] = executor["container"]
        self.platform = (
            run.platform.get("deploymentSpec", {})
            .get("executors", {})
            .get(self.component["executorLabel"], {})
        )
        pod_name = re.sub(r"[^a-z0-9-]", "-", f"{run.run_name}-{task_name}-{attempt}".lower())
        volumes, mounts = self._platform_volumes()
        metadata = self.platform.get("podMetadata", {})
        self.pod = Pod(
            run.cluster,
            {
                "metadata": {
                    "name": pod_name,
                    "labels": {**metadata.get("labels", {}), "pipeline/runid": run.run_id},
                    "annotations": metadata.get("annotations", {}),
                },
                "spec": {"containers": [], "volumes": volumes},
            },
        )
        self.mounts = {path: self.pod.root / "kfp" / directory for path, directory in MOUNTS.items()}
        self.volume_mounts = mounts
        self.pod_run = PodRun(pod_name)  # the attempt's pod, once it ran

    def _platform_volumes(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        known = {"secretAsEnv", "pvcMount", "podMetadata", "imagePullPolicy"}
        unknown = sorted(set(self.platform) - known)
        if unknown:
            raise AssertionError(f"task {self.task_name}: the harness has no kfp-kubernetes {unknown}")
        volumes, mounts = [], []
        for index, mount in enumerate(self.platform.get("pvcMount", [])):
            claim = mount.get("constant") or mount["pvcNameParameter"]["runtimeValue"]["constant"]
            volumes.append({"name": f"pvc-{index}", "persistentVolumeClaim": {"claimName": claim}})
            mounts.append({"name": f"pvc-{index}", "mountPath": mount["mountPath"]})
        return volumes, mounts

    def local(self, path: str) -> str:
        """The one path rule: a KFP path of the container as the pod's directory."""
        for mount in sorted(self.mounts, key=len, reverse=True):
            if path == mount or path.startswith(mount + "/"):
                return str(self.mounts[mount]) + path.removeprefix(mount)
        return path

    # -- placeholders --

    def with_defaults(self) -> dict[str, Any]:
        """addDefaultParams: the component's defaults for inputs the task left out."""
        executor_input = copy.deepcopy(self.executor_input)
        executor_input.setdefault("inputs", {})
        values = executor_input.setdefault("inputs", {}).setdefault("parameterValues", {})
        for name, spec in self.component.get("inputDefinitions", {}).get("parameters", {}).items():
            if name not in values and "defaultValue" in spec:
                values[name] = _protojson(spec["defaultValue"])
        if not values:
            del executor_input["inputs"]["parameterValues"]
        if not executor_input["inputs"]:
            del executor_input["inputs"]
        return executor_input

    def pod_view(self, executor_input: dict[str, Any]) -> dict[str, Any]:
        """The executor input with the container's paths as the pod's (the one path rule)."""
        view = copy.deepcopy(executor_input)
        outputs = view["outputs"]
        outputs["outputFile"] = self.local(outputs["outputFile"])
        for parameter in outputs.get("parameters", {}).values():
            parameter["outputFile"] = self.local(parameter["outputFile"])
        return view

    def substitute(self, text: str, executor_input: dict[str, Any]) -> str:
        inputs = executor_input.get("inputs", {})
        outputs = executor_input["outputs"]

        def value(token: str) -> str:
            if token == "{{$}}":
                return json.dumps(self.pod_view(executor_input), separators=(",", ":"))
            run_values = {
                "{{$.pipeline_job_name}}": self.run.run_name,
                "{{$.pipeline_job_resource_name}}": self.run.run_name,
                "{{$.pipeline_job_uuid}}": self.run.run_id,
                "{{$.pipeline_task_name}}": self.task_name,
                "{{$.pipeline_task_uuid}}": self.run.tasks[self.task_name].task_uuid,
                "{{$.pipeline_root}}": self.run.pipeline_root,
                "{{$.outputs.output_file}}": self.local(outputs["outputFile"]),
            }
            if token in run_values:
                return run_values[token]
            if (match := INPUT_PARAMETER.match(token)) and match[1] in inputs.get("parameterValues", {}):
                return placeholder_text(inputs["parameterValues"][match[1]])
            if (match := OUTPUT_PARAMETER_FILE.match(token)) and match[1] in outputs.get("parameters", {}):
                return self.local(outputs["parameters"][match[1]]["outputFile"])
            if match := ARTIFACT_FIELD.match(token):
                side = inputs if match[1] == "inputs" else outputs
                listed = side.get("artifacts", {}).get(match[2], {}).get("artifacts", [])
                if listed:
                    artifact = listed[0]
                    if match[3] == "uri":
                        return str(artifact["uri"])
                    if match[3] == "path":
                        return self.local(local_path_for_uri(artifact["uri"]))
                    return json.dumps(artifact.get("metadata", {}), separators=(",", ":"))
            raise LauncherError(f"unresolved placeholder {token}")

        return PLACEHOLDER.sub(lambda m: value(m.group(0)), text)

    def structured(self, item: Any, executor_input: dict[str, Any]) -> list[str]:
        """An argument (or a structured placeholder's item) as the arguments it stands for."""
        if isinstance(item, str):
            if STRUCTURED.match(item):
                try:
                    parsed = json.loads(item)
                except json.JSONDecodeError:
                    return [self.substitute(item, executor_input)]
                return self.structured(parsed, executor_input)
            return [self.substitute(item, executor_input)]
        if isinstance(item, list):
            return [arg for part in item for arg in self.structured(part, executor_input)]
        if isinstance(item, dict) and set(item) == {"Concat"}:
            return ["".join(arg for part in item["Concat"] for arg in self.structured(part, executor_input))]
        if isinstance(item, dict) and set(item) == {"IfPresent"}:
            condition = item["IfPresent"]
            name = condition["InputName"]
            inputs = executor_input.get("inputs", {})
            present = name in inputs.get("parameterValues", {}) or name in inputs.get("artifacts", {})
            branch = condition.get("Then", []) if present else condition.get("Else", [])
            return self.structured(branch, executor_input)
        raise LauncherError(f"unknown structured placeholder {item!r}")

    # -- running --

    def _env(self) -> list[dict[str, Any]]:
        env: list[dict[str, Any]] = [
            {"name": "KFP_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "KFP_POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
        ]
        env += [{"name": var["name"], "value": var.get("value", "")} for var in self.container.get("env", [])]
        for secret in self.platform.get("secretAsEnv", []):
            secret_name = (
                secret.get("secretName") or secret["secretNameParameter"]["runtimeValue"]["constant"]
            )
            for pair in secret["keyToEnv"]:
                ref = {"name": secret_name, "key": pair["secretKey"]}
                env.append({"name": pair["envVar"], "valueFrom": {"secretKeyRef": ref}})
        return env

    def launch(self) -> PodRun:
        """Download, substitute, run, collect, upload; a LauncherError fails the attempt."""
        executor_input = self.executor_input
        with_defaults = self.with_defaults()
        for directory in self.mounts.values():
            directory.mkdir(parents=True, exist_ok=True)
        for name, listed in executor_input.get("inputs", {}).get("artifacts", {}).items():
            if listed["artifacts"]:
                uri = listed["artifacts"][0]["uri"]
                try:
                    download(self.run.client, uri, Path(self.local(local_path_for_uri(uri))))
                except LauncherError as exc:
                    raise LauncherError(f"input artifact {name!r}: {exc}") from exc
        argv = self.structured(
            [*self.container.get("command", []), *self.container.get("args", [])], with_defaults
        )
        if not argv:
            raise LauncherError("command and arguments are empty")
        hook = {prefix: self.local(mount) + "/" for prefix, mount in SDK_PREFIXES.items()}
        self.pod.operator_env = {"main": {MOUNTS_ENV: json.dumps(hook)}}
        self.pod.spec["containers"] = [
            {
                "name": "main",
                "image": self.container["image"],
                "command": argv,
                "env": self._env(),
                "volumeMounts": self.volume_mounts,
            }
        ]
        self.pod_run = self.pod.start().wait()
        if self.pod_run.succeeded:
            self.collect(executor_input)
        return self.pod_run

    def collect(self, executor_input: dict[str, Any]) -> None:
        """After the command: the executor output file, output parameters, output artifacts."""
        task = self.run.tasks[self.task_name]
        outputs = executor_input["outputs"]
        output_file = Path(self.local(outputs["outputFile"]))
        executor_output: dict[str, Any] = {}
        if output_file.exists():
            try:
                executor_output = json.loads(output_file.read_text())
            except json.JSONDecodeError as exc:
                raise LauncherError(
                    f"failed to unmarshal ExecutorOutput in file {output_file}: {exc}"
                ) from exc
        parameters = dict(executor_output.get("parameterValues", {}))
        definitions = self.component.get("outputDefinitions", {}).get("parameters", {})
        for name, parameter in outputs.get("parameters", {}).items():
            if name in parameters:
                continue
            path = Path(self.local(parameter["outputFile"]))
            if not path.is_file():
                raise LauncherError(
                    f"failed to read output parameter name={name!r} path={parameter['outputFile']!r}"
                )
            parameters[name] = text_to_value(path.read_text(), definitions[name]["parameterType"])
        artifacts: dict[str, dict[str, Any]] = {}
        written = executor_output.get("artifacts", {})
        for name, listed in outputs.get("artifacts", {}).items():
            artifact = copy.deepcopy(listed["artifacts"][0])
            if written.get(name, {}).get("artifacts"):
                source = written[name]["artifacts"][0]
                if source.get("uri"):
                    artifact["uri"] = source["uri"]
                if source.get("metadata") is not None:
                    artifact["metadata"] = {**artifact.get("metadata", {}), **source["metadata"]}
            upload(self.run.client, Path(self.local(local_path_for_uri(artifact["uri"]))), artifact["uri"])
            artifacts[name] = self.run.record_artifact(name, artifact)
        task.parameters = {k: _protojson(v) for k, v in parameters.items()}
        task.artifacts = artifacts


def _run_task(run: _Run, name: str, task: dict[str, Any]) -> None:
    """The driver, then up to 1 + maxRetryCount launcher attempts, each in a pod of its own."""
    record = run.tasks[name]
    record.state = "RUNNING"
    try:
        record.executor_input = run.executor_input(name, task)
    except LauncherError as exc:
        record.errors.append(f"driver: {exc}")
        record.state = "FAILED"
        return
    importer = run.executor(task).get("importer")
    if importer is not None:  # no pod: the launcher records the artifact
        try:
            record.artifacts = {"artifact": run.import_artifact(record.executor_input, importer)}
            record.state = "SUCCEEDED"
        except LauncherError as exc:
            record.errors.append(f"importer: {exc}")
            record.state = "FAILED"
        return
    attempts = 1 + int(task.get("retryPolicy", {}).get("maxRetryCount", 0))
    for attempt in range(attempts):
        launcher = _Launcher(run, name, task, attempt)
        try:
            pod_run = launcher.launch()
        except LauncherError as exc:
            record.attempts.append(launcher.pod_run)
            record.errors.append(str(exc))
            continue
        record.attempts.append(pod_run)
        if pod_run.succeeded:
            record.state = "SUCCEEDED"
            return
        record.errors.append(f"command exited {[c.returncode for c in pod_run.containers]}")
    record.state = "FAILED"


def split_documents(ir_text: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The PipelineSpec and, when the YAML has a second `platforms:` document, its kubernetes spec."""
    documents = [d for d in yaml.safe_load_all(ir_text) if d]
    spec = documents[0]
    platform: dict[str, Any] = {}
    for document in documents[1:]:
        platform = document.get("platforms", {}).get("kubernetes", platform)
    return spec, platform


def run_parameters(spec: dict[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """The run's parameters as the API server and root driver take them: typed, defaults filled in."""
    definitions = spec["root"].get("inputDefinitions", {}).get("parameters", {})
    unknown = sorted(set(given) - set(definitions))
    if unknown:
        raise LauncherError(f"the pipeline has no parameters {unknown}")
    values = {}
    for name, definition in definitions.items():
        if name in given:
            values[name] = typed(name, given[name], definition["parameterType"])
        elif "defaultValue" in definition:
            values[name] = _protojson(definition["defaultValue"])
        elif not definition.get("isOptional"):
            raise LauncherError(f"the pipeline's required parameter {name!r} is missing")
    return values


def run_kfp(
    cluster: Cluster,
    ir_text: str,
    parameters: Mapping[str, Any] | None = None,
    *,
    client: Minio,
    pipeline_root: str | None = None,
    run_id: str | None = None,
    run_name: str | None = None,
    fail_fast: bool = False,
) -> KfpRun:
    """Run the compiled pipeline `ir_text` as KFP v2 would: every task of its root DAG in dependency
    order, each attempt a pod of `cluster`, artifacts in the object store behind `client`."""
    spec, platform = split_documents(ir_text)
    run_id = run_id or str(uuid.uuid4())
    pipeline_name = spec["pipelineInfo"]["name"]
    root = pipeline_root or spec.get("defaultPipelineRoot") or DEFAULT_PIPELINE_ROOT
    tasks_spec: dict[str, dict[str, Any]] = spec["root"]["dag"]["tasks"]
    for name, task in tasks_spec.items():
        _check_supported(name, task, spec["components"][task["componentRef"]["name"]])
    run = _Run(
        cluster=cluster,
        client=client,
        spec=spec,
        platform=platform,
        run_id=run_id,
        run_name=run_name or f"{pipeline_name}-{run_id[:8]}",
        pipeline_root=f"{root.rstrip('/')}/{pipeline_name}/{run_id}",
        parameters=run_parameters(spec, parameters or {}),
        tasks={name: TaskRun(name) for name in tasks_spec},
    )
    needs = {name: dependencies(task) for name, task in tasks_spec.items()}
    for name, needed in needs.items():
        missing = needed - set(tasks_spec)
        assert not missing, f"task {name} depends on unknown tasks {sorted(missing)}"
    done: set[str] = set()
    with ThreadPoolExecutor(max_workers=max(1, len(tasks_spec))) as pool:
        while len(done) < len(tasks_spec):
            failed = any(run.tasks[n].state == "FAILED" for n in done)
            ready = [
                n
                for n in tasks_spec
                if n not in done and all(run.tasks[d].state == "SUCCEEDED" for d in needs[n])
            ]
            blocked = [
                n
                for n in tasks_spec
                if n not in done and any(d in done and run.tasks[d].state != "SUCCEEDED" for d in needs[n])
            ]
            done.update(blocked)  # NOT_RUN: a dependency did not succeed
            if fail_fast and failed:
                ready = []
            if not ready:
                if blocked:
                    continue
                assert fail_fast and failed, f"the DAG cannot go on after {sorted(done)}"
                done.update(tasks_spec)  # fail-fast: nothing new starts after a failure
                break
            list(pool.map(lambda n: _run_task(run, n, tasks_spec[n]), ready))
            done.update(ready)
    return KfpRun(run_id, pipeline_name, run.pipeline_root, run.tasks)


def uri_object(client: Minio, uri: str) -> bytes:
    """The object at an artifact's URI (a file artifact)."""
    bucket, key = bucket_and_key(uri)
    response = client.get_object(bucket, key)
    try:
        return response.read()
    finally:
        response.close()
        response.release_conn()
