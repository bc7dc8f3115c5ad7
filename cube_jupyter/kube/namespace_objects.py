"""The objects of a user namespace the workbench creates (`CubeWorkbench.create_namespaces`): a pure
function of the user, the namespace and the config, so tests check each object against its schema.

What a Kubeflow Profile's namespace has, minus Kubeflow: the namespace labelled
`istio-injection=enabled` (without a sidecar no AuthorizationPolicy applies, and a server without a
token would be open to the whole cluster) and annotated with its `owner`, as Kubeflow's profile
controller does; the service accounts of the pods the workbench makes there, bound to
`CubeWorkbench.user_cluster_role`; and the artifact store's credentials Secret, whose keys pods read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cube_jupyter.kube.labels import MANAGED_BY, MANAGED_BY_LABEL, USER_ANNOTATION, USER_LABEL
from cube_jupyter.names import user_slug
from cube_jupyter.storage.config import CREDENTIAL_KEYS
from cube_jupyter.workbench import WorkbenchSettings

ISTIO_INJECTION_LABEL = "istio-injection"
# Kubeflow's profile controller records a namespace's owner here, and refuses to take over a
# namespace another user owns; the workbench does both the same way.
OWNER_ANNOTATION = "owner"
POD_ROLE_BINDING = "cube-jupyter-pods"
# The account a pod runs as when its service account setting is '': every namespace has it.
DEFAULT_SERVICE_ACCOUNT = "default"


def render_namespace_objects(
    settings: WorkbenchSettings, user: str, namespace: str, credentials: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """The namespace, then the pods' service accounts, their RoleBinding and (given the store's
    `credentials`, base64 `data` as the API returns it) the credentials Secret, in creation order."""
    labels = {MANAGED_BY_LABEL: MANAGED_BY, USER_LABEL: user_slug(user)}
    accounts = settings.pod_service_accounts

    def metadata(name: str) -> dict[str, Any]:
        return {"name": name, "namespace": namespace, "labels": dict(labels)}

    objects: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": namespace,
                "labels": {**labels, ISTIO_INJECTION_LABEL: "enabled"},
                "annotations": {OWNER_ANNOTATION: user, USER_ANNOTATION: user},
            },
        }
    ]
    objects += [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata(account)}
        for account in accounts
        if account != DEFAULT_SERVICE_ACCOUNT  # the API server makes that one itself
    ]
    objects.append(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": metadata(POD_ROLE_BINDING),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": settings.workbench.user_cluster_role,
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": account, "namespace": namespace} for account in accounts
            ],
        }
    )
    if settings.storage.credentials_secret and credentials is not None:
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": metadata(settings.storage.credentials_secret),
                "type": "Opaque",
                "data": {key: credentials[key] for key in CREDENTIAL_KEYS},
            }
        )
    return objects
