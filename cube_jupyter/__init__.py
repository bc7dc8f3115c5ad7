"""cube-jupyter: a JupyterLab workbench for machine-learning teams, on one machine or on Kubernetes."""

__version__ = "0.1.0"


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """Where `jupyter labextension develop` finds the built frontend."""
    return [{"src": "labextension", "dest": "cube-jupyter"}]
