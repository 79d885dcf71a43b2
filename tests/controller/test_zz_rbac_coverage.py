"""Least privilege, checked from both sides over the whole end-to-end suite.

Every end-to-end test runs the controller as its service account under deploy/base/rbac.yaml, so a
missing permission fails that test (a denied request). This module runs after them (pytest collects
files in name order) and reports every granted permission that no request of the controller used:
a permission nobody exercises is either dead (remove it from deploy/) or untested (add a test).
"""

from __future__ import annotations

import pytest

from tests.controller.rbac_seen import RBAC_SEEN

# Granted on purpose although no end-to-end test exercises them yet, each with its reason.
NOT_YET_EXERCISED: dict[tuple[str, str, str], str] = {
    ("queueing.dra.io", "workloads", "get"): "read back a Workload whose create found it already there",
    ("core", "pods", "delete"): "evicting a pod group deletes its pods (no end-to-end test of that yet)",
}


def test_every_granted_permission_is_used_by_the_controller() -> None:
    if len(RBAC_SEEN["tests"]) < 5:
        pytest.skip("run with the end-to-end tests of tests/controller: too few ran to judge coverage")
    used = RBAC_SEEN["used"]
    unused = sorted(
        g
        for g in RBAC_SEEN["granted"]
        if (g.role, g.rule, g.api_group, g.resource, g.verb) not in used
        and (g.api_group or "core", g.resource, g.verb) not in NOT_YET_EXERCISED
    )
    assert not unused, "granted but never used by the controller in the end-to-end tests:\n" + "\n".join(
        f"  {g}" for g in unused
    )
