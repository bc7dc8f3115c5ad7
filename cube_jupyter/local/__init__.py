"""Shared infrastructure for local processes: spawning, supervision, private files, keyed locks."""
