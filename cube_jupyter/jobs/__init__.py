"""Training, tuning and serving jobs: typed specs, their Kubernetes renderers, and the job record.

A spec (`TrainingSpec`, `TuningSpec`, `ServingSpec`) is parsed once at the edge from the dict or YAML a
user wrote; renderers turn it, with the admin's `CubeJobs` config, into the objects the Kubeflow
Training Operator, Katib and KServe act on; the local backend runs the same spec on this machine.
"""
