"""A small client of Kubeflow Pipelines' REST API v2beta1, as the workbench uses it: pipelines and their
versions, experiments, runs and recurring runs, each call made as one user in their namespace.

Bodies and field names are those of KFP's own swagger (the `kfp_server_api` models are generated from
it); answers are returned as KFP's JSON. KFP in multi-user mode checks every call against the user's
rights in the namespace, so the caller is named on each request: in the header Kubeflow's gateway sets
(`kubeflow-userid`, trusted from the central workbench) or by a ServiceAccount token (a user server).
A refusal is a CubeError carrying KFP's own message; an API that cannot be reached is
BackendUnavailable naming `kfp_url`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

import requests

from cube_jupyter.errors import BackendUnavailable, Conflict, CubeError, Forbidden, InvalidInput, NotFound
from cube_jupyter.pipelines.config import CubePipelines

Obj = dict[str, Any]
PREFIX = "/apis/v2beta1"
# (connect, read) seconds: a run view reads runs while it waits, so no call may hang for long.
TIMEOUT = (5.0, 20.0)
# KFP's HTTP statuses → what the workbench says; 5xx and anything else: KFP is failing.
ERRORS: dict[int, type[CubeError]] = {
    400: InvalidInput,
    401: Forbidden,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
}


class Auth(Protocol):
    def headers(self, user: str) -> dict[str, str]:
        """What names `user` to KFP on a request."""
        ...


class UseridHeader:
    """The central workbench, acting for a user, names them as Kubeflow's gateway does."""

    def __init__(self, header: str, prefix: str = "") -> None:
        self.header = header
        self.prefix = prefix

    def headers(self, user: str) -> dict[str, str]:
        return {self.header: f"{self.prefix}{user}"}


class ServiceAccountToken:
    """A user server sends its pod's token, read on each request: the kubelet rotates it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def headers(self, user: str) -> dict[str, str]:
        try:
            token = self.path.read_text().strip()
        except OSError as exc:
            raise BackendUnavailable(
                f"the ServiceAccount token for Kubeflow Pipelines (CubePipelines.kfp_token_file "
                f"{str(self.path)!r}) cannot be read: {exc.strerror or exc}; mount it with Kubeflow's "
                "'access-ml-pipeline' PodDefault"
            ) from None
        return {"Authorization": f"Bearer {token}"}


def auth_for(pipelines: CubePipelines) -> Auth:
    if pipelines.kfp_auth == "service-account-token":
        return ServiceAccountToken(Path(pipelines.kfp_token_file))
    return UseridHeader(pipelines.kfp_userid_header, pipelines.kfp_userid_prefix)


def name_filter(name: str) -> str:
    """A list filter (v2beta1 `Filter`) on an exact name, as KFP's SDK finds pipelines and experiments
    (each is uploaded or created with its display name equal to its name)."""
    return equals_filter("display_name", name)


def equals_filter(key: str, value: str) -> str:
    """A list filter (v2beta1 `Filter`) on one field's exact value (a name, a recurring run's id)."""
    return json.dumps({"predicates": [{"key": key, "operation": "EQUALS", "string_value": value}]})


def run_spec(
    version: Obj,
    parameters: dict[str, Any],
    *,
    pipeline_root: str | None = None,
    experiment_id: str | None = None,
) -> Obj:
    """What a run and a recurring run both say of what they run: `version` (a V2beta1PipelineVersion)
    with `parameters`; in multi-user KFP the experiment places it in its namespace."""
    runtime_config: Obj = {"parameters": parameters}
    if pipeline_root:
        runtime_config["pipeline_root"] = pipeline_root
    spec: Obj = {
        "pipeline_version_reference": {
            "pipeline_id": version["pipeline_id"],
            "pipeline_version_id": version["pipeline_version_id"],
        },
        "runtime_config": runtime_config,
    }
    if experiment_id:
        spec["experiment_id"] = experiment_id
    return spec


class KfpApi:
    """KFP's v2beta1 API at `url`; blocking (requests): call it in a worker thread."""

    def __init__(self, url: str, auth: Auth, *, timeout: tuple[float, float] = TIMEOUT) -> None:
        self.url = url.rstrip("/")
        self.auth = auth
        self.timeout = timeout
        self.session = requests.Session()

    @classmethod
    def from_settings(cls, pipelines: CubePipelines) -> KfpApi:
        return cls(pipelines.kfp_url, auth_for(pipelines))

    def close(self) -> None:
        self.session.close()

    # -- pipelines and versions ----------------------------------------------------------------------

    def upload_pipeline(self, user: str, namespace: str, name: str, package: str) -> Obj:
        """A new pipeline of `package` (IR YAML) in `namespace`, its first version made of it too."""
        return self._call(
            "POST",
            "/pipelines/upload",
            user,
            f"uploading pipeline {name!r}",
            params={"name": name, "display_name": name, "namespace": namespace},
            files={"uploadfile": (f"{name}.yaml", package, "application/x-yaml")},
        )

    def upload_version(self, user: str, pipeline_id: str, name: str, package: str) -> Obj:
        return self._call(
            "POST",
            "/pipelines/upload_version",
            user,
            f"uploading pipeline version {name!r}",
            params={"pipelineid": pipeline_id, "name": name, "display_name": name},
            files={"uploadfile": (f"{name}.yaml", package, "application/x-yaml")},
        )

    def find_pipeline(self, user: str, namespace: str, name: str) -> Obj | None:
        found = self._call(
            "GET",
            "/pipelines",
            user,
            f"finding pipeline {name!r}",
            params={"namespace": namespace, "filter": name_filter(name), "page_size": 1},
        )
        return next(iter(found.get("pipelines") or []), None)

    def find_version(self, user: str, pipeline_id: str, name: str) -> Obj | None:
        found = self._call(
            "GET",
            f"/pipelines/{pipeline_id}/versions",
            user,
            f"finding pipeline version {name!r}",
            params={"filter": name_filter(name), "page_size": 1},
        )
        return next(iter(found.get("pipeline_versions") or []), None)

    # -- experiments -------------------------------------------------------------------------------

    def find_experiment(self, user: str, namespace: str, name: str) -> Obj | None:
        found = self._call(
            "GET",
            "/experiments",
            user,
            f"finding experiment {name!r}",
            params={"namespace": namespace, "filter": name_filter(name), "page_size": 1},
        )
        return next(iter(found.get("experiments") or []), None)

    def create_experiment(self, user: str, namespace: str, name: str) -> Obj:
        body = {"display_name": name, "namespace": namespace}
        return self._call("POST", "/experiments", user, f"creating experiment {name!r}", json=body)

    # -- runs --------------------------------------------------------------------------------------

    def create_run(self, user: str, display_name: str, spec: Obj) -> Obj:
        """Run what `spec` (`run_spec`) says, named `display_name`."""
        body = {"display_name": display_name, **spec}
        return self._call("POST", "/runs", user, f"creating run {display_name!r}", json=body)

    def list_runs(self, user: str, namespace: str, recurring_run_id: str, page_size: int) -> list[Obj]:
        """The newest `page_size` runs a recurring run started."""
        found = self._call(
            "GET",
            "/runs",
            user,
            f"listing the runs of recurring run {recurring_run_id!r}",
            params={
                "namespace": namespace,
                "filter": equals_filter("recurring_run_id", recurring_run_id),
                "sort_by": "created_at desc",
                "page_size": page_size,
            },
        )
        return list(found.get("runs") or [])

    def get_run(self, user: str, run_id: str) -> Obj:
        """The run with its state and `run_details.task_details`, each task's state."""
        return self._call("GET", f"/runs/{run_id}", user, f"reading run {run_id!r}")

    def terminate_run(self, user: str, run_id: str) -> None:
        self._call("POST", f"/runs/{run_id}:terminate", user, f"terminating run {run_id!r}")

    # -- recurring runs ----------------------------------------------------------------------------

    def create_recurring_run(self, user: str, body: Obj) -> Obj:
        """A recurring run as KFP's V2beta1RecurringRun spells it (`trigger`, `mode`, `namespace`...)."""
        name = body.get("display_name")
        return self._call("POST", "/recurringruns", user, f"creating recurring run {name!r}", json=body)

    def get_recurring_run(self, user: str, recurring_run_id: str) -> Obj:
        return self._call(
            "GET", f"/recurringruns/{recurring_run_id}", user, f"reading recurring run {recurring_run_id!r}"
        )

    def list_recurring_runs(self, user: str, namespace: str, name: str | None = None) -> list[Obj]:
        """The recurring runs in `namespace` (those named `name`, when given)."""
        params = (
            {"namespace": namespace}
            if name is None
            else {"namespace": namespace, "filter": name_filter(name)}
        )
        found = self._call("GET", "/recurringruns", user, "listing recurring runs", params=params)
        return list(found.get("recurringRuns") or [])  # KFP's proto spells this one field in camelCase

    def delete_recurring_run(self, user: str, recurring_run_id: str) -> None:
        self._call(
            "DELETE",
            f"/recurringruns/{recurring_run_id}",
            user,
            f"deleting recurring run {recurring_run_id!r}",
        )

    def enable_recurring_run(self, user: str, recurring_run_id: str, enabled: bool = True) -> None:
        verb = "enable" if enabled else "disable"
        self._call(
            "POST",
            f"/recurringruns/{recurring_run_id}:{verb}",
            user,
            f"{verb.rstrip('e')}ing recurring run {recurring_run_id!r}",
        )

    # -- transport ---------------------------------------------------------------------------------

    def _call(self, method: str, path: str, user: str, what: str, **options: Any) -> Obj:
        """One request as `user`; KFP's answer as JSON, its refusal a CubeError with its message."""
        try:
            response = self.session.request(
                method,
                f"{self.url}{PREFIX}{path}",
                headers=self.auth.headers(user),
                timeout=self.timeout,
                **options,
            )
        except requests.RequestException as exc:
            raise BackendUnavailable(
                f"Kubeflow Pipelines at CubePipelines.kfp_url {self.url!r} cannot be reached "
                f"({what}): {type(exc).__name__}"
            ) from None
        if response.status_code >= 400:
            error = ERRORS.get(response.status_code, BackendUnavailable)
            raise error(
                f"Kubeflow Pipelines refused {what} (HTTP {response.status_code}): {_message(response)}"
            )
        if not response.content:
            return {}
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise BackendUnavailable(
                f"Kubeflow Pipelines at CubePipelines.kfp_url {self.url!r} answered {what} with no "
                "JSON object: is it KFP's API server?"
            )
        return body


def _message(response: requests.Response) -> str:
    """KFP's own words: its error body's `message` (grpc-gateway's status) or `error`."""
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:300] or response.reason
    if isinstance(body, dict):
        return str(body.get("message") or body.get("error") or body)
    return str(body)
