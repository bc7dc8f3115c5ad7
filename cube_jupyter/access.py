"""Who may act on whose things: the one owner/admin check every feature's service uses.

A caller acts on their own servers, runs and jobs; an admin (`CubeWorkbench.admin_users`) may name
another user, or ask for every user's. Everything else is a 403 naming the field at fault.
"""

from __future__ import annotations

from cube_jupyter.config import Settings
from cube_jupyter.errors import Forbidden


def owner(settings: Settings, caller: str, user: str | None, things: str) -> str:
    """Whose `things` ("servers", "jobs") a request means: the caller's own, or (admins only)
    another user's."""
    if not user or user == caller:
        return caller
    if not settings.is_admin(caller):
        raise Forbidden(f"user {caller!r} may not act on {things} of user {user!r}", field="user")
    return user


def listed_user(
    settings: Settings, caller: str, user: str | None, all_users: bool, things: str
) -> str | None:
    """Whose `things` a listing shows: the caller's, another user's (admins), or everyone's (None;
    `?all=1`, admins only)."""
    if all_users:
        require_admin_for_all(settings, caller, f"list every user's {things}")
        return None
    return owner(settings, caller, user, things)


def require_admin_for_all(settings: Settings, caller: str, what: str) -> None:
    """`?all=1` widens a listing to every user: admins only. `what` completes "only admins may …"."""
    if not settings.is_admin(caller):
        raise Forbidden(f"only admins may {what}; {caller!r} is not one", field="all")


def may_read(settings: Settings, caller: str, user: str) -> bool:
    """Whether `caller` may see a record that belongs to `user`."""
    return caller == user or settings.is_admin(caller)
