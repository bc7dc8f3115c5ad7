"""Shared infrastructure for the cluster: one API client, one informer registry."""
