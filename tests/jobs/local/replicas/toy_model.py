"""The toy model and data of the DDP test and benchmark: a sibling module the package must ship."""

from __future__ import annotations

import torch

FEATURES = 16
TRUE_WEIGHTS = torch.linspace(-1.0, 1.0, FEATURES)


def make_model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))


def make_batch(size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(size, FEATURES, generator=generator)
    return x, (x @ TRUE_WEIGHTS)[:, None]
