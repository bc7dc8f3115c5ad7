"""Job specs as YAML files: the one place that reads and writes them, for the CLI
(`cube-jupyter train|tune|serve run FILE`) and the Jobs panel (a file opened into its form, a form
saved as a file). A file says which kind it is by its keys; the launch checks the rest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cube_jupyter.errors import InvalidInput
from cube_jupyter.fields import mapping, reject_unknown
from cube_jupyter.jobs.model import JobKind
from cube_jupyter.jobs.serving_spec import SERVING_KEYS
from cube_jupyter.jobs.specs import parse_kind
from cube_jupyter.jobs.training_spec import TRAINING_KEYS
from cube_jupyter.jobs.tuning_spec import TUNING_KEYS

KEYS: dict[JobKind, tuple[str, ...]] = {
    "training": TRAINING_KEYS,
    "tuning": TUNING_KEYS,
    "serving": SERVING_KEYS,
}
# The keys only one kind has, in the order they are looked for: a tuning spec's trial may itself
# hold a training spec, so its own keys decide first.
MARKS: tuple[tuple[JobKind, frozenset[str]], ...] = (
    ("tuning", frozenset({"objective", "parameters", "trial"})),
    ("serving", frozenset({"model_format", "storage_uri"})),
    ("training", frozenset({"framework", "replicas"})),
)
# How the CLI runs a saved file of each kind (the comment on top of a rendered spec).
COMMANDS: dict[JobKind, str] = {"training": "train", "tuning": "tune", "serving": "serve"}


def read_spec_file(path: str | Path, field: str = "FILE") -> Any:
    """The YAML document in `path`; InvalidInput naming `field` when it cannot be read or parsed."""
    import yaml

    file = Path(path)
    if not file.is_file():
        raise InvalidInput(f"spec file {str(path)!r} does not exist", field=field)
    try:
        documents = [d for d in yaml.safe_load_all(file.read_text(encoding="utf-8")) if d is not None]
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"spec file {str(path)!r} is not valid YAML: {exc}", field=field) from None
    if len(documents) != 1:
        raise InvalidInput(
            f"spec file {str(path)!r} must hold one YAML document, got {len(documents)}", field=field
        )
    return documents[0]


def spec_kind(raw: object, field: str = "spec") -> JobKind:
    """Which kind of job `raw` describes, from the keys only that kind has; InvalidInput naming
    `field` when it is no job spec (or a key is no key of its kind)."""
    if not isinstance(raw, dict):
        raise InvalidInput(f"{field} is not a job spec: a job spec is a mapping of fields", field=field)
    kind = next((kind for kind, marks in MARKS if marks & set(raw)), None)
    if kind is None:
        raise InvalidInput(
            f"{field} is not a job spec: it has none of the fields of a training (framework, replicas), "
            "tuning (objective, parameters, trial) or serving (model_format, storage_uri) spec",
            field=field,
        )
    reject_unknown(mapping(raw, field), KEYS[kind], "")
    return kind


def render_spec(body: object) -> dict[str, str]:
    """{kind, spec} as {kind, yaml}: the YAML a spec file holds, with how the CLI runs it on top.
    The spec is written as given (a form's draft may still be incomplete); the launch checks it."""
    import yaml

    request = mapping(body, "body")
    unknown = sorted(set(request) - {"kind", "spec"})
    if unknown:
        raise InvalidInput(f"unknown field {unknown[0]!r}; send {{kind, spec}}", field=unknown[0])
    kind = parse_kind(request.get("kind"))
    spec = mapping(request.get("spec"), "spec")
    reject_unknown(spec, KEYS[kind], "")
    header = (
        f"# A {kind} job. Run it from the workbench's root: cube-jupyter {COMMANDS[kind]} run FILE --wait\n"
    )
    text = yaml.safe_dump(spec, sort_keys=False, default_flow_style=False, allow_unicode=True)
    return {"kind": kind, "yaml": header + text}
