"""``PodOwners`` kept by informer deltas answers as a pass over the informer's pods does: after every
delta of a generated stream (pods created, relabelled, re-owned, updated, deleted), for every
Workload UID and owner UID, the same pods as the same objects in the same (key) order; and its
verify check catches an index that missed a delta."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queueing.api.core import Pod
from queueing.api.v1beta1 import WORKLOAD_UID_LABEL
from queueing.cache.pod_owners import PodOwners
from queueing.dra.verify import VerifyError

UIDS = ["", "wl-a", "wl-b", "wl-c"]
OWNERS = ["job-1", "job-2", "rs-3"]


def pod(name: str, ns: str, uid: str, owner: str | None, controller: bool, version: int) -> Pod:
    meta: dict[str, object] = {"name": name, "namespace": ns, "resourceVersion": str(version)}
    if uid:
        meta["labels"] = {WORKLOAD_UID_LABEL: uid, "other": "x"}
    if owner is not None:
        meta["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": owner, "uid": owner, "controller": controller},
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "uid": "cm-uid"},
        ]
    return Pod.model_validate({"metadata": meta, "spec": {"containers": [{"name": "c", "image": "i"}]}})


def scan(pods: dict[str, Pod]) -> tuple[dict[str, list[Pod]], dict[str, list[Pod]]]:
    """What a pass over the informer's pods (in key order) gives: the general computation."""
    by_uid: dict[str, list[Pod]] = {}
    by_owner: dict[str, list[Pod]] = {}
    for k in sorted(pods):
        p = pods[k]
        by_uid.setdefault(p.labels.get(WORKLOAD_UID_LABEL, ""), []).append(p)
        for o in p.metadata.owner_references or []:
            if o.controller:
                by_owner.setdefault(o.uid, []).append(p)
    return by_uid, by_owner


_delta = st.tuples(
    st.sampled_from(["p0", "p1", "p2", "p3", "p4", "p10"]),
    st.sampled_from(["default", "team"]),
    st.sampled_from([*UIDS, None]),  # None: delete
    st.sampled_from([*OWNERS, None]),
    st.booleans(),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_delta, max_size=40))
def test_kept_index_answers_as_a_pass_over_the_pods(
    deltas: list[tuple[str, str, str | None, str | None, bool]],
) -> None:
    index = PodOwners()
    pods: dict[str, Pod] = {}  # the informer's cache
    for version, (name, ns, uid, owner, controller) in enumerate(deltas):
        key = f"{ns}/{name}"
        old = pods.get(key)
        if uid is None:
            if old is not None:
                del pods[key]
                index.apply(old, None)
        else:
            new = pod(name, ns, uid, owner, controller, version)
            pods[key] = new
            index.apply(old, new)
        index.check(pods.values())
        by_uid, by_owner = scan(pods)
        for u in UIDS:
            assert [id(p) for p in index.labelled(u)] == [id(p) for p in by_uid.get(u, [])]
        for o in [*OWNERS, "cm-uid"]:
            assert [id(p) for p in index.controlled_by(o)] == [id(p) for p in by_owner.get(o, [])]


def test_check_catches_a_missed_delta() -> None:
    index = PodOwners()
    a = pod("a", "default", "wl-a", "job-1", True, 1)
    index.apply(None, a)
    moved = pod("a", "default", "wl-b", "job-1", True, 2)  # relabelled, and the delta never came
    with pytest.raises(VerifyError, match="PodOwners"):
        index.check([moved])
