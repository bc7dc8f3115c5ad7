"""One user, with Jupyter's token auth ($JUPYTER_TOKEN, from the `cube-jupyter-token` Secret). The
user's kernels run in this pod, with its ServiceAccount: give the token to a cluster admin only."""

c = get_config()  # noqa: F821 - defined by the traitlets config loader

# The owner: their pipelines and jobs go to namespace `cube-jovyan` (CubeWorkbench.namespace_template),
# created on first use.
c.CubeWorkbench.default_user = "jovyan"
c.CubeWorkbench.create_namespaces = True
# Without Kubeflow there is no Notebook controller: notebook servers are StatefulSets, reached through
# Istio (a VirtualService and an owner-only AuthorizationPolicy each), so they need Istio installed.
c.CubeSpawner.resource_kind = "StatefulSet"
