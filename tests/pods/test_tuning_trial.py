"""A notebook trial of a Katib Experiment run by the pod harness: the trial Job Katib makes from the
rendered trialTemplate (`${trialParameters.lr}` replaced by the trial's value) runs the shipped
notebook with papermill in the runtime image, in the user's workspace claim; Katib's StdOut collector
finds the objective in its log."""

from __future__ import annotations

from pathlib import Path

import nbformat

from cube_jupyter.jobs.package import ship_to_cluster
from cube_jupyter.jobs.render.tuning import render_tuning
from cube_jupyter.jobs.tuning_spec import TuningSpec
from tests.k8s_schemas import validate_object
from tests.pipelines.notebooks import code, notebook, write
from tests.pods.conftest import cluster_settings
from tests.pods.harness import Cluster
from tests.pods.operators import job_pod, katib_metrics, katib_trial
from tests.storage.s3server import S3Server

TRIAL = notebook(
    code("lr = 0.1\nepochs = 1", "parameters"),
    code("loss = round((lr - 0.03) ** 2 * epochs, 6)\nprint(f'loss={loss}')"),
)


def test_a_notebook_trial_reports_its_objective_to_katib(
    cluster: Cluster, s3: S3Server, bucket: str, tmp_path: Path
) -> None:
    write(TRIAL, tmp_path / "trial.ipynb")
    settings = cluster_settings(s3, bucket)
    raw = {
        "name": "tune-lr",
        "objective": {"metric": "loss", "type": "minimize"},
        "algorithm": "random",
        "parameters": {
            "lr": {"type": "double", "min": 0.01, "max": 0.1},
            "epochs": {"type": "int", "min": 1, "max": 3},
        },
        "max_trials": 4,
        "trial": {"notebook": "trial.ipynb", "workspace": True},
    }
    spec = ship_to_cluster(TuningSpec.from_dict(raw, user="alice"), settings.storage, tmp_path)
    [experiment] = render_tuning(spec, settings.jobs)
    validate_object(experiment)

    trial = katib_trial(experiment, "tune-lr-x7k2pqz9", {"lr": "0.05", "epochs": "3"})
    validate_object(trial)
    run = job_pod(cluster, trial).start().wait()
    assert run.succeeded, run.describe()
    primary = run.container(experiment["spec"]["trialTemplate"]["primaryContainerName"])
    assert katib_metrics(primary.log, settings.jobs.jobs.katib_metrics_format)["loss"] == [
        0.0012
    ]  # (0.05-0.03)²·3
    # The notebook ran in the workspace claim (workingDir /home/jovyan), where its output stays.
    executed = nbformat.read(cluster.claim("alice-workspace") / "trial.output.ipynb", as_version=4)
    assert executed.cells[1]["source"] == "# Parameters\nlr = 0.05\nepochs = 3\n"
