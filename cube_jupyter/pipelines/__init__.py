"""Notebook as pipeline: cell tags become steps, data flow becomes edges, steps run as notebooks."""
