"""The import contract `make lint` checks with import-linter ([tool.importlinter] in pyproject.toml)
covers every module: each top-level module of `cube_jupyter` is in a layer or named infrastructure, so
a new one cannot slip past both."""

from __future__ import annotations

import tomllib
from pathlib import Path

import cube_jupyter

ROOT = Path(__file__).resolve().parents[2]


def test_every_top_level_module_is_in_a_layer_or_infrastructure() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    contracts = {contract["type"]: contract for contract in config["contracts"]}
    layered = {name.strip() for layer in contracts["layers"]["layers"] for name in layer.split("|")}
    infrastructure = set(contracts["forbidden"]["source_modules"])
    assert not layered & infrastructure
    package = Path(cube_jupyter.__file__).parent
    modules = {
        f"cube_jupyter.{path.stem if path.is_file() else path.name}"
        for path in package.iterdir()
        if (path.suffix == ".py" and path.stem != "__init__") or (path / "__init__.py").is_file()
    }
    assert modules - layered - infrastructure == set()
    # what infrastructure may not import is every layer
    assert set(contracts["forbidden"]["forbidden_modules"]) == layered
    assert contracts["acyclic_siblings"]["ancestors"] == config["root_packages"]
