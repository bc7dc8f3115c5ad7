"""The pod harness does the kubelet's part as its docstring says: env resolved (values with $(VAR),
Secrets, fieldRefs), mount paths replaced where they start a path and nowhere else, an emptyDir shared
by the pod's containers, init containers first, a claim shared by pods, and a clear failure for what
the kubelet would refuse."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cube_jupyter.images import RUNTIME_IMAGE
from tests.pods.harness import POD_IP, Cluster, Pod

# Prints what the process got: its argv, env, working directory, and the shared file's content.
REPORT = """
import json, os, sys
shared = os.path.join(os.environ["SHARED"], "note")
print(json.dumps({"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd(),
                  "note": open(shared).read()}))
"""
WRITE_NOTE = "import sys; open(sys.argv[1] + '/note', 'w').write('from init')"


def pod(name: str, env: list[dict[str, Any]]) -> dict[str, Any]:
    mounts = [{"name": "scratch", "mountPath": "/scratch"}, {"name": "work", "mountPath": "/home/jovyan"}]
    return {
        "metadata": {"name": name, "labels": {"app": "probe"}},
        "spec": {
            "serviceAccountName": "runner",
            "initContainers": [
                {
                    "name": "init",
                    "image": RUNTIME_IMAGE,
                    "command": ["python", "-c", WRITE_NOTE, "/scratch"],
                    "volumeMounts": mounts,
                }
            ],
            "containers": [
                {
                    "name": "main",
                    "image": RUNTIME_IMAGE,
                    "command": ["python", "-c", REPORT],
                    "args": [
                        "/scratch/in",
                        "--out=/scratch/out",
                        "/scratchy",
                        "x:/home/jovyan/a",
                        "$(GREETING)",
                        "$$(GREETING)",
                    ],
                    "workingDir": "/home/jovyan/project",
                    "env": env,
                    "volumeMounts": mounts,
                }
            ],
            "volumes": [
                {"name": "scratch", "emptyDir": {}},
                {"name": "work", "persistentVolumeClaim": {"claimName": "ws"}},
            ],
        },
    }


def test_a_pod_runs_as_the_kubelet_would_run_it(cluster: Cluster) -> None:
    cluster.secrets["creds"] = {"token": "s3cr3t"}
    env: list[dict[str, Any]] = [
        {"name": "GREETING", "value": "hello"},
        {"name": "SHARED", "value": "/scratch"},
        {"name": "PHRASE", "value": "$(GREETING) world, $(UNDEFINED)"},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
    ]
    run = Pod(cluster, pod("probe", env)).start().wait()
    assert run.succeeded, run.describe()
    seen = json.loads(run.container("main").stdout)
    scratch = str(cluster.root / "pods" / "probe" / "volumes" / "scratch")
    claim = str(cluster.claim("ws"))
    assert seen["argv"] == [
        f"{scratch}/in",
        f"--out={scratch}/out",
        "/scratchy",  # not a path under the mount
        f"x:{claim}/a",
        "hello",
        "$(GREETING)",
    ]
    assert seen["cwd"] == f"{claim}/project"
    assert seen["note"] == "from init"  # written by the init container into the shared emptyDir
    got = seen["env"]
    assert got["PHRASE"] == "hello world, $(UNDEFINED)"
    assert (got["TOKEN"], got["POD"], got["NS"], got["IP"], got["APP"]) == (
        "s3cr3t",
        "probe",
        "cube-alice",
        POD_IP,
        "probe",
    )
    assert got["HOSTNAME"] == "probe" and got["PATH"].startswith(str(cluster.image(RUNTIME_IMAGE).bin))
    assert "PYTHONPATH" not in got  # nothing of this test process leaks in


def test_what_the_kubelet_refuses_fails_the_pod(cluster: Cluster) -> None:
    missing = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "token"}}}]
    with pytest.raises(AssertionError, match="CreateContainerConfigError: secret 'nope'"):
        Pod(cluster, pod("refused", missing)).start().wait()
    unknown = pod("elsewhere", [])
    unknown["spec"]["containers"][0]["image"] = "registry.example.com/unknown:1"
    with pytest.raises(AssertionError, match="no venv stands for image"):
        Pod(cluster, unknown).start().wait()
