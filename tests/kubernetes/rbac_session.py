"""The RBAC check of a whole pytest session: every request any emulator served to the workbench, in
whichever tests ran, must be allowed by the ClusterRoles `deploy/base` renders.

`test_rbac.py` proves the other half (nothing granted is unused) from its own tour, which does not
depend on which tests ran; this half covers every path the other tests drive (errors, retries,
re-lists, rollbacks), so it can only be judged once they have all run: at the end of the session,
where a failure is an error reported on the session's last test, naming the test that first made
each request.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kubernetes import audit, rbac


@pytest.fixture(autouse=True)
def rbac_source(request: pytest.FixtureRequest) -> None:
    """Requests recorded from now on were made by this test."""
    audit.SESSION.source = request.node.nodeid


@pytest.fixture(scope="session", autouse=True)
def rbac_session() -> Iterator[None]:
    yield
    if not len(audit.SESSION):
        return
    policy = rbac.base_policy()
    problems = [
        f"{problem}\n    first made in {audit.SESSION.first_source(request)}"
        for request in dict.fromkeys(audit.SESSION)
        for problem in rbac.denied(policy, [request])
    ]
    if problems:
        pytest.fail(
            f"RBAC: {len(problems)} request(s) the workbench made in this session's tests are not "
            f"allowed by the ClusterRoles in {rbac.BASE}:\n  " + "\n  ".join(problems),
            pytrace=False,
        )
