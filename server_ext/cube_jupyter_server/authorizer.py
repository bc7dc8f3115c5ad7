"""Who may do what on the central workbench when the mesh names the caller.

Behind Istio every user of the cluster reaches the same Jupyter server, which runs as the workbench's
service account. Its own Jupyter API (contents, kernels, terminals, ...) would hand each of them a
shell there, so `CubeAuthorizer` gives non-admins the workbench's API (`cube`: their notebook servers
and pipelines) and only the read-only parts of Jupyter that the JupyterLab page needs to load; admins
(`CubeSpawner.admin_users`) keep everything. With Jupyter's own auth (single user) the authenticated
caller owns the server and may do anything, as with Jupyter's default authorizer.

    c.ServerApp.authorizer_class = "cube_jupyter_server.authorizer.CubeAuthorizer"

jupyterlab_server's handlers (the `/lab` page, settings, workspaces, listings, translations) and
JupyterLab's extension manager never ask the Authorizer; `check_unguarded_request`, called by the
identity provider on every request, asks it for them: `read` for safe methods, `write` for the others,
on the resource `UNGUARDED_RESOURCES` names for the handler's module (`lab` for any other).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jupyter_server.auth.authorizer import Authorizer
from jupyter_server.auth.identity import User
from tornado import web

from cube_jupyter.config import Settings

if TYPE_CHECKING:
    from jupyter_server.base.handlers import JupyterHandler
    from jupyter_server.serverapp import ServerApp

CUBE_RESOURCE = "cube"
LAB_RESOURCE = "lab"  # handlers without an auth_resource of their own (jupyterlab_server's)
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
AUTHORIZER_CLASS = "cube_jupyter_server.authorizer.CubeAuthorizer"

# What a non-admin may do beyond `cube`, each needed by the JupyterLab page to start:
#   api         /api/status, /api/me, /api/spec.yaml
#   config      /api/config/{section} (frontend config sections); PATCH would change them for all
#   kernelspecs /api/kernelspecs and their logos: the launcher lists them
#   lab         the /lab page, settings, themes, translations, listings, workspaces (reads only)
#   csp         /api/security/csp-report: the browser's CSP violation reports, only logged
# Everything else (contents, files, kernels, sessions, terminals, nbconvert, events, lsp, server,
# extensions) is refused: each runs code, reads or writes files, or shows other users' activity on
# this server (the extension manager lists and installs the server's extensions).
USER_GRANTS: dict[str, frozenset[str]] = {
    CUBE_RESOURCE: frozenset({"read", "write", "execute"}),
    "api": frozenset({"read"}),
    "config": frozenset({"read"}),
    "kernelspecs": frozenset({"read"}),
    LAB_RESOURCE: frozenset({"read"}),
    "csp": frozenset({"read", "write"}),
}

# Handlers that never ask the Authorizer, by module, and the resource they are checked as.
UNGUARDED_RESOURCES = {"jupyterlab.handlers.extension_manager_handler": "extensions"}


class CubeAuthorizer(Authorizer):
    """Admins and the single-user owner may do anything; other header-named users only `USER_GRANTS`."""

    def is_authorized(self, handler: JupyterHandler, user: User, action: str, resource: str) -> bool:
        from cube_jupyter_server.identity import trusts_header

        if not trusts_header(handler):
            return True  # Jupyter's own auth: whoever holds the token owns the server
        if is_admin(handler.settings, user):
            return True
        allowed = action in USER_GRANTS.get(resource, frozenset())
        if not allowed:
            self.log.warning(
                "cube-jupyter: refused %s on %r to %r (not in CubeSpawner.admin_users)",
                action,
                resource,
                user.username,
            )
        return allowed


def is_admin(settings: dict[str, Any], user: User) -> bool:
    """Whether `user` is a workbench admin; without the workbench's settings nobody is."""
    cube: Settings | None = settings.get("cube_settings")
    return cube is not None and cube.is_admin(str(user.username))


def check_unguarded_request(handler: web.RequestHandler, user: User) -> None:
    """Ask the Authorizer for handlers that never do (see the module doc).

    Called by the trusted-header identity provider, the one hook every Jupyter request passes.
    """
    if hasattr(handler, "auth_resource"):
        return
    method = handler.request.method or "GET"
    resource = UNGUARDED_RESOURCES.get(type(handler).__module__, LAB_RESOURCE)
    authorizer = handler.settings.get("authorizer")
    if not isinstance(authorizer, Authorizer) or not authorizer.is_authorized(
        handler,  # type: ignore[arg-type]
        user,
        "read" if method in SAFE_METHODS else "write",
        resource,
    ):
        raise web.HTTPError(403, f"{method} {handler.request.path} is for workbench admins only")


def require_cube_authorizer(serverapp: ServerApp) -> None:
    """The trusted-header identity provider without CubeAuthorizer would give every user of the
    cluster the whole Jupyter API of this server: refuse to start instead."""
    from cube_jupyter_server.identity import TrustedHeaderIdentityProvider

    if isinstance(serverapp.identity_provider, TrustedHeaderIdentityProvider) and not isinstance(
        serverapp.authorizer, CubeAuthorizer
    ):
        message = (
            "cube-jupyter: ServerApp.identity_provider_class is the trusted-header provider, so "
            f'ServerApp.authorizer_class must be "{AUTHORIZER_CLASS}" (it is '
            f'"{type(serverapp.authorizer).__module__}.{type(serverapp.authorizer).__name__}"): '
            "otherwise every user behind the gateway gets terminals and kernels on this server"
        )
        serverapp.log.critical(message)
        raise SystemExit(message)
