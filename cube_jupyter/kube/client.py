"""The one module that talks to the Kubernetes API: config loading, generic object verbs, watches.

Everything else (informers, the notebook backend) goes through `KubeClient`, which works for core and
custom resources alike by apiVersion/kind, so there is one place that knows URLs, content types and
how an API failure becomes a message a user can act on (`CubeError`), never a traceback.
"""

from __future__ import annotations

import builtins
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypedDict, Unpack
from urllib.parse import urlencode

import urllib3
from kubernetes import config as kube_config
from kubernetes.client import ApiClient, Configuration
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from kubernetes.watch.watch import iter_resp_lines

from cube_jupyter._version import __version__
from cube_jupyter.errors import (
    BackendUnavailable,
    ConfigError,
    Conflict,
    CubeError,
    Forbidden,
    NotFound,
    QuotaExceeded,
)

# Re-exported: the client's callers have always found the URL table here.
from cube_jupyter.kube.objects import metadata_of
from cube_jupyter.kube.resources import ResourceType as ResourceType
from cube_jupyter.kube.resources import register_resource_type as register_resource_type
from cube_jupyter.kube.resources import resource_type
from cube_jupyter.workbench import WorkbenchSettings

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
# (connect, read) seconds for ordinary calls; watches get a read timeout past their server-side one.
REQUEST_TIMEOUT = (5.0, 30.0)
LIST_PAGE_SIZE = 500


def user_agent(settings: WorkbenchSettings | None) -> str:
    """`cube-jupyter/<version> (<role>)`: the API server's audit log then says which part of the
    workbench (the central workbench or a notebook pod's user server) sent each request."""
    role = f" ({settings.workbench.role})" if settings is not None else ""
    return f"cube-jupyter/{__version__}{role}"


def make_api_client(settings: WorkbenchSettings | None = None, *, host: str | None = None) -> ApiClient:
    """Build the official client: an explicit `host` (tests), else in-cluster, else kubeconfig; its
    User-Agent names the role of `settings`.

    With `CubeWorkbench.kubernetes_context` set, that kubeconfig context is used and in-cluster
    config is skipped. No credentials at all is a ConfigError at startup, not a failure per request.
    """
    api_client = ApiClient(_configuration(settings, host))
    api_client.user_agent = user_agent(settings)
    return api_client


def _configuration(settings: WorkbenchSettings | None, host: str | None) -> Configuration:
    configuration = Configuration()
    if host:
        configuration.host = host.rstrip("/")
        return configuration
    context = settings.workbench.kubernetes_context if settings is not None else ""
    if not context:
        try:
            kube_config.load_incluster_config(client_configuration=configuration)
            return configuration
        except ConfigException:
            pass  # not in a pod: fall through to kubeconfig
    try:
        # $KUBECONFIG is read now, not when the kubernetes package was imported.
        kube_config.load_kube_config(
            config_file=os.environ.get("KUBECONFIG") or None,
            context=context or None,
            client_configuration=configuration,
        )
    except (ConfigException, OSError, ValueError, TypeError) as exc:
        where = f"context {context!r} of kubeconfig" if context else "kubeconfig"
        raise ConfigError(
            "CubeWorkbench.backend is 'kubernetes' but no cluster credentials were found: this is not a "
            f"pod with a service account, and {where} could not be loaded ({exc})",
            field="CubeWorkbench.kubernetes_context",
        ) from None
    return configuration


class ApiNotFound(NotFound):
    """404 from the API, with the Status `details` so callers can tell a missing namespace from a
    missing object or a resource type the cluster does not serve."""

    def __init__(
        self, message: str, *, details: dict[str, Any] | None = None, field: str | None = None
    ) -> None:
        super().__init__(message, field=field)
        self.details = details or {}

    @property
    def missing_kind(self) -> str:
        """The plural the API says is missing ('namespaces', 'pods'), or '' for an unknown URL."""
        return str(self.details.get("kind", ""))


class ApiForbidden(BackendUnavailable):
    """403 from the API (not a quota): the workbench's own service account lacks a permission."""


class ResourceGone(BackendUnavailable):
    """410 Gone: the resourceVersion a watch or a list continuation started from is too old."""


def error_for_status(status: int, body: object, action: str) -> CubeError:
    """Turn an API failure into the CubeError a user sees: what was attempted and what the API said."""
    api_status = _parse_status(body)
    message = str(api_status.get("message") or api_status.get("reason") or "").strip()
    said = f": {message}" if message else ""
    if status == 404:
        details = api_status.get("details")
        return ApiNotFound(
            f"{action} failed: not found{said}", details=details if isinstance(details, dict) else {}
        )
    if status == 409:
        return Conflict(f"{action} failed: already exists or was changed concurrently{said}")
    # 403 and 400/422 are the workbench's problem, not the caller's: its service account lacks a
    # permission, or admin config rendered an object the cluster refuses (user input is validated
    # before anything is sent). The caller gets a 503 that says so; the API's own words, which name
    # the service account, go to the log for the admin.
    if status == 403 and "exceeded quota" in message:  # the ResourceQuota admission plugin's answer
        return QuotaExceeded(f"{action} failed{said}")
    if status == 403 and message.startswith("admission webhook"):
        # A policy the cluster enforces (an operator's validation, Kyverno, Gatekeeper): its words
        # are about the object, not the workbench's rights, and the user needs them.
        return Forbidden(f"{action} was refused by the cluster's admission policy: {message}")
    if status == 403:
        log.warning("%s was refused by Kubernetes (403)%s", action, said)
        return ApiForbidden(
            f"{action} was refused by Kubernetes: the workbench lacks a permission it needs; "
            "an admin can find the details in the workbench's log"
        )
    if status == 401:
        return BackendUnavailable(f"{action} failed: Kubernetes rejected the workbench's credentials{said}")
    if status in (400, 422):
        log.warning("%s was rejected as invalid by Kubernetes (%d)%s", action, status, said)
        return BackendUnavailable(
            f"{action} was rejected as invalid by Kubernetes, most likely because of the workbench's "
            "configuration; an admin can find the details in the workbench's log"
        )
    if status == 410:
        return ResourceGone(f"{action} failed: the resource version is too old{said}")
    if status == 429:
        return BackendUnavailable(
            f"{action} failed: Kubernetes is throttling requests; try again shortly{said}"
        )
    if status >= 500 or status == 0:
        return BackendUnavailable(f"{action} failed: the Kubernetes API answered {status}{said}")
    return BackendUnavailable(f"{action} failed: unexpected answer {status} from the Kubernetes API{said}")


def translate_api_exception(exc: ApiException, action: str) -> CubeError:
    """The same translation for code that uses the generated API classes."""
    return error_for_status(int(exc.status or 0), exc.body, action)


def _parse_status(body: object) -> dict[str, Any]:
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    if isinstance(body, dict):
        return body
    if isinstance(body, str) and body.strip():
        try:
            parsed = json.loads(body)
        except ValueError:
            return {"message": body.strip()[:500]}
        return parsed if isinstance(parsed, dict) else {}
    return {}


class _RequestOptions(TypedDict, total=False):
    """`KubeClient._request`'s keyword arguments, for the methods that pass them on."""

    query: list[tuple[str, str]] | None
    body: Any
    content_type: str
    timeout: tuple[float, float]


@dataclass(frozen=True)
class ListResult:
    items: list[dict[str, Any]]
    resource_version: str


class WatchStream:
    """One open watch: iterate for event dicts; `close()` from another thread ends the iteration."""

    def __init__(self, response: urllib3.BaseHTTPResponse, action: str) -> None:
        self._response = response
        self._action = action
        self._closed = False

    def __iter__(self) -> Iterator[dict[str, Any]]:
        try:
            for line in iter_resp_lines(self._response):
                if self._closed:
                    return
                if not line.strip():
                    continue
                try:
                    event = json.loads(line)
                except ValueError:
                    raise BackendUnavailable(f"{self._action}: the API sent a malformed event") from None
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    raise error_for_status(int(status.get("code") or 500), status, self._action)
                yield event
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            if self._closed:
                return
            raise BackendUnavailable(
                f"{self._action}: the connection to the Kubernetes API broke ({exc})"
            ) from None
        finally:
            self._response.close()

    def close(self) -> None:
        """Interrupt a read blocked in another thread (urllib3 2.3+ `shutdown`), then close."""
        self._closed = True
        shutdown = getattr(self._response, "shutdown", None)
        try:
            if shutdown is not None:
                shutdown()
            else:  # pragma: no cover - urllib3 < 2.3
                self._response.close()
        except (OSError, urllib3.exceptions.HTTPError):
            pass
        except ValueError:  # urllib3: the connection is already released (a read just ended): no socket
            self._response.close()


# Creates and patches ask the API server to refuse a field it does not know rather than drop it: a
# renderer's misspelt field, or one an older CRD version lacks, is an error naming the field.
STRICT = [("fieldValidation", "Strict")]


class KubeClient:
    """Generic verbs on any apiVersion/kind, raising CubeErrors. Thread-safe: share one per process."""

    def __init__(self, api_client: ApiClient) -> None:
        self.api_client = api_client

    @property
    def host(self) -> str:
        return str(self.api_client.configuration.host)

    def close(self) -> None:
        self.api_client.close()

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        rtype = resource_type(obj["apiVersion"], obj["kind"])
        meta = metadata_of(obj)
        action = f"creating {rtype.kind} {_ref(meta.get('namespace'), meta.get('name'))}"
        return self._json("POST", rtype.path(meta.get("namespace")), action, body=obj, query=STRICT)

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any]:
        rtype = resource_type(api_version, kind)
        return self._json("GET", rtype.path(namespace, name), f"reading {kind} {_ref(namespace, name)}")

    def delete(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        *,
        missing_ok: bool = False,
        propagation: str = "Background",
    ) -> dict[str, Any] | None:
        """Delete; dependents are garbage-collected. With `propagation="Foreground"` the object stays
        (with a deletionTimestamp) until its blocking dependents, such as a StatefulSet's pods, are gone."""
        rtype = resource_type(api_version, kind)
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": propagation}
        try:
            return self._json(
                "DELETE", rtype.path(namespace, name), f"deleting {kind} {_ref(namespace, name)}", body=body
            )
        except ApiNotFound:
            if missing_ok:
                return None
            raise

    def delete_object(
        self, obj: dict[str, Any], *, missing_ok: bool = False, propagation: str = "Background"
    ) -> dict[str, Any] | None:
        """`delete` of the object `obj` names (its apiVersion, kind, namespace and name)."""
        meta = metadata_of(obj)
        return self.delete(
            obj["apiVersion"],
            obj["kind"],
            meta.get("namespace"),
            meta["name"],
            missing_ok=missing_ok,
            propagation=propagation,
        )

    def patch(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        patch: dict[str, Any],
        *,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """JSON merge patch (RFC 7386): dicts merge, lists replace, null removes a key."""
        rtype = resource_type(api_version, kind)
        target = f"{kind} {_ref(namespace, name)}" + (f" {subresource}" if subresource else "")
        return self._json(
            "PATCH",
            rtype.path(namespace, name, subresource),
            f"updating {target}",
            body=patch,
            content_type=MERGE_PATCH,
            query=STRICT,
        )

    def get_path(self, path: str, action: str) -> dict[str, Any]:
        """GET a URL the object verbs do not cover: API discovery (/apis, /apis/<group>/<version>)."""
        return self._json("GET", path, action)

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> ListResult:
        """All matching objects, paged, with the list's resourceVersion to start a watch from."""
        rtype = resource_type(api_version, kind)
        action = f"listing {rtype.describe()}" + (f" in namespace {namespace}" if namespace else "")
        items: list[dict[str, Any]] = []
        token = ""
        while True:
            query = [*_selectors(label_selector, field_selector), ("limit", str(LIST_PAGE_SIZE))]
            if token:
                query.append(("continue", token))
            page = self._json("GET", rtype.path(namespace), action, query=query)
            items.extend(page.get("items") or [])
            meta = metadata_of(page)
            token = meta.get("continue") or ""
            if not token:
                return ListResult(items=items, resource_version=str(meta.get("resourceVersion") or ""))

    def watch(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        *,
        resource_version: str = "",
        timeout_seconds: int = 300,
        label_selector: str | None = None,
        field_selector: str | None = None,
        allow_bookmarks: bool = True,
    ) -> WatchStream:
        rtype = resource_type(api_version, kind)
        action = f"watching {rtype.describe()}"
        query = [
            *_selectors(label_selector, field_selector),
            ("watch", "true"),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        if allow_bookmarks:
            query.append(("allowWatchBookmarks", "true"))
        timeout = (REQUEST_TIMEOUT[0], float(timeout_seconds) + 30.0)
        response = self._request("GET", rtype.path(namespace), action, query=query, timeout=timeout)
        if not 200 <= response.status < 300:
            body = response.read()
            response.close()
            raise error_for_status(response.status, body, action)
        return WatchStream(response, action)

    def _json(
        self, method: str, path: str, action: str, **options: Unpack[_RequestOptions]
    ) -> dict[str, Any]:
        """`_request`, its JSON object body read; an error status raised."""
        response = self._request(method, path, action, **options)
        try:
            data = response.read()
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise BackendUnavailable(
                f"{action} failed: the connection to the Kubernetes API broke ({exc})"
            ) from None
        finally:
            response.release_conn()
        if not 200 <= response.status < 300:
            raise error_for_status(response.status, data, action)
        try:
            parsed = json.loads(data) if data else {}
        except ValueError:
            raise BackendUnavailable(
                f"{action} failed: the Kubernetes API sent a body that is not JSON"
            ) from None
        return parsed if isinstance(parsed, dict) else {}

    def _request(
        self,
        method: str,
        path: str,
        action: str,
        *,
        query: builtins.list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: tuple[float, float] = REQUEST_TIMEOUT,
    ) -> urllib3.BaseHTTPResponse:
        """Send with the ApiClient's connection pool (TLS, client certificates, proxy, retries), default
        headers and credentials (a refreshed token); no raise on 4xx.

        Only what every client generation kfp allows (kubernetes<31) and the newest share is used:
        `Configuration.auth_settings()` and `rest_client.pool_manager`. The request helpers of the
        generated client changed shape at 31 (`param_serialize`), and raise on 4xx before it."""
        headers = {**self.api_client.default_headers, "Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        url = self.host + path + (f"?{urlencode(query)}" if query else "")
        try:
            for auth in self.api_client.configuration.auth_settings().values():
                if auth.get("in") == "header" and auth.get("value"):
                    headers[auth["key"]] = auth["value"]
            response: urllib3.BaseHTTPResponse = self.api_client.rest_client.pool_manager.request(
                method,
                url,
                body=None if body is None else json.dumps(body).encode(),
                headers=headers,
                preload_content=False,
                timeout=urllib3.Timeout(connect=timeout[0], read=timeout[1]),
            )
        except ApiException as exc:  # a token refresh hook that failed
            raise translate_api_exception(exc, action) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise BackendUnavailable(
                f"{action} failed: the Kubernetes API at {self.host} is unreachable ({_short(exc)})"
            ) from None
        return response


def _selectors(label_selector: str | None, field_selector: str | None) -> list[tuple[str, str]]:
    query = []
    if label_selector:
        query.append(("labelSelector", label_selector))
    if field_selector:
        query.append(("fieldSelector", field_selector))
    return query


def _ref(namespace: object, name: object) -> str:
    return f"{namespace}/{name}" if namespace else str(name)


def _short(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    return str(reason or exc).split("\n")[0][:300]
