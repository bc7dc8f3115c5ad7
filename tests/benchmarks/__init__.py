"""Benchmarks run by `make bench`: printed figures (medians, ratios to a baseline), never pass/fail."""
