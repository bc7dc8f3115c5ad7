"""The local backend of jobs: training replicas, tuning trials and model servers as processes here."""
