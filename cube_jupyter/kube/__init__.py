"""Shared infrastructure for the cluster: one API client, one informer registry (`cluster.Cluster`),
and pure readers and builders of Kubernetes objects (`objects`, `pods`)."""
