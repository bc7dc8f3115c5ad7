"""Scheduled pipelines and training jobs: cron or interval fire times, catch-up, backfill, retries,
dependencies and concurrency limits, run by the central workbench (local) or Argo (cluster)."""
