"""What our own processes do first, before they import anything heavy."""

from __future__ import annotations

import sys


def skip_unused_schema_formats() -> None:
    """Keep `jsonschema` from importing `rfc3987_syntax`, which builds ~35 Lark grammars on import
    (about a second of every cold process that reads a notebook: nbformat validates with jsonschema).

    jsonschema imports it inside `suppress(ImportError)` only to check the "iri" and "iri-reference"
    formats of drafts 7 and later; a None in `sys.modules` makes that import fail, so those two
    format checks are not registered and nothing else changes. nbformat never checks them: its
    schemas (nbformat/v3 and v4/*.json) are draft-04 and use no `format` keyword ("format" appears
    there only as a property name, raw cells' metadata), and its validator passes no format checker.

    Called first by our own entry points (the CLI, pipeline workers, the step runner, job replicas),
    never on import and never in the Jupyter server, where another extension may check IRIs. Without
    effect once jsonschema (or rfc3987_syntax) has been imported.
    """
    sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]


def skip_papermill_remote_io() -> None:
    """Keep papermill from importing a client for every remote store it can read notebooks from
    (boto3 for s3://, pyarrow.fs for hdfs://, gcsfs, azure, PyGithub), whichever are installed:
    about 0.2 s of a cold process, in processes that only hand papermill local paths.

    papermill.iorw imports each inside `except ImportError` and puts a handler saying the dependency
    is missing in its place; a None in `sys.modules` makes those imports fail. Only for the pipeline
    worker, which runs no user code and reads no parquet in-process (the steps' kernels do): there,
    blocking `pyarrow.fs` cannot break anyone's import of it. Called before papermill is imported.
    """
    for name in ("papermill.s3", "papermill.adl", "papermill.abs", "gcsfs", "pyarrow.fs", "github"):
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]


def skip_schema_format_libraries() -> None:
    """In the CLI, keep jsonschema from importing any optional library it checks formats with
    (isoduration pulls in arrow and dateutil; webcolors, uri_template, jsonpointer and the rest):
    nbformat checks no format, and the CLI process runs no one else's code that could. About 0.05 s
    of every command that reads a notebook. The same None-in-`sys.modules` as above."""
    skip_unused_schema_formats()
    for name in (
        "isoduration",
        "webcolors",
        "uri_template",
        "jsonpointer",
        "fqdn",
        "rfc3339_validator",
        "rfc3986_validator",
        "rfc3987",
    ):
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]
