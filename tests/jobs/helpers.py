"""Settings for renderer tests, built from a traitlets Config the way an admin's file sets them."""

from __future__ import annotations

import json
import re
from typing import Any

from traitlets.config import Config

from cube_jupyter.config import load_settings
from cube_jupyter.jobs.config import JobSettings


def make_config(**sections: dict[str, Any]) -> JobSettings:
    """The jobs feature's settings (which carry the workbench-wide ones) from config `sections`."""
    config = Config()
    for section, values in sections.items():
        for key, value in values.items():
            setattr(config[section], key, value)
    return load_settings(config).jobs


def substitute_trial_parameters(obj: dict[str, Any], value: str = "1") -> dict[str, Any]:
    """A trial template as Katib would create it: every `${trialParameters.X}` replaced by a value."""
    result: dict[str, Any] = json.loads(re.sub(r"\$\{trialParameters\.\w+\}", value, json.dumps(obj)))
    return result
