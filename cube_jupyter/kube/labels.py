"""Labels and annotations every object the workbench creates carries, whatever the feature: who
manages it (the informers select on it) and whose it is."""

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "cube-jupyter"
SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
USER_LABEL = "cube-jupyter/user"  # the user's slug: a label value
USER_ANNOTATION = "cube-jupyter/user"  # the raw user name, which a label value could not hold
HOME = "/home/jovyan"  # the docker-stacks user's home, where workspaces and shipped code go
