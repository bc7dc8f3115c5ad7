"""Pipelines on the cluster: the Argo compiler and the runs that follow Workflows."""
