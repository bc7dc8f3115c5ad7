"""Who may do what on the central workbench when the mesh names the caller.

Behind Istio every user of the cluster reaches the same Jupyter server, which runs as the workbench's
service account. Its own Jupyter API (contents, kernels, terminals, ...) would hand each of them a
shell there, so `CubeAuthorizer` gives non-admins the workbench's API (`cube`: their notebook servers
and pipelines) and only the read-only parts of Jupyter that the JupyterLab page needs to load; admins
(`CubeWorkbench.admin_users`) keep everything. With Jupyter's own auth (single user) the authenticated
caller owns the server and may do anything, as with Jupyter's default authorizer.

    c.ServerApp.authorizer_class = "cube_jupyter_server.authorizer.CubeAuthorizer"

jupyterlab_server's handlers (the `/lab` page, settings, workspaces, listings, translations),
JupyterLab's extension manager and `/metrics` never ask the Authorizer; `check_unguarded_request`,
called by the identity provider on every request, asks it for them: `read` for safe methods, `write`
for the others, on `lab` unless `RESOURCE_OVERRIDES` names another resource for the handler.

README.md's table "What non-admins reach" lists the routes this leaves to non-admins;
tests/server/test_route_inventory.py tries every route the server registers against it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jupyter_server.auth.authorizer import Authorizer
from jupyter_server.auth.identity import IdentityProvider, User
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
#   api         /api, /api/status, /api/me, /api/spec.yaml
#   config      /api/config/{section} (frontend config sections); PATCH would change them for all
#   kernelspecs /api/kernelspecs and their logos: the launcher lists them
#   lab         the /lab page and what it reads (settings, themes, translations, listings, licenses,
#               workspaces, plugins, build status, news), the landing and logout pages; reads only
#   csp         /api/security/csp-report: the browser's CSP violation reports, only logged
# Everything else (contents, files, kernels, sessions, terminals, nbconvert, events, lsp, server,
# extensions, metrics) is refused: each runs code, reads or writes files, or shows other users'
# activity on this server.
USER_GRANTS: dict[str, frozenset[str]] = {
    CUBE_RESOURCE: frozenset({"read", "write", "execute"}),
    "api": frozenset({"read"}),
    "config": frozenset({"read"}),
    "kernelspecs": frozenset({"read"}),
    LAB_RESOURCE: frozenset({"read"}),
    "csp": frozenset({"read", "write"}),
}

# Handlers checked as another resource than the one they ask for (`lab` for those that never ask), by
# class: under the granted name each would show a non-admin this server's files or activity.
#   resolvePath asks for `api` but says whether a path exists under the server root
#   the extension manager lists and installs the server's extensions
#   /metrics counts every user's requests, kernels and terminals on this server
RESOURCE_OVERRIDES = {
    "jupyter_server.services.api.handlers.PathResolverHandler": "contents",
    "jupyterlab.handlers.extension_manager_handler.ExtensionHandler": "extensions",
    "jupyter_server.base.handlers.PrometheusMetricsHandler": "metrics",
}


class HeaderIdentityProvider(IdentityProvider):
    """An identity provider that names the caller from a header the mesh sets: many users reach this
    one server (`cube_jupyter_server.identity.TrustedHeaderIdentityProvider`)."""


def trusts_header(handler: web.RequestHandler) -> bool:
    """Whether this request's caller is named by the header: a header identity provider is set and
    the workbench extension has loaded its validated settings (which name the header).

    Without those settings (a local child `jupyter lab` reading the same config files, or a server
    with the extension disabled) the header is not trusted and Jupyter's own token auth applies.
    """
    return (
        isinstance(handler.settings.get("identity_provider"), HeaderIdentityProvider)
        and handler.settings.get("cube_settings") is not None
    )


class CubeAuthorizer(Authorizer):
    """Admins and the single-user owner may do anything; other header-named users only `USER_GRANTS`."""

    def is_authorized(self, handler: JupyterHandler, user: User, action: str, resource: str) -> bool:
        if not trusts_header(handler):
            return True  # Jupyter's own auth: whoever holds the token owns the server
        if is_admin(handler.settings, user):
            return True
        handler_name = f"{type(handler).__module__}.{type(handler).__qualname__}"
        resource = RESOURCE_OVERRIDES.get(handler_name, resource)
        allowed = action in USER_GRANTS.get(resource, frozenset())
        if not allowed:
            self.log.warning(
                "cube-jupyter: refused %s on %r to %r (not in CubeWorkbench.admin_users)",
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
    authorizer = handler.settings.get("authorizer")
    if not isinstance(authorizer, Authorizer) or not authorizer.is_authorized(
        handler,  # type: ignore[arg-type]
        user,
        "read" if method in SAFE_METHODS else "write",
        LAB_RESOURCE,
    ):
        raise web.HTTPError(403, f"{method} {handler.request.path} is for workbench admins only")


def require_cube_authorizer(serverapp: ServerApp) -> None:
    """The trusted-header identity provider without CubeAuthorizer would give every user of the
    cluster the whole Jupyter API of this server: refuse to start instead."""
    if isinstance(serverapp.identity_provider, HeaderIdentityProvider) and not isinstance(
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
