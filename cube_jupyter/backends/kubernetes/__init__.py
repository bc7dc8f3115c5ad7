"""The Kubernetes backend: one API client module, informer caches, and the notebook server backend."""

from __future__ import annotations
