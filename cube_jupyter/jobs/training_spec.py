"""The training spec: one description of a distributed job, run by the Kubeflow Training Operator on
the cluster (TFJob/PyTorchJob/XGBoostJob/MPIJob) or as one process per replica on this machine.

Users write it as YAML or a dict:

    name: mnist-ddp
    framework: pytorch
    image: docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime
    replicas: {master: 1, worker: {replicas: 2, resources: {gpu: 1}}}
    script: train.py
    args: [--epochs, "3"]
    resources: {cpu: "2", memory: 8Gi}
    restart_policy: OnFailure

`TrainingSpec.from_dict(raw, user=...)` checks it once and raises InvalidInput naming the dotted field
(`replicas.worker`, `resources.gpu`); `to_dict()` gives back the normalized form, which parses to the
same spec.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast

from cube_jupyter import fields as f
from cube_jupyter.errors import InvalidInput
from cube_jupyter.jobs.fields import function_target, job_name, package_uri, queue_choice
from cube_jupyter.jobs.resources import ResourceSpec
from cube_jupyter.names import validate_dns_label

FRAMEWORK_ROLES: dict[str, tuple[str, ...]] = {
    "pytorch": ("Master", "Worker"),
    "tensorflow": ("Chief", "PS", "Worker", "Evaluator"),
    "xgboost": ("Master", "Worker"),
    "mpi": ("Launcher", "Worker"),
}
FRAMEWORKS: tuple[str, ...] = tuple(FRAMEWORK_ROLES)
# Env the operators set on every replica (Kubeflow Trainer v2's runtimes too: torchrun's PET_*, DMLC_*):
# a user value would be overwritten or would break the job.
FRAMEWORK_ENV: dict[str, tuple[str, ...]] = {
    "pytorch": (
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "RANK",
        "PET_NNODES",
        "PET_NPROC_PER_NODE",
        "PET_NODE_RANK",
        "PET_MASTER_ADDR",
        "PET_MASTER_PORT",
    ),
    "tensorflow": ("TF_CONFIG",),
    "xgboost": (
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "RANK",
        "WORKER_ADDRS",
        "WORKER_PORT",
        "DMLC_TRACKER_URI",
        "DMLC_TRACKER_PORT",
        "DMLC_TASK_ID",
        "DMLC_NUM_WORKER",
    ),
    "mpi": ("OMPI_MCA_plm_rsh_agent", "OMPI_MCA_orte_default_hostfile", "K_MPI_JOB_ROLE"),
}
RESTART_POLICIES = ("Never", "OnFailure", "Always", "ExitCode")
CLEAN_POD_POLICIES = ("None", "Running", "All")
CODE_KINDS = ("command", "script", "notebook", "function")
WORKSPACE_VOLUME = "workspace"  # the volume name the user's workspace PVC is mounted as

CodeKind = Literal["command", "script", "notebook", "function"]
RestartPolicy = Literal["Never", "OnFailure", "Always", "ExitCode"]
CleanPodPolicy = Literal["None", "Running", "All"]

TRAINING_KEYS = (
    "name",
    "framework",
    "image",
    "replicas",
    *CODE_KINDS,
    "package",
    "args",
    "resources",
    "env",
    "volumes",
    "workspace",
    "restart_policy",
    "backoff_limit",
    "clean_pod_policy",
    "ttl_seconds_after_finished",
    "active_deadline_seconds",
    "slots_per_worker",
    "queue",
    "priority",
)
ROLE_KEYS = ("replicas", "resources", "image", "command", "env")
VOLUME_KEYS = ("name", "mount_path", "pvc", "config_map", "secret", "empty_dir")
VOLUME_SOURCES = ("pvc", "config_map", "secret", "empty_dir")


@dataclass(frozen=True)
class RoleSpec:
    """One replica type (the operator's `replicaSpecs` key) and how many replicas it has."""

    role: str
    replicas: int
    resources: ResourceSpec
    image: str | None = None  # None: the job's image
    command: tuple[str, ...] | None = None  # None: the command the job's code gives
    env: dict[str, str] = field(default_factory=dict)  # on top of the job's env

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"replicas": self.replicas}
        if self.resources.to_dict():
            body["resources"] = self.resources.to_dict()
        if self.image is not None:
            body["image"] = self.image
        if self.command is not None:
            body["command"] = list(self.command)
        if self.env:
            body["env"] = dict(self.env)
        return body


@dataclass(frozen=True)
class CodeSpec:
    """What each replica runs: a command, or a script, notebook or `module:function`, optionally
    shipped as a package (an artifact-store URI or ConfigMap) instead of baked into the image."""

    kind: CodeKind
    command: tuple[str, ...] | None = None  # kind "command"
    path: str | None = None  # kind "script" / "notebook"
    function: str | None = None  # kind "function": "module:function"
    package_uri: str | None = None
    args: tuple[str, ...] = ()

    @property
    def target(self) -> str:
        """The script or notebook path, the function, or the command's first word."""
        if self.kind == "function":
            return cast(str, self.function)
        if self.kind == "command":
            return cast(tuple[str, ...], self.command)[0]
        return cast(str, self.path)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> CodeSpec:
        given = [kind for kind in CODE_KINDS if raw.get(kind) is not None]
        if len(given) != 1:
            which = f"got {given}" if given else "got none"
            raise InvalidInput(
                f"give exactly one of command, script, notebook or function to run ({which})",
                field=given[1] if len(given) > 1 else "command",
            )
        kind = cast(CodeKind, given[0])
        args = f.argv(raw["args"], "args") if raw.get("args") is not None else ()
        package = package_uri(raw.get("package"), "package")
        if package is not None and kind == "command":
            raise InvalidInput("package ships a script, notebook or function; not a command", field="package")
        if kind == "command":
            command = f.argv(raw["command"], "command")
            if not command:
                raise InvalidInput("command must not be empty", field="command")
            return cls(kind=kind, command=command, args=args)
        if kind == "function":
            return cls(
                kind=kind,
                function=function_target(raw["function"], "function"),
                package_uri=package,
                args=args,
            )
        suffix = ".ipynb" if kind == "notebook" else None
        return cls(
            kind=kind, path=f.relative_path(raw[kind], kind, suffix=suffix), package_uri=package, args=args
        )

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if self.kind == "command":
            body["command"] = list(self.command or ())
        elif self.kind == "function":
            body["function"] = self.function
        else:
            body[self.kind] = self.path
        if self.package_uri is not None:
            body["package"] = self.package_uri
        if self.args:
            body["args"] = list(self.args)
        return body


@dataclass(frozen=True)
class VolumeSpec:
    """A volume mounted into every replica: a PVC, ConfigMap, Secret or an emptyDir."""

    name: str
    mount_path: str
    pvc: str | None = None
    config_map: str | None = None
    secret: str | None = None
    empty_dir: bool = False

    @classmethod
    def from_dict(cls, raw: object, where: str) -> VolumeSpec:
        body = f.mapping(raw, where)
        f.reject_unknown(body, VOLUME_KEYS, where)
        name = validate_dns_label(body.get("name"), f.join(where, "name"))
        if name == WORKSPACE_VOLUME:
            raise InvalidInput(
                f"{where}.name 'workspace' is reserved: set `workspace: true` to mount the workspace PVC",
                field=f.join(where, "name"),
            )
        mount_path = f.absolute_path(body.get("mount_path"), f.join(where, "mount_path"))
        sources = [key for key in VOLUME_SOURCES if body.get(key) not in (None, False)]
        if len(sources) != 1:
            raise InvalidInput(
                f"{where} needs exactly one of {', '.join(VOLUME_SOURCES)}, got {sources or 'none'}",
                field=f.join(where, sources[1] if len(sources) > 1 else "pvc"),
            )
        source = sources[0]
        if source == "empty_dir":
            f.boolean(body["empty_dir"], f.join(where, "empty_dir"))
            return cls(name=name, mount_path=mount_path, empty_dir=True)
        ref = validate_dns_label(body[source], f.join(where, source), 253)
        return cls(
            name=name,
            mount_path=mount_path,
            pvc=ref if source == "pvc" else None,
            config_map=ref if source == "config_map" else None,
            secret=ref if source == "secret" else None,
        )

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"name": self.name, "mount_path": self.mount_path}
        for key in ("pvc", "config_map", "secret"):
            if getattr(self, key) is not None:
                body[key] = getattr(self, key)
        if self.empty_dir:
            body["empty_dir"] = True
        return body


@dataclass(frozen=True)
class TrainingSpec:
    """A validated training job: who runs it, which framework, its replicas per role and its code."""

    name: str
    user: str
    framework: str
    roles: tuple[RoleSpec, ...]
    code: CodeSpec
    image: str | None = None  # None: the admin's default image for the framework
    env: dict[str, str] = field(default_factory=dict)
    volumes: tuple[VolumeSpec, ...] = ()
    workspace: bool = False
    restart_policy: RestartPolicy = "Never"
    backoff_limit: int | None = None
    clean_pod_policy: CleanPodPolicy = "Running"
    ttl_seconds_after_finished: int | None = None  # None: the admin's default
    active_deadline_seconds: int | None = None
    slots_per_worker: int | None = None  # mpi only (default 1)
    queue: str | None = None  # the user's Kueue LocalQueue (CubeQueues.user_queues), else the admin's
    priority: str | None = None  # the user's WorkloadPriorityClass, else the admin's

    @property
    def total_gpus(self) -> int:
        return sum(role.replicas * role.resources.gpu for role in self.roles)

    def role(self, name: str) -> RoleSpec | None:
        """The role called `name` (any case), or None when the job has no replicas of it."""
        return next((r for r in self.roles if r.role.lower() == name.lower()), None)

    def replicas_of(self, name: str) -> int:
        role = self.role(name)
        return role.replicas if role else 0

    @classmethod
    def from_dict(cls, raw: object, user: str, *, prefix: str = "") -> TrainingSpec:
        """Parse a user's spec. `prefix` names where it sits in a larger spec (a tuning trial)."""
        try:
            return cls._parse(raw, user)
        except InvalidInput as exc:
            if not prefix:
                raise
            # The spec itself ("spec must be a mapping") is the prefix's own value.
            where = prefix if exc.field in (None, "spec") else f.join(prefix, exc.field)
            raise InvalidInput(f"{prefix}: {exc.message}", field=where) from None

    @classmethod
    def _parse(cls, raw: object, user: str) -> TrainingSpec:
        body = f.mapping(raw, "spec")
        f.reject_unknown(body, TRAINING_KEYS, "")
        user = f.string(user, "user")
        name = job_name(body.get("name"))
        framework = body.get("framework")
        if not isinstance(framework, str) or framework.lower() not in FRAMEWORK_ROLES:
            raise InvalidInput(
                f"framework {framework!r} is not supported; choose one of: {', '.join(FRAMEWORKS)}",
                field="framework",
            )
        framework = framework.lower()
        resources = ResourceSpec.from_dict(body.get("resources"), "resources")
        reserved = FRAMEWORK_ENV[framework]
        slots = body.get("slots_per_worker")
        if slots is not None and framework != "mpi":
            raise InvalidInput("slots_per_worker applies only to framework mpi", field="slots_per_worker")
        if framework == "mpi":
            slots = f.integer(1 if slots is None else slots, "slots_per_worker", minimum=1)
        volumes = _volumes(body.get("volumes"))
        queue, priority = queue_choice(body)
        return cls(
            name=name,
            user=user,
            framework=framework,
            roles=_roles(framework, body.get("replicas"), resources, reserved),
            code=CodeSpec.from_dict(body),
            image=f.optional_image(body.get("image"), "image"),
            env=f.env(body.get("env") or {}, "env", reserved),
            volumes=volumes,
            workspace=f.boolean(body.get("workspace", False), "workspace"),
            restart_policy=cast(
                RestartPolicy,
                f.choice(body.get("restart_policy", "Never"), "restart_policy", RESTART_POLICIES),
            ),
            backoff_limit=f.optional_integer(body.get("backoff_limit"), "backoff_limit", minimum=0),
            clean_pod_policy=cast(
                CleanPodPolicy,
                f.choice(body.get("clean_pod_policy", "Running"), "clean_pod_policy", CLEAN_POD_POLICIES),
            ),
            ttl_seconds_after_finished=f.optional_integer(
                body.get("ttl_seconds_after_finished"), "ttl_seconds_after_finished", minimum=0
            ),
            active_deadline_seconds=f.optional_integer(
                body.get("active_deadline_seconds"), "active_deadline_seconds", minimum=1
            ),
            slots_per_worker=slots,
            queue=queue,
            priority=priority,
        )

    def to_dict(self) -> dict[str, Any]:
        """The normalized spec in the raw format (role resources resolved): `from_dict` of it is equal."""
        body: dict[str, Any] = {"name": self.name, "framework": self.framework}
        if self.image is not None:
            body["image"] = self.image
        body["replicas"] = {role.role.lower(): role.to_dict() for role in self.roles}
        body.update(self.code.to_dict())
        if self.env:
            body["env"] = dict(self.env)
        if self.volumes:
            body["volumes"] = [v.to_dict() for v in self.volumes]
        body["workspace"] = self.workspace
        body["restart_policy"] = self.restart_policy
        body["clean_pod_policy"] = self.clean_pod_policy
        for key in (
            "backoff_limit",
            "ttl_seconds_after_finished",
            "active_deadline_seconds",
            "slots_per_worker",
            "queue",
            "priority",
        ):
            if getattr(self, key) is not None:
                body[key] = getattr(self, key)
        return body


def _roles(
    framework: str, raw: object, default_resources: ResourceSpec, reserved: tuple[str, ...]
) -> tuple[RoleSpec, ...]:
    known = FRAMEWORK_ROLES[framework]
    body = f.mapping(raw if raw is not None else {}, "replicas")
    parsed: dict[str, RoleSpec] = {}
    for key, value in body.items():
        role = next((r for r in known if r.lower() == key.lower()), None)
        where = f"replicas.{key.lower()}"
        if role is None:
            raise InvalidInput(
                f"replicas.{key}: {framework} jobs have roles {', '.join(r.lower() for r in known)}",
                field=f"replicas.{key}",
            )
        if role in parsed:
            raise InvalidInput(f"replicas.{key}: role {role} is given twice", field=where)
        parsed[role] = _role(role, value, where, default_resources, reserved)
    _check_counts(framework, parsed, default_resources)
    return tuple(parsed[r] for r in known if r in parsed and parsed[r].replicas > 0)


def _role(
    role: str, raw: object, where: str, default_resources: ResourceSpec, reserved: tuple[str, ...]
) -> RoleSpec:
    if isinstance(raw, int) and not isinstance(raw, bool):
        return RoleSpec(role=role, replicas=f.integer(raw, where, minimum=0), resources=default_resources)
    body = f.mapping(raw, where)
    f.reject_unknown(body, ROLE_KEYS, where)
    command = None
    if body.get("command") is not None:
        command = f.argv(body["command"], f.join(where, "command"))
        if not command:
            raise InvalidInput(f"{where}.command must not be empty", field=f.join(where, "command"))
    return RoleSpec(
        role=role,
        replicas=f.integer(body.get("replicas", 1), f.join(where, "replicas"), minimum=0),
        resources=ResourceSpec.from_dict(
            body.get("resources"), f.join(where, "resources"), default_resources
        ),
        image=f.optional_image(body.get("image"), f.join(where, "image")),
        command=command,
        env=f.env(body.get("env") or {}, f.join(where, "env"), reserved),
    )


def _check_counts(framework: str, roles: dict[str, RoleSpec], default_resources: ResourceSpec) -> None:
    """The operators' rules on replica counts, checked here so the error names the field."""

    def count(role: str) -> int:
        return roles[role].replicas if role in roles else 0

    def at_most_one(role: str) -> None:
        if count(role) > 1:
            raise InvalidInput(
                f"replicas.{role.lower()}: a {framework} job has at most one {role}, got {count(role)}",
                field=f"replicas.{role.lower()}",
            )

    def exactly_one(role: str) -> None:
        if role not in roles:
            # MPI's launcher only runs mpirun: a default one asks for no GPU.
            gpu = 0 if role == "Launcher" else default_resources.gpu
            roles[role] = RoleSpec(role=role, replicas=1, resources=replace(default_resources, gpu=gpu))
        elif count(role) != 1:
            raise InvalidInput(
                f"replicas.{role.lower()}: a {framework} job has exactly one {role}, got {count(role)}",
                field=f"replicas.{role.lower()}",
            )

    def needs_workers(unless: str | None) -> None:
        if count("Worker") == 0 and (unless is None or count(unless) == 0):
            alone = f" (or a {unless})" if unless else ""
            raise InvalidInput(
                f"replicas.worker: a {framework} job needs at least one worker{alone}, got 0",
                field="replicas.worker",
            )

    if framework == "pytorch":
        at_most_one("Master")
        needs_workers("Master")
    elif framework == "tensorflow":
        at_most_one("Chief")
        at_most_one("Evaluator")
        needs_workers("Chief")
    elif framework == "xgboost":
        exactly_one("Master")
    else:
        exactly_one("Launcher")
        needs_workers(None)


def _volumes(raw: object) -> tuple[VolumeSpec, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise InvalidInput(f"volumes must be a list, got {raw!r}", field="volumes")
    volumes = tuple(VolumeSpec.from_dict(item, f"volumes[{i}]") for i, item in enumerate(raw))
    for key in ("name", "mount_path"):
        seen: set[str] = set()
        for i, volume in enumerate(volumes):
            value = getattr(volume, key)
            if value in seen:
                raise InvalidInput(f"volumes[{i}].{key} {value!r} is used twice", field=f"volumes[{i}].{key}")
            seen.add(value)
    return volumes
