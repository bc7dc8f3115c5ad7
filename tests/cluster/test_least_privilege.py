"""Least privilege, proven by Kubernetes' own RBAC authorizer. The other cluster tests made the
workbench (with its ServiceAccount's token) and a user server (with a `default-editor` token) do what
they do; the API server's audit log holds every request they made. Here, for each rule of the shipped
ClusterRoles in turn, the rule is taken out of the role on the cluster and those requests are asked
again of the authorizer (SubjectAccessReview): every rule must be the one that grants at least one of
them (removing it denies a request some test made), and with all rules every request is granted.

The user role is checked as a pod bound to `cube-jupyter-user` alone sees it (the standalone install,
where `create_namespaces` binds that role and nothing else): in Kubeflow, `kubeflow-edit` also
carries Kubernetes' `edit` rules, which would hide a missing one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from cube_jupyter.kube.namespace_objects import POD_ROLE_BINDING
from tests.cluster.conftest import (
    AGENT,
    OVERLAY,
    USERS,
    WORKBENCH_ACCOUNT,
    WORKBENCH_NAMESPACE,
    Kubectl,
    api_client,
)
from tests.cluster.controlplane import AUDIT_LOG, State

WORKBENCH_USER = f"system:serviceaccount:{WORKBENCH_NAMESPACE}:{WORKBENCH_ACCOUNT}"
# Rules the role carries for another program running as the same ServiceAccount: no request of the
# workbench's needs them, so the audit log cannot show one.
NOT_THE_WORKBENCHS = {
    "workflowtaskresults": "Argo's executor (>= 3.4), in each pipeline step pod, reports the step's outputs",
}
PROPAGATION = 10.0  # seconds the authorizer may take to see a changed role


@dataclass(frozen=True)
class Request:
    """What the authorizer decides on: the verb and the resource (or the path of a non-resource URL)."""

    verb: str
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""

    def review(self, user: str, groups: list[str]) -> k8s.V1SubjectAccessReview:
        spec = k8s.V1SubjectAccessReviewSpec(user=user, groups=groups)
        if self.path:
            spec.non_resource_attributes = k8s.V1NonResourceAttributes(path=self.path, verb=self.verb)
        else:
            spec.resource_attributes = k8s.V1ResourceAttributes(
                verb=self.verb,
                group=self.group,
                resource=self.resource,
                subresource=self.subresource or None,
                namespace=self.namespace or None,
                name=self.name or None,
            )
        return k8s.V1SubjectAccessReview(spec=spec)

    def __str__(self) -> str:
        if self.path:
            return f"{self.verb} {self.path}"
        what = "/".join(p for p in (self.group or "core", self.resource, self.subresource) if p)
        return f"{self.verb} {what}" + (
            f" {self.namespace}/{self.name}" if self.name else f" in {self.namespace or '*'}"
        )


def audited(state: State, user: str) -> dict[Request, set[str]]:
    """Each distinct request `user` made during the session, and the tests that made it."""
    made: dict[Request, set[str]] = {}
    for line in (Path(state.directory) / AUDIT_LOG).read_text().splitlines():
        event = json.loads(line)
        if event.get("user", {}).get("username") != user or event.get("stage") != "ResponseComplete":
            continue
        agent = event.get("userAgent", "")
        if not agent.startswith(f"{AGENT} "):  # a test playing a person, or another program
            continue
        test = agent.partition(f"{AGENT} ")[2]
        ref = event.get("objectRef")
        if ref is None:
            request = Request(event["verb"], path=event["requestURI"].split("?")[0])
        else:
            name = ref.get("name", "") if event["verb"] not in ("create", "list", "watch") else ""
            request = Request(
                event["verb"],
                ref.get("apiGroup", ""),
                ref.get("resource", ""),
                ref.get("subresource", ""),
                ref.get("namespace", ""),
                name,
            )
        made.setdefault(request, set()).add(test)
    return made


def denied(
    auth: k8s.AuthorizationV1Api, made: dict[Request, set[str]], user: str, groups: list[str]
) -> list[Request]:
    return [request for request in made if not allowed(auth, request.review(user, groups))]


def denied_once_settled(
    auth: k8s.AuthorizationV1Api, made: dict[Request, set[str]], user: str, groups: list[str]
) -> list[Request]:
    """What stays denied once the authorizer's RBAC cache has caught up with a binding or role just
    written (it is an informer: a RoleBinding made a moment ago may not be seen yet)."""
    deadline = time.monotonic() + PROPAGATION
    lost = denied(auth, made, user, groups)
    while lost and time.monotonic() < deadline:
        time.sleep(0.2)
        lost = denied(auth, made, user, groups)
    return lost


def allowed(auth: k8s.AuthorizationV1Api, review: k8s.V1SubjectAccessReview) -> bool:
    """The authorizer's own decision on `review`."""
    status = auth.create_subject_access_review(review).status
    return bool(status is not None and status.allowed)


def shipped_role(name: str) -> dict[str, Any]:
    for doc in yaml.safe_load_all((OVERLAY.parents[1] / "base" / "rbac.yaml").read_text()):
        if doc and doc["kind"] == "ClusterRole" and doc["metadata"]["name"] == name:
            return dict(doc)
    raise AssertionError(f"deploy/base/rbac.yaml has no ClusterRole {name}")


@dataclass
class Mutation:
    rule: dict[str, Any]
    denied: list[str]  # what broke: "request — tests that made it", or a real operation's name


# A real operation, replayed dry-run (`dryRun=All`: authorization and admission run, nothing is
# stored), for what no SubjectAccessReview shows: the RBAC escalation check on a binding.
Act = tuple[str, Callable[[], bool]]


def mutations(
    rbac: k8s.RbacAuthorizationV1Api,
    auth: k8s.AuthorizationV1Api,
    role: str,
    made: dict[Request, set[str]],
    user: str,
    groups: list[str],
    acts: tuple[Act, ...],
) -> Iterator[Mutation]:
    """For each rule of `role`: the requests denied, and the acts refused, while the role goes without it."""

    def broken() -> list[str]:
        lost = [f"{r} — {', '.join(sorted(made[r]))}" for r in denied(auth, made, user, groups)]
        return lost + [name for name, act in acts if not act()]

    rules = list(rbac.read_cluster_role(role).rules or [])
    try:
        for index, rule in enumerate(rules):
            rbac.patch_cluster_role(role, {"rules": [r for i, r in enumerate(rules) if i != index]})
            deadline = time.monotonic() + PROPAGATION
            lost = broken()
            while not lost and time.monotonic() < deadline:  # the authorizer's cache catching up
                time.sleep(0.2)
                lost = broken()
            yield Mutation(rbac.api_client.sanitize_for_serialization(rule), lost)
    finally:
        rbac.patch_cluster_role(role, {"rules": rules})
    denied_once_settled(auth, made, user, groups)


def prove(
    admin: k8s.ApiClient,
    role: str,
    made: dict[Request, set[str]],
    user: str,
    groups: list[str],
    acts: tuple[Act, ...] = (),
) -> dict[str, list[str]]:
    """rule → what removing it breaks; fails naming any rule nothing needs."""
    rbac, auth = k8s.RbacAuthorizationV1Api(admin), k8s.AuthorizationV1Api(admin)
    assert made, f"the audit log holds no request of {user}"
    lost = denied_once_settled(auth, made, user, groups)
    assert lost == [], "a request the tests made is denied with every rule"
    assert all(act() for _, act in acts), "a real operation is refused with every rule"
    caught: dict[str, list[str]] = {}
    unneeded = []
    for mutation in mutations(rbac, auth, role, made, user, groups, acts):
        key = json.dumps(mutation.rule, sort_keys=True)
        if not mutation.denied and not set(mutation.rule.get("resources", [])) & set(NOT_THE_WORKBENCHS):
            unneeded.append(key)
        caught[key] = mutation.denied
    assert unneeded == [], f"{role}: no test needs these rules: {unneeded}"
    return caught


def binding_of_the_user_role(kubeconfig: Path) -> Act:
    """The RoleBinding `create_namespaces` makes (its pods' ServiceAccount to cube-jupyter-user), made
    again dry-run as the workbench: the API server grants it only to who may `bind` that role."""
    rbac = k8s.RbacAuthorizationV1Api(api_client(kubeconfig, agent="least-privilege replay"))
    namespace = USERS["alice@example.com"]
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": POD_ROLE_BINDING, "namespace": namespace},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "cube-jupyter-user",
        },
        "subjects": [{"kind": "ServiceAccount", "name": "default-editor", "namespace": namespace}],
    }

    def act() -> bool:
        try:
            rbac.create_namespaced_role_binding(namespace, binding, dry_run="All")  # type: ignore[arg-type]
        except k8s.ApiException as refused:
            return refused.status == 409  # one is there already: authorization and the check passed
        return True

    return ("create RoleBinding cube-jupyter-pods to cube-jupyter-user, dry run (escalation check)", act)


def test_every_rule_of_the_workbenchs_role_is_needed_and_enough(
    installed: State, admin: k8s.ApiClient, workbench_kubeconfig: Path, record_property: Any
) -> None:
    made = audited(installed, WORKBENCH_USER)
    groups = [
        "system:serviceaccounts",
        f"system:serviceaccounts:{WORKBENCH_NAMESPACE}",
        "system:authenticated",
    ]
    acts = (binding_of_the_user_role(workbench_kubeconfig),)
    caught = prove(admin, "cube-jupyter", made, WORKBENCH_USER, groups, acts)
    assert len(caught) == len(shipped_role("cube-jupyter")["rules"])
    record_property("cube-jupyter", caught)
    for rule, requests in caught.items():
        print(f"cube-jupyter {rule}\n  caught by: {requests[0]}")


def test_every_rule_of_the_user_role_is_needed_and_enough(
    installed: State, admin: k8s.ApiClient, kubectl: Kubectl, record_property: Any
) -> None:
    namespace = USERS["alice@example.com"]
    editor = f"system:serviceaccount:{namespace}:default-editor"
    made = {r: tests for r, tests in audited(installed, editor).items() if r.namespace == namespace}
    # the same requests, from a pod bound to cube-jupyter-user only (create_namespaces' RoleBinding)
    probe = "user-role-probe"
    kubectl.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": probe, "namespace": namespace},
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": probe, "namespace": namespace},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "cube-jupyter-user",
                },
                "subjects": [{"kind": "ServiceAccount", "name": probe, "namespace": namespace}],
            },
        ]
    )
    user = f"system:serviceaccount:{namespace}:{probe}"
    groups = ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"]
    caught = prove(admin, "cube-jupyter-user", made, user, groups)
    record_property("cube-jupyter-user", caught)
    for rule, requests in caught.items():
        print(f"cube-jupyter-user {rule}\n  caught by: {requests[0] if requests else NOT_THE_WORKBENCHS}")


@pytest.fixture(scope="module", autouse=True)
def _audit_is_on(installed: State) -> None:
    assert (Path(installed.directory) / AUDIT_LOG).is_file(), "the API server keeps no audit log"
