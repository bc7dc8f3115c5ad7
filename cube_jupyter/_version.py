"""The package version, on its own so that what names it (images, user agents) imports nothing else."""

__version__ = "0.1.0"
