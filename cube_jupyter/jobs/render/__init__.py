"""Renderers: pure functions `spec + config + settings -> list[dict]` giving the exact Kubernetes objects
the kubernetes backend creates (and `cube-jupyter train|tune|serve render` prints)."""

from cube_jupyter.jobs.render.serving import render_serving
from cube_jupyter.jobs.render.training import render_training
from cube_jupyter.jobs.render.tuning import render_tuning

__all__ = ["render_serving", "render_training", "render_tuning"]
