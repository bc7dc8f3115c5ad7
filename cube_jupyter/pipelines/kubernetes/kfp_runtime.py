"""The runtime for a KFP step whose image lacks cube-jupyter, KFP's way: KFP has no init containers
(Argo's injection, `kube.pods.runtime_injection`), but its launcher downloads a task's input
artifacts before the container starts. So the runtime image's wheelhouse, uploaded once to the object
store (`python -m cube_jupyter.wheelhouse upload`, at `CubePipelines.kfp_runtime_wheels`), is
imported into the pipeline (`dsl.importer`) and handed to each such step as the input artifact
`RUNTIME_INPUT`; the step's container runs `BOOTSTRAP` first, which pip-installs the wheels for the
image's Python into a fresh site dir (as the init container does: `wheelhouse.install_argv`), puts it
first on the paths (`wheelhouse.runtime_paths`), then execs the runner.

The script is a constant: the wheels' path and the runner's command line reach it only as its
arguments ("$@"), never as shell text.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

from cube_jupyter.wheelhouse import install_argv, runtime_paths

RUNTIME_INPUT = "cube_runtime"  # the step's input artifact: the wheelhouse, a directory
SCRIPT_NAME = "cube-runtime"  # the script's $0, what `ps` and sh's errors show
# The script's own variables, in the words built from `install_argv` and `runtime_paths`.
_VARIABLE = re.compile(r"(\$\{(?:wheels|site)\})")


def _word(token: str) -> str:
    """`token` as one shell word: its literal parts shlex-quoted, its ${wheels}/${site} expanded."""
    return "".join(
        f'"{part}"' if _VARIABLE.fullmatch(part) else shlex.quote(part)
        for part in _VARIABLE.split(token)
        if part
    )


def _bootstrap() -> str:
    install = " ".join(_word(token) for token in install_argv("${wheels}", "${site}"))
    exports = [
        f'export {name}={_word(path)}"${{{name}:+:${{{name}}}}}"'
        for name, path in runtime_paths("${site}").items()
    ]
    return "\n".join(
        [
            "set -eu",
            'wheels="$1"',
            "shift",
            'site="$(mktemp -d "${TMPDIR:-/tmp}/cube-runtime.XXXXXX")"',
            f"{install} >&2",  # stdout is the runner's (its JSON result)
            *exports,
            'exec "$@"',
        ]
    )


# sh -c BOOTSTRAP cube-runtime WHEELS COMMAND...: install the runtime, then run COMMAND with it.
BOOTSTRAP = _bootstrap()


def bootstrap_command(wheels: str, command: Sequence[str]) -> list[str]:
    """The container command running `command` (the runner's, its args follow) after installing the
    runtime from `wheels` (the input artifact's path placeholder)."""
    return ["sh", "-c", BOOTSTRAP, SCRIPT_NAME, wheels, *command]
