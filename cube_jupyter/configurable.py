"""The base of every Cube* Configurable, and the traits more than one of them shares.

Every trait is checked by a traitlets `@validate` as its config loads (`checked`, below): a bad value
raises `InvalidTrait`, a TraitError naming the field (`CubeJobs.gpu_tolerations[0].operator`).
`load_settings` loads each Configurable once at startup (`CubeConfigurable.load`), which turns that
error into a ConfigError, so the server never starts with a value it would refuse later.

A trait several classes share is declared once, in a base class here. traitlets reads a class's own
config section and its bases', so `c.CubeJobs.gpu_tolerations` sets jobs only, while
`c.CubeWorkload.gpu_tolerations` sets jobs and pipeline steps alike.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Self
from urllib.parse import urlsplit

from traitlets import CaselessStrEnum, Dict, List, TraitError, TraitType, Unicode, default, validate
from traitlets.config import Config, Configurable

from cube_jupyter import fields
from cube_jupyter.errors import ConfigError, CubeError, InvalidInput
from cube_jupyter.images import REGISTRY, RUNTIME_IMAGE, image_repository
from cube_jupyter.names import MAX_SLUG_LENGTH, NAMESPACE_FIELDS, validate_dns_label

# CubeWorkload.runtime_injection: when pods whose image lacks cube-jupyter get it from the wheelhouse.
RUNTIME_INJECTION = ("auto", "always", "never")
# What a trait's type check (not one of ours) says: "The 'backend' trait of a CubeWorkbench instance...".
_TRAIT_NAMED = re.compile(r"'(\w+)' trait of")


class InvalidTrait(TraitError):
    """A value a `checked` validator refused; `field` names it, down to the item at fault."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


# A check: `check(value, field)` raises InvalidInput, or returns the value to keep (a normalized copy);
# None keeps the value as given. `field` is `Class.trait`.
Check = Callable[[Any, str], Any]


def checked(check: Check, *names: str) -> Any:
    """traitlets `@validate(*names)` by `check`, its InvalidInput raised as `InvalidTrait`:

        _gpu_tolerations_ok = checked(fields.tolerations, "gpu_tolerations")

    A subclass replaces a base's validator by assigning the same attribute name."""

    def check_proposal(owner: Configurable, proposal: Any) -> Any:
        value = proposal["value"]
        field = f"{type(owner).__name__}.{proposal['trait'].name}"
        try:
            kept = check(value, field)
        except InvalidInput as exc:
            raise InvalidTrait(exc.message, exc.field or field) from None
        return value if kept is None else kept

    return validate(*names)(check_proposal)


class CubeConfigurable(Configurable):
    """Base of every Cube* Configurable: loaded once, each trait set checked by its validator.

    Every trait a subclass declares is an admin setting: it is tagged `config=True` here, once, so
    declarations need no `.tag(config=True)` of their own."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for value in vars(cls).values():
            if isinstance(value, TraitType):
                value.tag(config=True)

    def __setattr__(self, name: str, value: Any) -> None:
        if self.__dict__.get("_frozen") and self.has_trait(name):
            raise AttributeError(
                f"{type(self).__name__}.{name} is read-only: settings are frozen once loaded "
                "(set it in the config instead)"
            )
        super().__setattr__(name, value)

    def freeze(self) -> Self:
        """No trait of this instance changes from now on: what was validated at startup is what runs."""
        self._frozen = True
        return self

    @classmethod
    def load(cls, config: Config) -> Self:
        """This Configurable from `config`; a bad value is a ConfigError naming the field."""
        try:
            return cls(config=config)
        except InvalidTrait as exc:
            raise ConfigError(exc.message, field=exc.field) from None
        except TraitError as exc:  # the trait's own type check: a str for an int, not one of an enum
            named = _TRAIT_NAMED.search(str(exc))
            field = f"{cls.__name__}.{named[1]}" if named else cls.__name__
            raise ConfigError(f"{field}: {exc}", field=field) from None


# -- checks shared by several traits ----------------------------------------------------------------


def non_negative(value: float, field: str) -> None:
    if value < 0:
        raise InvalidInput(f"{field} {value!r} must be >= 0", field=field)


def positive(value: float, field: str) -> None:
    if not value > 0:
        raise InvalidInput(f"{field} {value!r} must be > 0", field=field)


def not_empty(value: object, field: str) -> None:
    if not value:
        raise InvalidInput(f"{field} {value!r} must not be empty", field=field)


def optional(check: Check) -> Check:
    """`check` for a trait whose '' (or None) means "not set": that passes, spaces dropped."""

    def check_if_set(value: Any, field: str) -> Any:
        if isinstance(value, str) and not value.strip():
            return ""
        return None if value is None else check(value, field)

    return check_if_set


def dns_name(value: str, field: str) -> None:
    """A Kubernetes object name: a ServiceAccount, a Secret, a StorageClass, a ServingRuntime."""
    validate_dns_label(value, field, 253)


def repositories(value: list[str], field: str) -> list[str]:
    """Image repositories without tag or digest, each maybe ending in '/' (every repository under it)."""
    kept = []
    for i, entry in enumerate(value):
        where = f"{field}[{i}]"
        repository = fields.image_reference(entry, where)
        if image_repository(repository.rstrip("/")) != repository.rstrip("/"):
            raise InvalidInput(
                f"{where} {entry!r} must be an image repository without a tag or digest "
                "(e.g. 'registry.example.com/ml/trainer', or 'registry.example.com/ml/' for all under it)",
                field=where,
            )
        kept.append(repository)
    return kept


def username_template(
    template: str, field: str, max_length: int = 63, fields: tuple[str, ...] = ("username",)
) -> None:
    """`{username}` must give a DNS name for every user: checked with the longest slug a user can
    get, so a template that fits short names but not long ones fails at startup, not at some user's
    create. Other `fields` (`{username_kubeflow}`, which has no longest) are checked with a typical name."""
    named = " or ".join(f"{{{name}}}" for name in fields)
    if not any(f"{{{name}}}" in template for name in fields):
        raise InvalidInput(f"{field} {template!r} must contain {named}", field=field)
    values = {name: "user-example-com" for name in fields} | {"username": "x" * MAX_SLUG_LENGTH}
    try:
        longest = template.format(**values)
    except (KeyError, IndexError, ValueError, AttributeError) as exc:
        raise InvalidInput(
            f"{field} {template!r} is not a valid template: only {named} may be used ({exc!r})",
            field=field,
        ) from None
    try:
        validate_dns_label(longest, field, max_length)
    except InvalidInput as exc:
        raise InvalidInput(
            f"{field} {template!r} does not make a DNS-1123 name for every user: with the longest "
            f"user slug ({MAX_SLUG_LENGTH} characters) it gives {longest!r}: {exc.message}",
            field=field,
        ) from None


def user_namespace_template(template: str, field: str) -> None:
    """A namespace template: `{username}` (escaped, collision-free) or `{username_kubeflow}` (Kubeflow's
    spelling: 'kubeflow-{username_kubeflow}' names user@example.com's namespace as Kubeflow's default
    profile does, 'kubeflow-user-example-com')."""
    username_template(template, field, fields=NAMESPACE_FIELDS)


def is_http_url(url: str, *, path: bool = True) -> bool:
    """An http(s) URL with a host, a valid port and no query (nor, with `path=False`, a path)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        return False
    return (
        parts.scheme in ("http", "https")
        and bool(parts.hostname)
        and not parts.query
        and (path or parts.path in ("", "/"))
    )


def validate_prometheus_url(url: str, field: str, error: type[CubeError] = InvalidInput) -> str:
    """An http(s) base URL with a host and no query, normalized to end in '/'; `error(message,
    field=...)` otherwise (InvalidInput for a trait or a CLI flag)."""
    if not is_http_url(url):
        raise error(
            f"{field} {url!r} must be an http(s) URL of Prometheus, e.g. 'http://prometheus:9090'",
            field=field,
        )
    return url.rstrip("/") + "/"


def prometheus_base_url(value: str, field: str) -> str:
    return validate_prometheus_url(value.strip(), field)


# -- traits several Configurables share ---------------------------------------------------------------


class CubePods(CubeConfigurable):
    """Pods the workbench creates: notebook servers, job replicas, pipeline steps."""

    service_account = Unicode(
        "default-editor",
        help="Service account of the pods: notebook servers (CubeSpawner), training and trial replicas "
        "(CubeJobs), pipeline steps (CubePipelines; Argo's executor needs it to report results, and "
        "Kubeflow profiles' 'default-editor' has the rights). '' uses the namespace's default.",
    )

    _service_account_ok = checked(optional(dns_name), "service_account")


class CubeWorkload(CubePods):
    """Pods that run user code outside a notebook server: job replicas (CubeJobs) and pipeline steps
    (CubePipelines)."""

    runtime_image = Unicode(
        RUNTIME_IMAGE,
        help="cube-jupyter's runtime image (images/runtime) of this version, or your mirror of it: the "
        "default image of replicas, trials and steps, and the image of the init container that hands "
        "its wheelhouse to pods whose image lacks cube-jupyter (see runtime_injection).",
    )
    default_image = Unicode(
        help="Image of job replicas, trials and pipeline steps that name none (a job's framework entry "
        "in CubeJobs.training_images comes first). Defaults to runtime_image. '' uses the default "
        "notebook profile's image (as Kale uses the notebook server's image).",
    )

    @default("default_image")
    def _default_default_image(self) -> str:
        return self.runtime_image

    runtime_injection = CaselessStrEnum(
        list(RUNTIME_INJECTION),
        default_value="auto",
        help="How a replica, trial or step whose image lacks cube-jupyter (e.g. pytorch/pytorch) gets "
        "the runtime, without internet access: init containers copy runtime_image's wheelhouse into a "
        "shared volume and pip-install it there with the image's own Python (CPython 3.11-3.13 with "
        "pip, glibc Linux), and the main container gets it on PYTHONPATH (which replaces a PYTHONPATH "
        "set in the image: set it in the spec's env to keep it). 'auto': for every image but "
        "runtime_image's and those in images_with_runtime; 'always': for every image; 'never': off "
        "(every image must have cube-jupyter installed).",
    )
    images_with_runtime = List(
        Unicode(),
        default_value=[f"{REGISTRY}/"],
        help="Image repositories (no tag) that already have cube-jupyter and its runtime installed, so "
        "runtime_injection 'auto' leaves their pods alone; one ending in '/' covers every repository "
        "under it. runtime_image's repository always counts. The default: cube-jupyter's own images.",
    )
    default_cpu = Unicode("1", help="CPU request and limit of replicas and steps that give none.")
    default_memory = Unicode("2Gi", help="Memory request and limit of replicas and steps that give none.")
    gpu_resource = Unicode(
        "nvidia.com/gpu",
        help="Extended resource a replica's `gpu: N` or a step's `gpu:N` tag asks for "
        "(e.g. 'nvidia.com/gpu', 'amd.com/gpu').",
    )
    gpu_node_selector = Dict(
        {},
        help="nodeSelector added to replicas and steps that ask for GPUs "
        "(e.g. {'nvidia.com/gpu.present': 'true'}).",
    )
    gpu_tolerations = List(
        Dict(),
        default_value=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        help="Tolerations added to replicas and steps that ask for GPUs, so they can land on tainted "
        "GPU nodes.",
    )

    _runtime_image_ok = checked(fields.image_reference, "runtime_image")
    _default_image_ok = checked(optional(fields.image_reference), "default_image")
    _images_with_runtime_ok = checked(repositories, "images_with_runtime")
    _default_resources_ok = checked(fields.quantity, "default_cpu", "default_memory")
    _gpu_resource_ok = checked(fields.extended_resource, "gpu_resource")
    _gpu_node_selector_ok = checked(fields.node_selector, "gpu_node_selector")
    _gpu_tolerations_ok = checked(fields.tolerations, "gpu_tolerations")

    def injects_runtime(self, image: str) -> bool:
        """Whether a pod running `image` gets the runtime from the wheelhouse (runtime_injection)."""
        if self.runtime_injection != "auto":
            return self.runtime_injection == "always"
        repository = image_repository(image)
        carriers = [*self.images_with_runtime, image_repository(self.runtime_image)]
        return not any(
            repository == carrier or (carrier.endswith("/") and repository.startswith(carrier))
            for carrier in carriers
        )


class CubeNamespaces(CubeConfigurable):
    """Where a user's objects go: one Kubernetes namespace per user, named from a template."""

    namespace_template = Unicode(
        "cube-{username}",
        help="Kubernetes namespace of a user's servers, runs and jobs (CubeWorkbench), or of their jobs "
        "alone (CubeJobs, where '', its default, puts them beside the servers, as Kubeflow profiles do); "
        "{username} is "
        "the escaped user name (collision-free), {username_kubeflow} the name as Kubeflow spells it in "
        "profile names: 'kubeflow-{username_kubeflow}' gives user@example.com 'kubeflow-user-example-com'.",
    )

    _namespace_template_ok = checked(user_namespace_template, "namespace_template")


class CubePrometheus(CubeConfigurable):
    """Where GPU metrics by pod come from on the cluster."""

    prometheus_url = Unicode(
        "",
        help="Prometheus that scrapes the DCGM exporter, for GPU use by pod on the kubernetes backend "
        "(e.g. 'http://prometheus.monitoring:9090'); '' reads this machine's GPUs through NVML. "
        "CubeGPU.prometheus_url, when set, wins over CubeWorkbench.prometheus_url.",
    )

    _prometheus_url_ok = checked(optional(prometheus_base_url), "prometheus_url")
