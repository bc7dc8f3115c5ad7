"""The images cube-jupyter publishes (built from `images/` by .github/workflows/images.yml), named
here once: the config defaults point at the ones of this package's version, so a default never names
an image that lacks the package.

- `workbench`: the central workbench (deploy/);
- `notebook`: docker-stacks' scipy-notebook with cube-jupyter and its "Python 3 (cube-jupyter)" kernel,
  the default notebook server profile's image;
- `notebook-gpu`: the same on docker-stacks' CUDA PyTorch image;
- `runtime`: slim, for pipeline steps, job replicas and trials, with the wheelhouse that gives any
  other image the runtime (CubeWorkload.runtime_injection).
"""

from __future__ import annotations

from cube_jupyter._version import __version__

REGISTRY = "ghcr.io/cube-jupyter"
IMAGE_NAMES = ("workbench", "notebook", "notebook-gpu", "runtime")


def image(name: str, version: str = __version__) -> str:
    """The published reference of image `name` (one of IMAGE_NAMES), tagged with the package version."""
    if name not in IMAGE_NAMES:
        raise ValueError(f"{name!r} is not one of cube-jupyter's images: {', '.join(IMAGE_NAMES)}")
    return f"{REGISTRY}/{name}:{version}"


NOTEBOOK_IMAGE = image("notebook")
RUNTIME_IMAGE = image("runtime")


def image_repository(reference: str) -> str:
    """`reference` without its tag and digest: 'ghcr.io:443/a/b:1@sha256:...' → 'ghcr.io:443/a/b'."""
    name = reference.partition("@")[0]
    head, slash, last = name.rpartition("/")
    return head + slash + last.partition(":")[0]
