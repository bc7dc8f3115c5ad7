"""Where the tests get upstream projects' data: CustomResourceDefinitions, Katib's OpenAPI types and
Trainer's preset runtimes, read from the Go modules that ship them (pinned in `tools/crds/go.mod`,
downloaded into the Go module cache on first use), and the two Kubeflow CRDs no served module carries,
kept in `tests/data/crds/` (see its SOURCES.md).

    from tests.upstream import crd_documents, crd_files, trainer_runtimes
"""

from __future__ import annotations

import json
import os
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
CRD_MODULE = REPO / "tools" / "crds"
VENDORED_CRDS = REPO / "tests" / "data" / "crds"

# module → the files in it the tests read (CRDs, OpenAPI types), as the module ships them
CRD_SOURCES: dict[str, tuple[str, ...]] = {
    "github.com/argoproj/argo-workflows/v4": (
        "manifests/base/crds/full/argoproj.io_workflows.yaml",
        "manifests/base/crds/full/argoproj.io_cronworkflows.yaml",
        # the rest of what Argo's workflow-controller watches (the cluster tests run it)
        "manifests/base/crds/full/argoproj.io_workflowtemplates.yaml",
        "manifests/base/crds/full/argoproj.io_clusterworkflowtemplates.yaml",
        "manifests/base/crds/full/argoproj.io_workflowtaskresults.yaml",
        "manifests/base/crds/full/argoproj.io_workflowtasksets.yaml",
        "manifests/base/crds/full/argoproj.io_workflowartifactgctasks.yaml",
        "manifests/base/crds/full/argoproj.io_workfloweventbindings.yaml",
    ),
    "github.com/kubeflow/trainer/v2": (
        "manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml",
        "manifests/base/crds/trainer.kubeflow.org_clustertrainingruntimes.yaml",
        "manifests/base/crds/trainer.kubeflow.org_trainingruntimes.yaml",
    ),
    "github.com/kubeflow/training-operator": (
        "manifests/base/crds/kubeflow.org_pytorchjobs.yaml",
        "manifests/base/crds/kubeflow.org_tfjobs.yaml",
        "manifests/base/crds/kubeflow.org_xgboostjobs.yaml",
        "manifests/base/crds/kubeflow.org_mpijobs.yaml",
    ),
    "github.com/kubeflow/katib": (
        "manifests/v1beta1/components/crd/experiment.yaml",
        "manifests/v1beta1/components/crd/trial.yaml",
        "manifests/v1beta1/components/crd/suggestion.yaml",
        "pkg/apis/v1beta1/swagger.json",
    ),
    "github.com/kserve/kserve": ("config/crd/full/serving.kserve.io_inferenceservices.yaml",),
    "istio.io/api": ("kubernetes/customresourcedefinitions.gen.yaml",),
    "sigs.k8s.io/kueue": (
        "config/components/crd/bases/kueue.x-k8s.io_clusterqueues.yaml",
        "config/components/crd/bases/kueue.x-k8s.io_localqueues.yaml",
        "config/components/crd/bases/kueue.x-k8s.io_resourceflavors.yaml",
        "config/components/crd/bases/kueue.x-k8s.io_workloads.yaml",
        "config/components/crd/bases/kueue.x-k8s.io_workloadpriorityclasses.yaml",
    ),
    "sigs.k8s.io/jobset": ("config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml",),
}
TRAINER_RUNTIMES = ("github.com/kubeflow/trainer/v2", "manifests/base/runtimes")


@cache
def module_dirs() -> dict[str, Path]:
    """Each module's folder in the Go module cache, at the version `tools/crds/go.mod` pins (the go
    command downloads it once and checks it against go.sum)."""
    env = {**os.environ, "GOFLAGS": "-mod=readonly", "GOWORK": "off"}
    done = subprocess.run(
        ["go", "mod", "download", "-json", *CRD_SOURCES],
        cwd=CRD_MODULE,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    found: dict[str, Path] = {}
    decoder = json.JSONDecoder()
    text, position = done.stdout, 0
    while position < len(text.rstrip()):
        record, position = decoder.raw_decode(text, text.index("{", position))
        if record.get("Error"):
            raise AssertionError(f"go mod download {record['Path']}: {record['Error']}")
        found[record["Path"]] = Path(record["Dir"])
    missing = sorted(set(CRD_SOURCES) - set(found))
    if done.returncode or missing:
        raise AssertionError(f"go mod download in {CRD_MODULE} failed ({missing}): {done.stderr[-2000:]}")
    return found


def module_file(module: str, path: str) -> Path:
    full = module_dirs()[module] / path
    if not full.is_file():
        raise AssertionError(f"{module} at the pinned version has no {path}")
    return full


def crd_files() -> list[Path]:
    """Every CRD file the tests validate against: the modules' and the vendored Kubeflow ones."""
    files = [module_file(m, p) for m, paths in CRD_SOURCES.items() for p in paths if p.endswith(".yaml")]
    return files + sorted(VENDORED_CRDS.glob("*.yaml"))


@cache
def crd_documents(path: Path) -> list[dict[str, Any]]:
    """The CustomResourceDefinitions in `path`, parsed once per process with libyaml's loader (the
    pure-Python one takes 17 s over every file here)."""
    with path.open() as stream:
        docs = list(yaml.load_all(stream, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))
    return [d for d in docs if isinstance(d, dict) and d.get("kind") == "CustomResourceDefinition"]


def swagger_files() -> list[Path]:
    return [module_file(m, p) for m, paths in CRD_SOURCES.items() for p in paths if p.endswith(".json")]


def trainer_runtimes() -> list[Path]:
    """Kubeflow Trainer's preset ClusterTrainingRuntimes, as a cluster gets them."""
    module, folder = TRAINER_RUNTIMES
    return sorted((module_dirs()[module] / folder).glob("*_distributed.yaml"))
