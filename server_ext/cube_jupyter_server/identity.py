"""Who is calling: Jupyter's own auth in single-user mode, or a trusted header behind Istio.

Behind an Istio ingress that authenticates users (oauth2-proxy, Dex) and sets `kubeflow-userid`, one
central workbench serves many users: `TrustedHeaderIdentityProvider` reads that header. It must only be
enabled where the mesh guarantees that no request reaches the server without passing the gateway.

    c.ServerApp.identity_provider_class = "cube_jupyter_server.identity.TrustedHeaderIdentityProvider"
    c.CubeSpawner.user_header = "kubeflow-userid"
"""

from __future__ import annotations

from collections.abc import Callable

from jupyter_server.auth.identity import IdentityProvider, User
from tornado import web

from cube_jupyter.config import CubeSpawner, Settings


class TrustedHeaderIdentityProvider(IdentityProvider):
    """The caller is whoever the mesh names in `CubeSpawner.user_header`; no header, no access."""

    @property
    def _spawner(self) -> CubeSpawner:
        return CubeSpawner(config=self.config)

    def get_user(self, handler: web.RequestHandler) -> User | None:
        spawner = self._spawner
        value = handler.request.headers.get(spawner.user_header, "").strip()
        if spawner.user_header_prefix and value.startswith(spawner.user_header_prefix):
            value = value[len(spawner.user_header_prefix) :]
        if not value:
            return None
        return User(username=value, name=value, display_name=value)

    @property
    def auth_enabled(self) -> bool:
        return True

    @property
    def login_available(self) -> bool:
        # There is no login page: the mesh's auth flow happens before the request arrives.
        return False

    def is_token_authenticated(self, handler: web.RequestHandler) -> bool:
        # Header identity comes with the browser's cookies, so XSRF checks must stay on.
        return False

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
        if isinstance(handler.settings.get("identity_provider"), TrustedHeaderIdentityProvider):
            return str(user.username)
        return settings.workbench.default_user

    return caller
