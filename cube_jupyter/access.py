"""Who may act on whose things: the one owner/admin check every feature's service uses.

A caller acts on their own servers, runs and jobs; an admin (`CubeWorkbench.admin_users`) may name
another user, or ask for every user's. Everything else is a 403 naming the field at fault.

Files named by a request (a pipeline's notebook, a job's script or notebook, a served model) are read
through `readable_file` only, a local artifact store it names is written through `local_store` only,
and code runs on this machine only past `require_local_execution`.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlsplit

from cube_jupyter.errors import Forbidden, InvalidInput, NotFound, quote
from cube_jupyter.local import files
from cube_jupyter.names import user_slug
from cube_jupyter.workbench import WorkbenchSettings


def owner(settings: WorkbenchSettings, caller: str, user: str | None, things: str) -> str:
    """Whose `things` ("servers", "jobs") a request means: the caller's own, or (admins only)
    another user's."""
    if not user or user == caller:
        return caller
    if not settings.is_admin(caller):
        raise Forbidden(f"user {caller!r} may not act on {things} of user {user!r}", field="user")
    return user


def listed_user(
    settings: WorkbenchSettings, caller: str, user: str | None, all_users: bool, things: str
) -> str | None:
    """Whose `things` a listing shows: the caller's, another user's (admins), or everyone's (None;
    `?all=1`, admins only)."""
    if all_users:
        require_admin_for_all(settings, caller, f"list every user's {things}")
        return None
    return owner(settings, caller, user, things)


def require_admin_for_all(settings: WorkbenchSettings, caller: str, what: str) -> None:
    """`?all=1` widens a listing to every user: admins only. `what` completes "only admins may …"."""
    if not settings.is_admin(caller):
        raise Forbidden(f"only admins may {what}; {caller!r} is not one", field="all")


def may_read(settings: WorkbenchSettings, caller: str, user: str) -> bool:
    """Whether `caller` may see a record that belongs to `user`."""
    return caller == user or settings.is_admin(caller)


# -- files a request names, and code run on this machine --------------------------------------------


def readable_root(settings: WorkbenchSettings, caller: str, root: Path, multi_user: bool, field: str) -> Path:
    """The directory `caller`'s request paths are relative to.

    The same rule as `CubeAuthorizer`, which keeps Jupyter's contents and files APIs to admins when a
    trusted header names many users: there only admins read the server root; every other user reads
    their own area, the workspaces of their notebook servers (local backend; on kubernetes those are
    volumes in their namespace, so they have none on the workbench's disk). With Jupyter's own auth
    the token holder owns the server and reads its root.
    """
    if not multi_user or settings.is_admin(caller):
        return root
    if settings.workbench.backend != "local":
        raise Forbidden(
            f"{field}: this workbench is shared by many users; only admins may read files on its disk "
            "(open the notebook in your own notebook server)",
            field=field,
        )
    return files.user_workspaces(settings.state_dir, user_slug(caller))


def file_path(path: object, field: str, *, absolute: bool = False) -> PurePosixPath:
    """`path` as a file path a request may give, before any disk is looked at: text, relative
    (`absolute`: or absolute), without '..' or '~'. Each refusal names `field`."""
    if not isinstance(path, str) or not path.strip():
        raise InvalidInput(f"{field} must be a file path relative to the Jupyter root", field=field)
    if any(c == "\x00" or "\ud800" <= c <= "\udfff" for c in path):
        raise InvalidInput(f"{field} must be text without NUL or lone surrogate characters", field=field)
    parts = PurePosixPath(path.replace("\\", "/"))
    if (parts.is_absolute() and not absolute) or ".." in parts.parts or path.startswith("~"):
        raise InvalidInput(
            f"{field} {quote(path)} must be relative to the Jupyter root, without '..'", field=field
        )
    return parts


def readable_file(
    settings: WorkbenchSettings,
    caller: str,
    root: Path,
    path: object,
    field: str,
    *,
    multi_user: bool,
    absolute: bool = False,
    folder: bool = False,
) -> Path:
    """The file `path` names for `caller`: relative to `readable_root` (or, with `absolute`, also an
    absolute path inside it, as job specs may give), never outside it (not by '..', '~' or a
    symlink), never in a hidden file or directory (dot-names hold credentials and config: `.ssh`,
    `.jupyter`, `.aws`), existing, and a file (a folder is no notebook or script) unless `folder`
    allows one (a model directory). Each refusal names `field`."""
    given = file_path(path, field, absolute=absolute)
    full = _among_own_files(readable_root(settings, caller, root, multi_user, field), given, path, field)
    if not os.path.exists(full):  # False, not an error, for a name too long
        raise NotFound(f"{field} {quote(path)} does not exist", field=field)
    if not full.is_file() and not (folder and full.is_dir()):
        raise InvalidInput(f"{field} {quote(path)} is a folder, not a file", field=field)
    return full


def local_store(
    settings: WorkbenchSettings, caller: str, root: Path, store: str, multi_user: bool, field: str
) -> str:
    """The artifact store a request names, where a caller may write: an s3:// URL as it is (the
    credentials decide); a local directory anywhere for admins and the owner of a single-user
    workbench, else only among the caller's own files (`readable_root`: a user server's workspace,
    or on a shared workbench the caller's areas), never in a hidden directory. It need not exist."""
    parts = urlsplit(store)
    anywhere = (not multi_user and not settings.user_server) or settings.is_admin(caller)
    if parts.scheme not in ("", "file") or anywhere:
        return store
    given = file_path(unquote(parts.path) if parts.scheme == "file" else store, field, absolute=True)
    return str(
        _among_own_files(readable_root(settings, caller, root, multi_user, field), given, store, field)
    )


def _among_own_files(base: Path, given: PurePosixPath, as_sent: object, field: str) -> Path:
    """`given` resolved below `base`: never outside it (not by '..', '~' or a symlink) and never in a
    hidden file or directory (dot-names hold credentials and config: `.ssh`, `.jupyter`, `.aws`)."""
    try:
        base = base.resolve()
        full = (base / given).resolve()
    except (RuntimeError, OSError) as exc:  # a symlink loop (RuntimeError before Python 3.13)
        raise InvalidInput(f"{field} {quote(as_sent)} cannot be followed: {exc}", field=field) from None
    if not full.is_relative_to(base):
        raise Forbidden(f"{field} {quote(as_sent)} leads outside your own files", field=field)
    if any(part.startswith(".") for part in full.relative_to(base).parts):
        raise Forbidden(f"{field} {quote(as_sent)} is in a hidden file or directory", field=field)
    return full


def require_local_execution(
    settings: WorkbenchSettings, caller: str, multi_user: bool, what: str, field: str
) -> None:
    """Refuse to run `caller`'s code on this machine where that is not theirs to do.

    Behind the trusted header on the kubernetes backend users run in their namespaces, never here;
    on the local backend, local code runs as the server's OS user and can read whatever the server
    can, so admins may keep it to themselves (`CubeWorkbench.local_code_execution = "admins"`).
    """
    if not multi_user or settings.is_admin(caller):
        return
    if settings.workbench.backend != "local":
        raise Forbidden(
            f"this workbench is shared by many users: only admins may {what}; "
            "run it on the cluster, or from your own notebook server",
            field=field,
        )
    if settings.workbench.local_code_execution == "admins":
        raise Forbidden(
            f"only admins may {what} on this machine (c.CubeWorkbench.local_code_execution = 'admins'); "
            "run it from your own notebook server",
            field=field,
        )


def isolation_statement(settings: WorkbenchSettings) -> str:
    """What a workbench that many users reach through the trusted header isolates, and what not:
    logged at startup so an admin knows what they run."""
    if settings.workbench.backend != "local":
        return (
            "many users (trusted header): each reads and runs only their own things through the "
            "workbench API; their code runs in their namespaces, never on this server (only admins "
            "run pipelines or read files here)"
        )
    isolated = (
        "many users (trusted header), local backend: the API keeps each user to their own servers, "
        "runs, jobs and files (the workspaces of their notebook servers). NOT isolated: every "
        "user's code (notebook servers, pipeline runs, jobs) runs as this server's OS user, so a "
        "user's kernel can read and change any file this server can, other users' included"
    )
    if settings.workbench.local_code_execution == "admins":
        return isolated + (
            "; pipeline runs and jobs on this machine are for admins only "
            "(CubeWorkbench.local_code_execution = 'admins'), notebook servers are not"
        )
    return isolated + (
        "; any user may run pipelines and jobs on this machine "
        "(CubeWorkbench.local_code_execution = 'everyone'; set 'admins' to refuse them to non-admins)"
    )
