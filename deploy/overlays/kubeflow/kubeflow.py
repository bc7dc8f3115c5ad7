"""Behind Kubeflow's gateway: its authenticator (oauth2-proxy, Dex) names the user in `kubeflow-userid`,
and the AuthorizationPolicy admits only the gateway, so the header can be trusted."""

c = get_config()  # noqa: F821 - defined by the traitlets config loader

c.ServerApp.identity_provider_class = "cube_jupyter_server.identity.TrustedHeaderIdentityProvider"
c.ServerApp.authorizer_class = "cube_jupyter_server.authorizer.CubeAuthorizer"
c.CubeSpawner.user_header = "kubeflow-userid"
# Each user's servers, pipelines and jobs go to the namespace of the Kubeflow Profile they own.
c.CubeWorkbench.namespace_source = "kubeflow-profile"
c.CubeSpawner.istio_ingress_principal = (
    "cluster.local/ns/istio-system/sa/istio-ingressgateway-service-account"
)
# This pod's identity: each notebook server's AuthorizationPolicy lets it read the server's activity.
c.CubeSpawner.workbench_principal = "cluster.local/ns/kubeflow/sa/cube-jupyter"
# Who may see and act on every user's servers and jobs, e.g. ["admin@example.com"].
c.CubeWorkbench.admin_users = []
