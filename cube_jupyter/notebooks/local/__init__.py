"""Notebook servers on the local backend: `jupyter lab` child processes, state in sqlite."""
