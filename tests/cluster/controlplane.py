"""A real Kubernetes control plane on loopback, for the cluster tests and `make cluster`.

etcd, kube-apiserver (RBAC and Node authorization, the default admission plugins with ResourceQuota
and NodeRestriction, service-account tokens signed by its own key), kube-controller-manager (each
controller with its own service-account credentials), kube-scheduler, and kwok keeping fake nodes
and their pods alive: two CPU nodes and one GPU node advertising `nvidia.com/gpu: 2` with the labels
and taint a GPU node carries. The binaries are built from the Go module proxy by `tools/build.sh`
(once, cached under `.cluster/bin/` by the versions pinned in tools/*/go.sum).

    python -m tests.cluster.controlplane up      # start (idempotent), print where it is
    python -m tests.cluster.controlplane down    # stop it

The admin kubeconfig is `<dir>/kubeconfig` (a static token in `system:masters`); the state of a
running plane (ports, pids) is `<dir>/state.json`.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime
import functools
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from cube_jupyter.local.processes import free_port

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DIR = REPO / ".cluster"
BUILD = REPO / "tools" / "build.sh"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok")
ARGO_CONTROLLER = "workflow-controller"  # built with the plane; started by `start_argo`
ARGO_NAMESPACE = "argo"
# Kubeflow Trainer v2 and the JobSet controller it drives: built with the plane; started by `start_trainer`.
TRAINER, JOBSET = "trainer-controller-manager", "jobset"
# Kueue's controller manager: built with the plane (tools/kueue pins it); started by `start_kueue`.
KUEUE = "kueue"
FRONT_PROXY_CLIENT = "front-proxy-client"
KUEUE_MODULE = "sigs.k8s.io/kueue"
KUEUE_NAMESPACE = "kueue-system"
# The names Kueue's certificate rotator derives its Secret's, its certificate's and its webhook
# configurations' (kueue-{mutating,validating}-webhook-configuration) from.
KUEUE_SERVICE, KUEUE_SECRET = "kueue-webhook-service", "kueue-webhook-server-cert"
# Kueue manages pods (and the StatefulSets and Deployments that own them, a notebook server's) only
# in namespaces labelled so, and its webhooks on them are called only there.
KUEUE_MANAGED = {"kueue-managed": "true"}
# Kueue's integrations for every kind whose CRD the cluster tests install: batch Jobs, JobSets,
# TrainJobs, the Training Operator v1 kinds, and pod-based workloads. Not kubeflow.org/mpijob: Kueue's
# is MPI Operator v2's v2beta1 MPIJob, the Training Operator's CRD serves v1 only.
KUEUE_FRAMEWORKS = (
    "batch/job",
    "jobset.x-k8s.io/jobset",
    "trainer.kubeflow.org/trainjob",
    "kubeflow.org/pytorchjob",
    "kubeflow.org/tfjob",
    "kubeflow.org/xgboostjob",
    "pod",
    "deployment",
    "statefulset",
)
POD_OWNERS = {"pods", "deployments", "statefulsets"}  # what Kueue's pod-based integrations watch
# Argo's controller runs out of the cluster, with the admin's kubeconfig: no leader to elect. The API
# server rebuilds its OpenAPI documents each time a CRD changes (KServe's and Istio's are large), and
# Go keeps what it freed: a soft memory limit makes it hand memory back, as a container's limit would.
ENVIRONMENT = {
    ARGO_CONTROLLER: {"LEADER_ELECTION_DISABLE": "true", "LEADER_ELECTION_IDENTITY": "local"},
    "kube-apiserver": {"GOMEMLIMIT": "900MiB"},
}
SERVICE_CIDR = "10.96.0.0/16"
ISSUER = "https://kubernetes.default.svc.cluster.local"
GPU_RESOURCE = "nvidia.com/gpu"
START_TIMEOUT = 120.0
# What a GPU node carries: the GPU Operator's feature-discovery labels, and the taint clusters put on
# GPU nodes so only pods that tolerate it land there.
GPU_LABELS = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
    "nvidia.com/gpu.count": "2",
    "nvidia.com/gpu.memory": "81920",
}
GPU_TAINT = {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}
KWOK_ANNOTATION = "kwok.x-k8s.io/node"


@dataclass(frozen=True)
class FakeNode:
    name: str
    cpu: str = "8"
    memory: str = "32Gi"
    gpus: int = 0

    def manifest(self) -> dict[str, Any]:
        capacity = {"cpu": self.cpu, "memory": self.memory, "pods": "110"}
        labels = {"kubernetes.io/hostname": self.name, "kubernetes.io/os": "linux", "type": "kwok"}
        taints: list[dict[str, str]] = []
        if self.gpus:
            capacity[GPU_RESOURCE] = str(self.gpus)
            labels |= GPU_LABELS
            taints.append(GPU_TAINT)
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": labels, "annotations": {KWOK_ANNOTATION: "fake"}},
            "spec": {"taints": taints},
            "status": {"capacity": capacity, "allocatable": capacity},
        }


NODES = (FakeNode("cpu-node-1"), FakeNode("cpu-node-2"), FakeNode("gpu-node-1", "16", "128Gi", gpus=2))
# The audit log records every request a ServiceAccount outside kube-system makes (who, verb, what,
# the authorizer's decision): the RBAC tests replay the workbench's against its roles.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted"],
    "rules": [
        {"level": "None", "userGroups": ["system:serviceaccounts:kube-system", "system:nodes"]},
        {"level": "Metadata", "userGroups": ["system:serviceaccounts"]},
        {"level": "None"},
    ],
}
AUDIT_LOG = "audit.log"
# Storage as a small cluster has it: a default StorageClass and a pool of volumes the PV controller
# binds claims to (no provisioner: kwok's pods never touch a disk).
STORAGE_CLASS = "standard"
VOLUMES = 64


def storage_manifests() -> list[dict[str, Any]]:
    storage_class = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": STORAGE_CLASS,
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "Immediate",
    }
    volumes = [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": f"volume-{index:02d}"},
            "spec": {
                "capacity": {"storage": "50Gi"},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": STORAGE_CLASS,
                "hostPath": {"path": f"/var/lib/kwok-volumes/{index:02d}"},
            },
        }
        for index in range(VOLUMES)
    ]
    return [storage_class, *volumes]


@dataclass
class State:
    """A running plane: where it listens and which processes are its."""

    directory: str
    etcd_port: int
    etcd_peer_port: int
    apiserver_port: int
    token: str
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def kubeconfig(self) -> Path:
        return Path(self.directory) / "kubeconfig"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.etcd_port}"


@functools.cache
def binaries(directory: Path) -> Path:
    """The folder holding the built binaries (building them first if the pinned versions changed)."""
    done = subprocess.run(
        [str(BUILD), str(directory / "bin")], capture_output=True, text=True, timeout=3600, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{BUILD} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    folder = Path(done.stdout.strip().splitlines()[-1])
    missing = [
        name
        for name in (*BINARIES, ARGO_CONTROLLER, TRAINER, JOBSET, KUEUE, "kwok-stages.yaml")
        if not (folder / name).is_file()
    ]
    if missing:
        raise RuntimeError(f"{BUILD} left no {', '.join(missing)} in {folder}")
    return folder


def kubectl() -> Path:
    """The kubectl built with the plane (the same Kubernetes version; machines may have none)."""
    return binaries(DEFAULT_DIR) / "kubectl"


# --- certificates and keys -------------------------------------------------------------------------


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem_key(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def _certificate(
    name: str,
    key: rsa.RSAPrivateKey,
    *,
    names: Sequence[x509.GeneralName] = (),
    issuer: tuple[x509.Certificate, rsa.RSAPrivateKey] | None = None,
    days: int = 30,
) -> x509.Certificate:
    """`key`'s certificate, `names` its subject alternative names: signed by `issuer`, or, without
    one, a CA's, self-signed."""
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer[0].subject if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
    )
    if issuer is None:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(names)), critical=False)
    return builder.sign(issuer[1] if issuer else key, hashes.SHA256())


def _pem_certificate(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)


def write_pki(folder: Path) -> None:
    """A CA, the API server's serving certificate (loopback and in-cluster names) signed by it, the
    service-account signing key pair, and the front proxy's CA and client certificate (what the API
    server shows an aggregated API server, Kueue's visibility server, when it passes a request on)."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca = _certificate("cube-jupyter-test-ca", ca_key)
    server_key = _key()
    names: list[x509.GeneralName] = [
        x509.DNSName(name)
        for name in ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")
    ]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ("127.0.0.1", "10.96.0.1")]
    server = _certificate("kube-apiserver", server_key, names=names, issuer=(ca, ca_key))
    sa_key = _key()
    (folder / "ca.crt").write_bytes(_pem_certificate(ca))
    (folder / "apiserver.crt").write_bytes(_pem_certificate(server))
    (folder / "apiserver.key").write_bytes(_pem_key(server_key))
    (folder / "sa.key").write_bytes(_pem_key(sa_key))
    (folder / "sa.pub").write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    proxy_ca_key, proxy_key = _key(), _key()
    proxy_ca = _certificate("front-proxy-ca", proxy_ca_key)
    proxy = _certificate(FRONT_PROXY_CLIENT, proxy_key, issuer=(proxy_ca, proxy_ca_key))
    (folder / "front-proxy-ca.crt").write_bytes(_pem_certificate(proxy_ca))
    (folder / "front-proxy-client.crt").write_bytes(_pem_certificate(proxy))
    (folder / "front-proxy-client.key").write_bytes(_pem_key(proxy_key))
    for private in ("apiserver.key", "sa.key", "front-proxy-client.key"):
        (folder / private).chmod(0o600)


def write_kubeconfig(state: State, path: Path, ca: Path, token: str, user: str = "admin") -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "cube-test",
                "cluster": {"server": state.server, "certificate-authority": str(ca)},
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "cube-test", "context": {"cluster": "cube-test", "user": user}}],
        "current-context": "cube-test",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)


# --- the processes ---------------------------------------------------------------------------------


def _start(name: str, argv: Sequence[str], logs: Path) -> int:
    with (logs / f"{name}.log").open("ab") as log:
        process = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            # the plane's own temporary folder: where controller-runtime's webhook servers find
            # their serving certificate (`start_trainer` puts it there)
            env={**os.environ, "TMPDIR": str(logs.parent / "tmp"), **ENVIRONMENT.get(name, {})},
        )
    return process.pid


def _arguments(state: State, bin_dir: Path) -> dict[str, list[str]]:
    d = Path(state.directory)
    pki = d / "pki"
    kubeconfig = str(state.kubeconfig)
    peer = f"http://127.0.0.1:{state.etcd_peer_port}"
    return {
        "etcd": [
            str(bin_dir / "etcd"),
            "--name=default",
            f"--data-dir={d / 'etcd'}",
            f"--listen-client-urls={state.etcd_url}",
            f"--advertise-client-urls={state.etcd_url}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}",
            "--unsafe-no-fsync=true",  # a throwaway test cluster: speed over durability
            "--quota-backend-bytes=2147483648",
        ],
        "kube-apiserver": [
            str(bin_dir / "kube-apiserver"),
            f"--etcd-servers={state.etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={state.apiserver_port}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--token-auth-file={d / 'tokens.csv'}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction,ResourceQuota",
            f"--service-account-issuer={ISSUER}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--endpoint-reconciler-type=none",
            "--profiling=false",
            f"--audit-policy-file={d / 'audit-policy.yaml'}",
            f"--audit-log-path={d / AUDIT_LOG}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",
            # the aggregation layer: who the API server says it is to an aggregated API server
            f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
            f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
            f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
        ],
        "kube-controller-manager": [
            str(bin_dir / "kube-controller-manager"),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}",
            "--use-service-account-credentials=true",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            "--secure-port=0",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--controllers=*,-nodeipam",
        ],
        "kube-scheduler": [
            str(bin_dir / "kube-scheduler"),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            "--secure-port=0",
        ],
        "kwok": [
            str(bin_dir / "kwok"),
            f"--kubeconfig={kubeconfig}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
            "--cidr=10.244.0.0/16",
            "--node-ip=127.0.0.1",  # where no kubelet listens: a log request is refused at once
            "--node-lease-duration-seconds=40",
            "--server-address=",
            f"--config={bin_dir / 'kwok-stages.yaml'}",
        ],
        ARGO_CONTROLLER: [
            str(bin_dir / ARGO_CONTROLLER),
            f"--kubeconfig={kubeconfig}",
            f"--namespace={ARGO_NAMESPACE}",
            "--executor-image=quay.io/argoproj/argoexec:v4.0.5",  # kwok runs no image: named as installed
        ],
        TRAINER: [str(bin_dir / TRAINER), f"--kubeconfig={kubeconfig}", f"--config={d / 'trainer.yaml'}"],
        JOBSET: [str(bin_dir / JOBSET), f"--kubeconfig={kubeconfig}", f"--config={d / 'jobset.yaml'}"],
        KUEUE: [str(bin_dir / KUEUE), f"--kubeconfig={kubeconfig}", f"--config={d / 'kueue.yaml'}"],
    }


def _get(url: str, state: State, timeout: float = 5.0) -> tuple[int, str]:
    context = ssl.create_default_context(cafile=str(Path(state.directory) / "pki" / "ca.crt"))
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {state.token}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")


def _wait(what: str, ready: Any, state: State, timeout: float = START_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        for name, pid in state.pids.items():
            if not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                log = Path(state.directory) / "logs" / f"{name}.log"
                tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
                raise RuntimeError(f"{name} exited while waiting for {what}:\n{tail}")
        try:
            if ready():
                return
        except (OSError, ValueError) as exc:
            last = exc
        time.sleep(0.2)
    raise TimeoutError(f"{what} not ready after {timeout:.0f} s ({last})")


def _kubectl(state: State, bin_dir: Path, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [str(bin_dir / "kubectl"), f"--kubeconfig={state.kubeconfig}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def _alive(state: State) -> bool:
    if not all(psutil.pid_exists(pid) for pid in state.pids.values()):
        return False
    with contextlib.suppress(OSError):
        return _get(f"{state.server}/readyz", state)[0] == 200
    return False


def read_state(directory: Path) -> State | None:
    path = directory / "state.json"
    if not path.is_file():
        return None
    return State(**json.loads(path.read_text()))


def up(directory: Path = DEFAULT_DIR) -> State:
    """Start the plane in `directory` (or find it running there); wait until nodes are Ready."""
    directory = directory.resolve()
    running = read_state(directory)
    if running is not None and _alive(running):
        return running
    if running is not None:
        down(directory)
    bin_dir = binaries(DEFAULT_DIR)  # built once for every plane, keyed by the pinned versions
    plane = directory / "plane"
    if plane.exists():
        subprocess.run(["rm", "-rf", str(plane)], check=True)
    (plane / "logs").mkdir(parents=True)
    write_pki(plane / "pki")
    state = State(str(plane), free_port(), free_port(), free_port(), secrets.token_hex(24))
    (plane / "tokens.csv").write_text(f'{state.token},admin,admin,"system:masters"\n')
    (plane / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY))
    (plane / "tokens.csv").chmod(0o600)
    write_kubeconfig(state, state.kubeconfig, plane / "pki" / "ca.crt", state.token)
    arguments = _arguments(state, bin_dir)
    logs = plane / "logs"
    state.pids["etcd"] = _start("etcd", arguments["etcd"], logs)
    _save(directory, state)
    _wait("etcd", lambda: urllib.request.urlopen(f"{state.etcd_url}/health", timeout=2).status == 200, state)
    state.pids["kube-apiserver"] = _start("kube-apiserver", arguments["kube-apiserver"], logs)
    _save(directory, state)
    _wait("kube-apiserver", lambda: _get(f"{state.server}/readyz", state)[0] == 200, state)
    for name in ("kube-controller-manager", "kube-scheduler", "kwok"):
        state.pids[name] = _start(name, arguments[name], logs)
    _save(directory, state)
    manifests = yaml.safe_dump_all([node.manifest() for node in NODES] + storage_manifests())
    _kubectl(state, bin_dir, "apply", "-f", "-", stdin=manifests)
    _wait("the fake nodes", lambda: _nodes_ready(state), state)
    _wait("the default service account", lambda: _default_account(state), state)
    (directory / "kubeconfig").write_text(state.kubeconfig.read_text())
    (directory / "kubeconfig").chmod(0o600)
    return state


def stop(state: State, name: str) -> None:
    """Kill one component (kill -9: no goodbye to its clients), as a crash or an OOM kill would."""
    pid = state.pids[name]
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 15
    while psutil.pid_exists(pid) and time.monotonic() < deadline:
        _reap(state)
        time.sleep(0.05)


def start(state: State, name: str) -> None:
    """Start a component stopped by `stop` again, with the same arguments; wait until it serves."""
    directory = Path(state.directory)
    state.pids[name] = _start(name, _arguments(state, binaries(DEFAULT_DIR))[name], directory / "logs")
    _save(directory.parent, state)
    if name == "kube-apiserver":
        _wait("kube-apiserver", lambda: _get(f"{state.server}/readyz", state)[0] == 200, state)


def start_argo(state: State) -> None:
    """Argo Workflows' own workflow-controller, for every namespace (its CRDs installed first): the
    pods it makes for a Workflow's steps are placed by kube-scheduler and completed by kwok."""
    bin_dir = binaries(DEFAULT_DIR)
    objects = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ARGO_NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "workflow-controller-configmap", "namespace": ARGO_NAMESPACE},
            # no metrics servers: their fixed ports (9090) may be taken on a shared machine
            "data": {"metricsConfig": "enabled: false\n", "telemetryConfig": "enabled: false\n"},
        },
    ]
    _kubectl(state, bin_dir, "apply", "-f", "-", stdin=yaml.safe_dump_all(objects))
    directory = Path(state.directory)
    arguments = _arguments(state, bin_dir)[ARGO_CONTROLLER]
    state.pids[ARGO_CONTROLLER] = _start(ARGO_CONTROLLER, arguments, directory / "logs")
    _save(directory.parent, state)


def start_trainer(state: State) -> None:
    """Kubeflow Trainer v2's controller manager and JobSet's controller (their CRDs installed first),
    each with its admission webhooks registered by URL on loopback, as their manifests register them
    by Service (a JobSet is defaulted by its webhook; a TrainJob or runtime validated by Trainer's).
    A TrainJob becomes a JobSet, its Jobs, their pods: placed by kube-scheduler, completed by kwok."""
    from tests.upstream import module_file  # the webhook manifests of the versions tools/crds pins

    directory = Path(state.directory)
    certs = directory / "tmp" / "k8s-webhook-server" / "serving-certs"  # controller-runtime's default
    certs.mkdir(parents=True, exist_ok=True)
    shutil.copy(directory / "pki" / "apiserver.crt", certs / "tls.crt")  # the plane's CA signed it
    shutil.copy(directory / "pki" / "apiserver.key", certs / "tls.key")
    ports = {TRAINER: free_port(), JOBSET: free_port()}
    for name, api, certificates in (
        (TRAINER, "config.trainer.kubeflow.org/v1alpha1", "certManagement"),
        (JOBSET, "config.jobset.x-k8s.io/v1alpha1", "internalCertManagement"),
    ):
        config = {
            "apiVersion": api,
            "kind": "Configuration",
            "webhook": {"host": "127.0.0.1", "port": ports[name]},
            certificates: {"enable": False},
            **LOCAL_MANAGER,
        }
        (directory / f"{name.split('-')[0]}.yaml").write_text(yaml.safe_dump(config))
    ca = base64.b64encode((directory / "pki" / "ca.crt").read_bytes()).decode()
    manifests = (
        (TRAINER, module_file("github.com/kubeflow/trainer/v2", "manifests/base/webhook/manifests.yaml")),
        (JOBSET, module_file("sigs.k8s.io/jobset", "config/components/webhook/manifests.yaml")),
    )
    configurations = [
        _webhooks_by_url(doc, f"{name.split('-')[0]}-", ports[name], ca)
        for name, path in manifests
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]
    bin_dir = binaries(DEFAULT_DIR)
    for name in (JOBSET, TRAINER):
        state.pids[name] = _start(name, _arguments(state, bin_dir)[name], directory / "logs")
        _wait(f"{name}'s webhook server", functools.partial(_listening, ports[name]), state)
    _save(directory.parent, state)
    _kubectl(state, bin_dir, "apply", "-f", "-", stdin=yaml.safe_dump_all(configurations))


# A controller-runtime manager out of the cluster: no metrics or health servers (their fixed ports may
# be taken on a shared machine), no leader to elect.
LOCAL_MANAGER = {
    "metrics": {"bindAddress": "0"},
    "health": {"healthProbeBindAddress": "0"},
    "leaderElection": {"leaderElect": False},
}


def start_kueue(state: State) -> None:
    """Kueue's controller manager (its CRDs, of the version tools/kueue builds, installed first) with
    its admission and conversion webhooks registered by URL on loopback: a Job, JobSet or TrainJob
    labelled with a LocalQueue is suspended at create and started when its ClusterQueue's quota
    admits it. Wants the CRDs of the kinds in KUEUE_FRAMEWORKS installed (`installed` does).

    Kueue reads its metrics server's certificate from a fixed path (/etc/kueue) unless it manages
    its certificates itself, so it does: its rotator finds in its Secret a CA and a serving
    certificate made here, for loopback as well as its Service's name, keeps them, and injects the CA
    into the webhook configurations and CRDs it names.

    Its visibility server (the `visibility.kueue.x-k8s.io` API: a pending workload's position) runs
    on a free port on loopback, registered as an APIService whose Service is an ExternalName
    `localhost` (the aggregator routes to it as it would to a Service's cluster IP; no kube-proxy is
    needed). As in its image, Kueue writes that server's self-signed certificate under /visibility
    (a fixed path; the APIService skips TLS verification, as Kueue's own manifest does)."""
    bin_dir = binaries(DEFAULT_DIR)
    module = _module_dir("kueue", KUEUE_MODULE)
    directory = Path(state.directory)
    certs = directory / "kueue-certs"  # where a pod would mount the Secret
    secret = _kueue_certificates(certs)
    ca, port, visibility_port = secret["ca.crt"], free_port(), free_port()
    system = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": KUEUE_SECRET, "namespace": KUEUE_NAMESPACE},
            "data": secret,
        },
    ]
    _kubectl(state, bin_dir, "apply", "-f", "-", stdin=yaml.safe_dump_all(system))
    crds = _kueue_crds(module / "config" / "components" / "crd", port, ca)
    _kubectl(state, bin_dir, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=crds)
    _kubectl(state, bin_dir, "wait", "--for=condition=Established", "--timeout=60s", "-f", "-", stdin=crds)
    manifest = module / "config" / "components" / "webhook" / "manifests.yaml"
    pods = {"matchLabels": KUEUE_MANAGED}
    configurations = [
        _webhooks_by_url(doc, "kueue-", port, ca, pods)  # the names its rotator injects the CA into
        for doc in yaml.safe_load_all(manifest.read_text())
        if doc
    ]
    # registered before it starts: its rotator waits to have injected the CA into them
    _kubectl(state, bin_dir, "apply", "-f", "-", stdin=yaml.safe_dump_all(configurations))
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "webhook": {"host": "127.0.0.1", "port": port, "certDir": str(certs)},
        "internalCertManagement": {
            "enable": True,
            "webhookServiceName": KUEUE_SERVICE,
            "webhookSecretName": KUEUE_SECRET,
        },
        **LOCAL_MANAGER,
        "visibilityServer": {"bindAddress": "127.0.0.1", "bindPort": visibility_port},
        "managedJobsNamespaceSelector": {"matchLabels": KUEUE_MANAGED},
        "integrations": {"frameworks": list(KUEUE_FRAMEWORKS)},
    }
    (directory / "kueue.yaml").write_text(yaml.safe_dump(config))
    state.pids[KUEUE] = _start(KUEUE, _arguments(state, bin_dir)[KUEUE], directory / "logs")
    _wait(f"{KUEUE}'s webhook server", functools.partial(_listening, port), state)
    visibility = _kueue_visibility_api(visibility_port)
    _kubectl(state, bin_dir, "apply", "-f", "-", stdin=yaml.safe_dump_all(visibility))
    _wait(
        f"{KUEUE}'s visibility API",
        lambda: _get(f"{state.server}/apis/{VISIBILITY_GROUP}/v1beta2", state)[0] == 200,
        state,
    )
    _save(directory.parent, state)


VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"


def _kueue_visibility_api(port: int) -> list[dict[str, Any]]:
    """Kueue's visibility APIService, served by its visibility server on loopback `port`."""
    service = "visibility-server"
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": service, "namespace": KUEUE_NAMESPACE},
            "spec": {"type": "ExternalName", "externalName": "localhost"},
        },
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": f"v1beta2.{VISIBILITY_GROUP}"},
            "spec": {
                "group": VISIBILITY_GROUP,
                "version": "v1beta2",
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
                "insecureSkipTLSVerify": True,
                "service": {"name": service, "namespace": KUEUE_NAMESPACE, "port": port},
            },
        },
    ]


def _kueue_certificates(certs: Path) -> dict[str, str]:
    """A CA and a serving certificate as Kueue's rotator keeps them (the CA named `kueue-ca`, the
    server its Service's DNS name, both valid past its 90-day look-ahead), the server's also for
    127.0.0.1; written to `certs` as a mounted Secret would be. The Secret's data."""
    ca_key, key = _key(), _key()
    ca = _certificate("kueue-ca", ca_key, names=[x509.DNSName("kueue-ca")], days=365)
    names = [
        x509.DNSName(f"{KUEUE_SERVICE}.{KUEUE_NAMESPACE}.svc"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    server = _certificate(KUEUE_SERVICE, key, names=names, issuer=(ca, ca_key), days=365)
    files = {
        "ca.crt": _pem_certificate(ca),
        "ca.key": _pem_key(ca_key),
        "tls.crt": _pem_certificate(server),
        "tls.key": _pem_key(key),
    }
    certs.mkdir(parents=True, exist_ok=True)
    for name in ("tls.crt", "tls.key"):
        (certs / name).write_bytes(files[name])
    return {name: base64.b64encode(data).decode() for name, data in files.items()}


def _kueue_crds(folder: Path, port: int, ca: str) -> str:
    """Kueue's CRDs as its kustomization makes them: those it patches with a conversion webhook
    calling it, here by URL on loopback."""
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    conversions = {}
    for patch in kustomization["patches"]:
        doc = yaml.safe_load((folder / patch["path"]).read_text())
        webhook = doc["spec"]["conversion"]["webhook"]
        client = {
            "url": f"https://127.0.0.1:{port}{webhook['clientConfig']['service']['path']}",
            "caBundle": ca,
        }
        conversions[doc["metadata"]["name"]] = {
            "strategy": "Webhook",
            "webhook": {**webhook, "clientConfig": client},
        }
    crds = [yaml.safe_load((folder / path).read_text()) for path in kustomization["resources"]]
    for crd in crds:
        if crd["metadata"]["name"] in conversions:
            crd["spec"]["conversion"] = conversions[crd["metadata"]["name"]]
    return yaml.safe_dump_all(crds)


def _module_dir(tools: str, module: str) -> Path:
    """`module`'s folder in the Go module cache at the version tools/<tools>/go.mod pins (built from
    there by tools/build.sh, so already downloaded)."""
    done = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", module],
        cwd=BUILD.parent / tools,
        env={**os.environ, "GOFLAGS": "-mod=readonly", "GOWORK": "off"},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return Path(done.stdout.strip())


def _webhooks_by_url(
    configuration: dict[str, Any], prefix: str, port: int, ca: str, pods: dict[str, Any] | None = None
) -> dict[str, Any]:
    """An upstream webhook configuration calling the controller on loopback instead of its Service.
    Webhooks on pods (and on their owners in POD_OWNERS) only for the namespaces the selector `pods`
    picks, and without one none: every pod's create would then wait on a test's controller."""
    webhooks = []
    for webhook in configuration["webhooks"]:
        scoped: dict[str, Any] = {}
        if any(POD_OWNERS & set(rule["resources"]) for rule in webhook["rules"]):
            if pods is None:
                continue
            scoped = {"namespaceSelector": pods}
        path = webhook["clientConfig"]["service"]["path"]
        client = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca}
        webhooks.append({**webhook, **scoped, "clientConfig": client})
    metadata = {"name": prefix + configuration["metadata"]["name"]}
    return {**configuration, "metadata": metadata, "webhooks": webhooks}


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


def compact_etcd(state: State) -> int:
    """Compact etcd's history up to now (its JSON gateway): older resource versions are gone, so a
    watch resumed from one gets 410 Gone. The revision compacted to."""

    def call(path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            f"{state.etcd_url}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            result: dict[str, Any] = json.loads(response.read())
            return result

    revision = int(call("/v3/kv/range", {"key": "AA==", "limit": 1})["header"]["revision"])
    call("/v3/kv/compaction", {"revision": revision, "physical": True})
    return revision


def _nodes_ready(state: State) -> bool:
    status, body = _get(f"{state.server}/api/v1/nodes", state)
    if status != 200:
        return False
    ready = [
        node["metadata"]["name"]
        for node in json.loads(body)["items"]
        if any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", []))
    ]
    return len(ready) >= len(NODES)


def _default_account(state: State) -> bool:
    """The service-account controller is up: `default` exists in `default`."""
    return _get(f"{state.server}/api/v1/namespaces/default/serviceaccounts/default", state)[0] == 200


def _save(directory: Path, state: State) -> None:
    (directory / "state.json").write_text(json.dumps(asdict(state), indent=2))


def down(directory: Path = DEFAULT_DIR) -> None:
    """Stop every process of the plane in `directory`; forget its state."""
    state = read_state(directory.resolve())
    if state is None:
        return
    for pid in reversed(list(state.pids.values())):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(psutil.pid_exists(pid) for pid in state.pids.values()):
        _reap(state)
        time.sleep(0.1)
    for pid in state.pids.values():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    _reap(state)
    (directory.resolve() / "state.json").unlink(missing_ok=True)


def _reap(state: State) -> None:
    for pid in state.pids.values():
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.cluster.controlplane", description=__doc__)
    parser.add_argument("action", choices=("up", "down"))
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="where the plane keeps its files")
    args = parser.parse_args(argv)
    if args.action == "down":
        down(args.dir)
        print(f"control plane in {args.dir} stopped")
        return 0
    started = time.perf_counter()
    state = up(args.dir)
    print(f"Kubernetes control plane at {state.server} ({time.perf_counter() - started:.1f} s)")
    print(f"  kubeconfig: {args.dir.resolve() / 'kubeconfig'}   (export KUBECONFIG=...)")
    print(f"  logs:       {Path(state.directory) / 'logs'}")
    print(f"  nodes:      {', '.join(node.name for node in NODES)} ({GPU_RESOURCE}: 2 on gpu-node-1)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
