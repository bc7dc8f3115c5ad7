"""The RBAC check of a whole pytest session: every request any emulator served to the workbench, in
whichever tests ran, must be allowed by the ClusterRoles `deploy/base` renders.

`test_rbac.py` proves the other half (nothing granted is unused) from its own tour, which does not
depend on which tests ran; this half covers every path the other tests drive (errors, retries,
re-lists, rollbacks), so it can only be judged once they have all run: at the end of the session,
where a failure is an error reported on the session's last test.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kubernetes import audit, rbac


@pytest.fixture(scope="session", autouse=True)
def rbac_session() -> Iterator[None]:
    yield
    if not len(audit.SESSION):
        return
    problems = rbac.denied(rbac.base_policy(), audit.SESSION)
    if problems:
        pytest.fail(
            f"RBAC: {len(problems)} request(s) that tests of this session saw the workbench make are not "
            f"allowed by the ClusterRoles in {rbac.BASE}:\n  " + "\n  ".join(problems),
            pytrace=False,
        )
