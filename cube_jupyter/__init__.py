"""cube-jupyter: a JupyterLab workbench for machine-learning teams, on one machine or on Kubernetes."""

from cube_jupyter._version import __version__

__all__ = ["__version__"]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """Where `jupyter labextension develop` finds the built frontend."""
    return [{"src": "labextension", "dest": "cube-jupyter"}]


# The notebook API, imported on first use so `import cube_jupyter` stays light in every kernel.
_JOB_API = ("train", "deploy", "predict")


def __getattr__(name: str) -> object:
    if name in _JOB_API:
        from cube_jupyter.jobs import api

        return getattr(api, name)
    raise AttributeError(f"module 'cube_jupyter' has no attribute {name!r}")
