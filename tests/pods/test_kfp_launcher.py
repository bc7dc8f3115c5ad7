"""The KFP v2 emulation (tests/pods/kfp.py) checked against KFP itself: a pipeline of KFP SDK
lightweight components, compiled by KFP's own compiler, run task by task as KFP's driver and launcher
would; what comes out (output parameters, artifacts in the store at their URIs, metrics metadata) is
what the Python functions compute, through KFP's own executor (kfp.dsl.executor_main) in each pod.

The components are built with `install_kfp_package=False` (the default pip-installs kfp at run time,
and nothing but PyPI is reachable): their image stands for one with kfp preinstalled, which is this
checkout's venv (kfp 2.17.3, the compiler's version) as a layer of `kfp_sdk_image`.
"""

# No `from __future__ import annotations`: KFP reads the components' annotations as objects.
import io
from pathlib import Path

import pytest
import yaml
from kfp import compiler, dsl, kubernetes
from kfp.dsl import Dataset, Input, Metrics, Output

from cube_jupyter.images import image_repository
from tests.pods.harness import Cluster
from tests.pods.images import ImageVenv
from tests.pods.kfp import KfpRun, kfp_sdk_image, run_kfp, uri_object
from tests.storage.s3server import S3Server

IMAGE = "python:3.11"


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def make_data(n: int, scale: float, name: str, tags: list, rows: Output[Dataset]) -> str:
    import os

    rows.metadata["count"] = n
    with open(rows.path, "w") as f:
        f.write("\n".join(str(i * scale) for i in range(n)))
    return f"{name}:{'+'.join(tags)}:{os.environ['GREETING']}:{os.environ['STORE_KEY']}"


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def summarize(rows: Input[Dataset], label: str, metrics: Output[Metrics], offset: float = 0.25) -> float:
    with open(rows.path) as f:
        values = [float(line) for line in f.read().split("\n")]
    total = sum(values) + offset
    metrics.log_metric("total", total)
    metrics.log_metric("rows", rows.metadata["count"])
    metrics.log_metric("label", label)
    return total


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def explode(reason: str) -> str:
    raise RuntimeError(reason)


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def after_explode(text: str) -> str:
    return text.upper()


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def independent(words: list) -> int:
    return len(words)


@dsl.pipeline(name="harness-check")
def checked(n: int = 4, scale: float = 0.5, name: str = "run", tags: list = ["a", "b"]) -> None:  # noqa: B006
    made = make_data(n=n, scale=scale, name=name, tags=tags)
    made.set_env_variable("GREETING", "hello")
    kubernetes.use_secret_as_env(made, secret_name="store", secret_key_to_env={"key": "STORE_KEY"})
    summarize(rows=made.outputs["rows"], label=made.outputs["Output"])
    failing = explode(reason="on purpose").set_retry(num_retries=1)
    after_explode(text=failing.output)
    independent(words=tags).after(made)


# What the Python functions compute, for the run's parameters.
N, SCALE, TAGS = 3, 1.5, ["x", "y", "z"]
VALUES = [i * SCALE for i in range(N)]


def compile_ir(pipeline: object, tmp_path: Path) -> str:
    path = tmp_path / "pipeline.yaml"
    compiler.Compiler().compile(pipeline, str(path))
    return path.read_text()


@pytest.fixture(scope="session")
def kfp_image() -> ImageVenv:
    return kfp_sdk_image()


@pytest.fixture
def kfp_cluster(tmp_path: Path, kfp_image: ImageVenv) -> Cluster:
    return Cluster(
        root=tmp_path / "cluster",
        images={image_repository(IMAGE): kfp_image},
        secrets={"store": {"key": "s3cr3t"}},
    )


def test_a_kfp_sdk_pipeline_runs_with_kfps_semantics(
    kfp_cluster: Cluster, s3: S3Server, bucket: str, tmp_path: Path
) -> None:
    ir = compile_ir(checked, tmp_path)
    assert "platforms" in [key for doc in yaml.safe_load_all(ir) if doc for key in doc]
    client = s3.client()
    run = run_kfp(
        kfp_cluster,
        ir,
        {"n": N, "scale": SCALE, "tags": TAGS},
        client=client,
        pipeline_root=f"s3://{bucket}/v2/artifacts",
        run_id="run-1234",
    )
    states = {name: task.state for name, task in run.tasks.items()}
    assert states == {
        "make-data": "SUCCEEDED",
        "summarize": "SUCCEEDED",
        "explode": "FAILED",
        "after-explode": "NOT_RUN",  # its dependency failed
        "independent": "SUCCEEDED",  # independent of the failure
    }, run.describe()
    assert run.pipeline_root == f"s3://{bucket}/v2/artifacts/harness-check/run-1234"

    made, summary = run.tasks["make-data"], run.tasks["summarize"]
    assert made.parameters == {"Output": "run:x+y+z:hello:s3cr3t"}  # the default name, env, the Secret
    [rows_uri] = [a["uri"] for a in [made.artifacts["rows"]]]
    assert rows_uri.startswith(f"{run.pipeline_root}/make-data/") and rows_uri.endswith("/rows")
    assert uri_object(client, rows_uri).decode() == "\n".join(str(v) for v in VALUES)
    assert made.artifacts["rows"]["metadata"]["count"] == N
    assert made.artifacts["rows"]["type"] == {"schemaTitle": "system.Dataset", "schemaVersion": "0.0.1"}

    total = sum(VALUES) + 0.25  # summarize's default offset, added by the launcher
    assert summary.parameters == {"Output": total}
    consumed = summary.executor_input["inputs"]["artifacts"]["rows"]["artifacts"][0]
    assert consumed["uri"] == rows_uri and consumed["metadata"]["count"] == N
    assert summary.executor_input["inputs"]["parameterValues"] == {"label": "run:x+y+z:hello:s3cr3t"}
    metrics = summary.artifacts["metrics"]
    assert metrics["type"]["schemaTitle"] == "system.Metrics"
    assert {k: metrics["metadata"][k] for k in ("total", "rows", "label")} == {
        "total": total,
        "rows": N,
        "label": "run:x+y+z:hello:s3cr3t",
    }
    assert run.tasks["independent"].parameters == {"Output": len(TAGS)}

    failed = run.tasks["explode"]
    assert len(failed.attempts) == 2  # retryPolicy maxRetryCount 1: two pods
    assert all("RuntimeError: on purpose" in attempt.describe() for attempt in failed.attempts)
    assert run.tasks["after-explode"].attempts == []


@dsl.container_component
def echo(message: str, out: dsl.OutputPath(str)) -> dsl.ContainerSpec:
    return dsl.ContainerSpec(
        image=IMAGE,
        command=[
            "python",
            "-c",
            "import sys, pathlib; pathlib.Path(sys.argv[1]).write_text(' '.join(sys.argv[2:]))",
        ],
        args=[
            out,
            dsl.ConcatPlaceholder(["<", message, "|", dsl.PIPELINE_TASK_NAME_PLACEHOLDER, ">"]),
            dsl.IfPresentPlaceholder(input_name="message", then=["given"], else_=["absent"]),
        ],
    )


@dsl.container_component
def broken() -> dsl.ContainerSpec:
    return dsl.ContainerSpec(
        image=IMAGE, command=["python", "-c", "pass"], args=["{{$.inputs.parameters['nope']}}"]
    )


WRITE_DIR = "import os, sys; os.makedirs(sys.argv[1]); open(sys.argv[1] + '/part-0', 'w').write(sys.argv[2])"
READ_DIR = (
    "import sys, pathlib as p; "
    "p.Path(sys.argv[1]).write_text(p.Path(sys.argv[2], 'part-0').read_text() + sys.argv[3])"
)


@dsl.container_component
def write_dir(rows: dsl.Output[Dataset]) -> dsl.ContainerSpec:
    return dsl.ContainerSpec(
        image=IMAGE, command=["python", "-c", WRITE_DIR], args=[rows.path, dsl.PIPELINE_ROOT_PLACEHOLDER]
    )


@dsl.container_component
def read_dir(rows: dsl.Input[Dataset], out: dsl.OutputPath(str)) -> dsl.ContainerSpec:
    return dsl.ContainerSpec(
        image=IMAGE,
        command=["python", "-c", READ_DIR],
        args=[out, rows.path, dsl.ConcatPlaceholder([" ", rows.uri])],
    )


@dsl.pipeline(name="placeholders")
def placeholders(message: str = "hi") -> None:
    echo(message=message)
    broken().set_retry(num_retries=0)
    read_dir(rows=write_dir().outputs["rows"])


def test_structured_placeholders_resolve_and_an_unresolved_one_fails_its_task(
    kfp_cluster: Cluster, s3: S3Server, bucket: str, tmp_path: Path
) -> None:
    run: KfpRun = run_kfp(
        kfp_cluster,
        compile_ir(placeholders, tmp_path),
        {"message": "a b"},
        client=s3.client(),
        pipeline_root=f"minio://{bucket}/root",
    )
    assert run.tasks["echo"].state == "SUCCEEDED", run.describe()
    assert run.tasks["echo"].parameters == {"out": "<a b|echo> given"}
    broken_task = run.tasks["broken"]
    assert broken_task.state == "FAILED" and broken_task.attempts[0].containers == []  # never started
    assert broken_task.errors == ["unresolved placeholder {{$.inputs.parameters['nope']}}"]
    assert (
        run.tasks["echo"].executor_input["outputs"]["outputFile"] == "/tmp/kfp_outputs/output_metadata.json"
    )
    # A directory artifact: uploaded file by file under its key, downloaded back into a directory.
    rows_uri = run.tasks["write-dir"].artifacts["rows"]["uri"]
    assert uri_object(s3.client(), rows_uri + "/part-0").decode() == run.pipeline_root
    assert run.tasks["read-dir"].parameters == {"out": f"{run.pipeline_root} {rows_uri}"}, run.describe()


@dsl.pipeline(name="imports")
def imports(uri: str) -> None:
    # One after another: tasks ready together run at once (in KFP too), and which of them records
    # the URI first would be a race.
    first = dsl.importer(artifact_uri=uri, artifact_class=Dataset, reimport=False)
    again = dsl.importer(artifact_uri=uri, artifact_class=Dataset, reimport=False).after(first)
    dsl.importer(artifact_uri=uri, artifact_class=Dataset, reimport=True).after(again)
    dsl.importer(artifact_uri="gs://elsewhere/data", artifact_class=Dataset, metadata={"origin": "made"})
    read_dir(rows=first.output).after(again)


def test_an_importer_records_its_uri_once_and_its_consumer_downloads_the_directory(
    kfp_cluster: Cluster, s3: S3Server, bucket: str, tmp_path: Path
) -> None:
    client = s3.client()
    uri = f"s3://{bucket}/shared/data"
    client.put_object(bucket, "shared/data/part-0", io.BytesIO(b"imported"), len(b"imported"))
    run = run_kfp(
        kfp_cluster,
        compile_ir(imports, tmp_path),
        {"uri": uri},
        client=client,
        pipeline_root=f"s3://{bucket}/root",
    )
    assert run.succeeded, run.describe()
    imported = ("importer", "importer-2", "importer-3", "importer-4")
    first, again, reimported, constant = (run.tasks[name].artifacts["artifact"] for name in imported)
    assert first == again and first["uri"] == uri  # without reimport: the same artifact
    assert reimported["name"] != first["name"] and reimported["uri"] == uri
    assert first["type"] == {"schemaTitle": "system.Dataset", "schemaVersion": "0.0.1"}
    assert constant["uri"] == "gs://elsewhere/data" and constant["metadata"]["origin"] == "made"
    assert all(run.tasks[name].attempts == [] for name in imported)  # no pods
    assert run.tasks["read-dir"].parameters == {"out": f"imported {uri}"}
