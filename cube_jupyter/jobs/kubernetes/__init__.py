"""Training, tuning and serving jobs on Kubernetes: operator objects and their status."""
