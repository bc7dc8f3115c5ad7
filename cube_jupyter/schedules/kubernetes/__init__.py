"""Schedules Argo fires: CronWorkflows of cluster notebook schedules (`cron`, `mirror`)."""
