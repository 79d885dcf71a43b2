"""The pod-gated kinds' adapters, pure: the pods their controllers create, each pod's group, the
Workloads (names, owners, pod sets) and bad input named by object and field."""

from __future__ import annotations

from typing import Any

import pytest

from queueing.api.apps import Deployment, LeaderWorkerSet, StatefulSet
from queueing.integrations import deployment, leaderworkerset, statefulset
from queueing.integrations.pod_kinds import group_for, kind_of, membership_of
from queueing.integrations.podgated import with_membership
from queueing.scheduling.jobs import WorkloadError

TEMPLATE = {
    "metadata": {"labels": {"app": "x", "queueing.dra.io/queue-name": "lq"}},
    "spec": {
        "containers": [{"name": "main", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}],
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu-8"}],
    },
}


def meta(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": "ml",
        "uid": f"uid-{name}",
        "labels": {"queueing.dra.io/queue-name": "lq"},
    }


def test_statefulset_is_one_gang_owned_by_it() -> None:
    sts = StatefulSet.model_validate({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta("kv"),
                                      "spec": {"replicas": 3, "template": TEMPLATE}})  # fmt: skip
    pods = statefulset.pods_of(sts)
    assert [p.name for p in pods] == ["kv-0", "kv-1", "kv-2"] and {kind_of(p) for p in pods} == {
        "StatefulSet"
    }
    m = membership_of(pods[0], lambda ns, n: sts if (ns, n) == ("ml", "kv") else None)
    assert m is not None and m.total == 3 and m.pod_set == "main" and m.group.startswith("statefulset-kv-")
    group = group_for("ml", m.group, [with_membership(p, m) for p in pods], lambda ns, n: sts)
    wl = group.workload({}, {})
    assert wl is not None and wl.name == m.group and len(wl.name) <= 63
    assert [(ps.name, ps.count) for ps in wl.spec.pod_sets] == [("main", 3)]
    assert [(o.kind, o.name, o.uid, o.controller) for o in wl.metadata.owner_references or []] == [
        ("StatefulSet", "kv", "uid-kv", True)
    ]
    # an unknown StatefulSet (not queued, or not seen yet): the pod waits, ungrouped
    assert membership_of(pods[0], lambda ns, n: None) is None
    sts.spec.replicas = 0
    assert statefulset.StatefulSetGroup("ml", m.group, [], sts).finished() == (True, True)  # scaled to 0


def test_each_deployment_pod_is_its_own_workload() -> None:
    dep = Deployment.model_validate({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta("chat"),
                                     "spec": {"replicas": 2, "template": TEMPLATE}})  # fmt: skip
    pod = deployment.pod_of(dep, "chat-abc12")
    pod.metadata.uid = "uid-pod"
    m = membership_of(pod, lambda ns, n: None)
    assert m is not None and (m.total, m.pod_set) == (1, "main") and m.group.startswith("pod-chat-abc12-")
    wl = group_for("ml", m.group, [with_membership(pod, m)], lambda ns, n: None).workload({}, {})
    assert wl is not None and [(o.kind, o.name) for o in wl.metadata.owner_references or []] == [
        ("Pod", "chat-abc12")
    ]


def test_a_leaderworkerset_group_is_a_leader_and_its_workers() -> None:
    lws = LeaderWorkerSet.model_validate({
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": meta("vllm"),
        "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 3, "workerTemplate": TEMPLATE}},
    })  # fmt: skip
    pods = leaderworkerset.pods_of(lws)
    assert [p.name for p in pods] == ["vllm-0", "vllm-0-1", "vllm-0-2", "vllm-1", "vllm-1-1", "vllm-1-2"]
    ms = [leaderworkerset.membership(p) for p in pods]
    assert all(m is not None for m in ms)
    groups = {m.group for m in ms if m is not None}
    assert len(groups) == 2 and all(g.startswith("leaderworkerset-vllm-") for g in groups)
    first = [
        with_membership(p, m)
        for p, m in zip(pods, ms, strict=True)
        if m is not None and m.group == ms[0].group
    ]  # type: ignore[union-attr]
    wl = group_for("ml", first[0].labels["queueing.dra.io/pod-group"], first, lambda ns, n: None,
                   lambda ns, n: lws).workload({}, {})  # fmt: skip
    assert wl is not None
    assert [(ps.name, ps.count) for ps in wl.spec.pod_sets] == [("leader", 1), ("worker", 2)]
    assert [o.kind for o in wl.metadata.owner_references or []] == ["LeaderWorkerSet"]


def test_bad_leaderworkerset_labels_name_the_pod_and_field() -> None:
    lws = LeaderWorkerSet.model_validate({
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": meta("vllm"),
        "spec": {"leaderWorkerTemplate": {"size": 2, "workerTemplate": TEMPLATE}},
    })  # fmt: skip
    pod = leaderworkerset.pods_of(lws)[0]
    bad = pod.model_copy(deep=True)
    bad.metadata.annotations = {**bad.annotations, leaderworkerset.SIZE_ANNOTATION: "two"}
    with pytest.raises(
        WorkloadError, match=r"Pod ml/vllm-0: metadata.annotations\[leaderworkerset.sigs.k8s.io/size\]"
    ):
        leaderworkerset.membership(bad)
    bad = pod.model_copy(deep=True)
    bad.metadata.labels = {**bad.labels, leaderworkerset.GROUP_INDEX_LABEL: "x"}
    with pytest.raises(
        WorkloadError, match=r"Pod ml/vllm-0: metadata.labels\[leaderworkerset.sigs.k8s.io/group-index\]"
    ):
        leaderworkerset.membership(bad)
