"""Notebook servers on Kubernetes: objects, informer-cached status, idle culling."""
