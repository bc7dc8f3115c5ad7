"""Who is calling: Jupyter's own auth in single-user mode, or a trusted header behind Istio.

Behind an Istio ingress that authenticates users (oauth2-proxy, Dex) and sets `kubeflow-userid`, one
central workbench serves many users: `TrustedHeaderIdentityProvider` reads that header, and
`CubeAuthorizer` keeps non-admins to the workbench's own API. It must only be enabled where the mesh
guarantees that no request reaches the server without passing the gateway (an AuthorizationPolicy
admitting only the ingress gateway's identity), since anyone else could simply send the header.

    c.ServerApp.identity_provider_class = "cube_jupyter_server.identity.TrustedHeaderIdentityProvider"
    c.ServerApp.authorizer_class = "cube_jupyter_server.authorizer.CubeAuthorizer"
    c.CubeSpawner.user_header = "kubeflow-userid"
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from jupyter_server.auth.identity import User
from tornado import httputil, web

from cube_jupyter.config import Settings
from cube_jupyter_server.authorizer import HeaderIdentityProvider, check_unguarded_request, trusts_header


def header_identity(headers: httputil.HTTPHeaders, header: str, prefix: str) -> str | None:
    """The user the mesh names in `header`, or None when the header is not exactly one clean value.

    Several values (or one holding a comma, as proxies join repeated headers) mean something besides
    the gateway set it, and a value without the configured prefix did not come from the gateway's
    authenticator: neither names anyone.
    """
    values = headers.get_list(header)
    if len(values) != 1 or "," in values[0]:
        return None
    value = values[0].strip()
    if prefix:
        if not value.startswith(prefix):
            return None
        value = value[len(prefix) :].strip()
    return value or None


class TrustedHeaderIdentityProvider(HeaderIdentityProvider):
    """The caller is whoever the mesh names in `CubeSpawner.user_header`; no header, no access."""

    def get_user(self, handler: web.RequestHandler) -> User | Awaitable[User | None] | None:
        settings: Settings | None = handler.settings.get("cube_settings")
        if settings is None:
            return super().get_user(handler)  # see `trusts_header`
        spawner = settings.notebooks.spawner
        name = header_identity(handler.request.headers, spawner.user_header, spawner.user_header_prefix)
        if name is None:
            if spawner.user_header in handler.request.headers:
                self.log.warning(
                    "cube-jupyter: refused %r header: %d value(s), expected one%s",
                    spawner.user_header,
                    len(handler.request.headers.get_list(spawner.user_header)),
                    f" starting with {spawner.user_header_prefix!r}" if spawner.user_header_prefix else "",
                )
            return None
        user = User(username=name, name=name, display_name=name)
        check_unguarded_request(handler, user)
        return user

    @property
    def auth_enabled(self) -> bool:
        return True

    @property
    def login_available(self) -> bool:
        # There is no login page: the mesh's auth flow happens before the request arrives.
        return False

    def is_token_authenticated(self, handler: web.RequestHandler) -> bool:
        # Header identity comes with the browser's cookies, so XSRF checks must stay on.
        return False if trusts_header(handler) else super().is_token_authenticated(handler)

    def should_check_origin(self, handler: web.RequestHandler) -> bool:
        return True


def make_caller(settings: Settings) -> Callable[[web.RequestHandler], str | None]:
    """A function naming the workbench user behind a request, or None if it is not authenticated.

    With Jupyter's own auth the server has one owner (`CubeWorkbench.default_user`): every
    authenticated request is theirs, whatever per-browser name Jupyter invented for it.
    """

    def caller(handler: web.RequestHandler) -> str | None:
        user = handler.current_user
        if not user:
            return None
        if trusts_header(handler):
            return str(user.username)
        return settings.workbench.default_user

    return caller
