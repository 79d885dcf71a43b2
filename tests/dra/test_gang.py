"""Gang placement: all pods or none, backtracking across pods, shared claims, node capacity,
transactions and explanations."""

from __future__ import annotations

from typing import Any

import pytest
from dra_helpers import device_class
from hypothesis import given, settings
from hypothesis import strategies as st

from queueing.api.core import Node, Pod
from queueing.api.resource import ResourceClaim, ResourceClaimTemplate, ResourceSlice
from queueing.dra.errors import AllocationError
from queueing.dra.gang import ClusterState, place_gang

DRIVER = "gpu.example.com"
GPU = device_class("gpu", f'device.driver == "{DRIVER}"')


def node(
    name: str, cpu: str = "64", labels: dict[str, str] | None = None, taints: list[Any] | None = None
) -> Node:
    spec: dict[str, Any] = {"taints": taints} if taints else {}
    return Node.model_validate(
        {
            "metadata": {"name": name, "labels": labels or {}},
            "spec": spec,
            "status": {"allocatable": {"cpu": cpu, "memory": "256Gi", "pods": "110"}},
        }
    )


def gpus(node_name: str, n: int) -> ResourceSlice:
    return ResourceSlice.model_validate(
        {
            "metadata": {"name": f"{node_name}-gpus"},
            "spec": {
                "driver": DRIVER,
                "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
                "nodeName": node_name,
                "devices": [{"name": f"gpu-{i}", "attributes": {"index": {"int": i}}} for i in range(n)],
            },
        }
    )


def template(name: str, count: int) -> ResourceClaimTemplate:
    return ResourceClaimTemplate.model_validate(
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [{"name": "g", "exactly": {"deviceClassName": "gpu", "count": count}}]
                    }
                }
            },
        }
    )


def pod(name: str, *, tmpl: str | None = None, shared: str | None = None, cpu: str = "1", **spec: Any) -> Pod:
    claims = []
    if tmpl:
        claims.append({"name": "gpus", "resourceClaimTemplateName": tmpl})
    if shared:
        claims.append({"name": "shared", "resourceClaimName": shared})
    return Pod.model_validate(
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}],
                "resourceClaims": claims,
                **spec,
            },
        }
    )


def test_gang_fills_two_nodes() -> None:
    state = ClusterState(
        [node("n1"), node("n2")], [gpus("n1", 4), gpus("n2", 4)], [GPU], templates=[template("two", 2)]
    )
    r = place_gang([pod(f"w{i}", tmpl="two") for i in range(4)], state)
    assert r.placed and r.transaction is not None
    assert r.nodes == {"default/w0": "n1", "default/w1": "n1", "default/w2": "n2", "default/w3": "n2"}
    devices = [
        (p.node, res.device) for p in r.placements for ca in p.claims for res in ca.allocation.devices.results
    ]
    assert len(devices) == len(set(devices)) == 8
    # per-pod claims come from the template, named after the pod
    assert [ca.name for p in r.placements for ca in p.claims] == [f"w{i}-gpus" for i in range(4)]


def test_backtracking_moves_an_earlier_pod() -> None:
    # first fit puts "small" on n1 (4 GPUs) and then "big" (4 GPUs) fits nowhere; backtracking moves small
    state = ClusterState(
        [node("n1"), node("n2")],
        [gpus("n1", 4), gpus("n2", 1)],
        [GPU],
        templates=[template("one", 1), template("four", 4)],
    )
    r = place_gang([pod("small", tmpl="one"), pod("big", tmpl="four")], state)
    assert r.placed
    assert r.nodes == {"default/small": "n2", "default/big": "n1"}


def test_gang_gets_nothing_when_one_pod_cannot_fit_and_state_is_unchanged() -> None:
    state = ClusterState(
        [node("n1"), node("n2")], [gpus("n1", 4), gpus("n2", 3)], [GPU], templates=[template("four", 4)]
    )
    before = (dict(state.usage.devices), [dict(u) for u in state.used])
    r = place_gang([pod("a", tmpl="four"), pod("b", tmpl="four")], state)
    assert not r.placed and r.transaction is None
    assert (dict(state.usage.devices), [dict(u) for u in state.used]) == before
    e = r.explanation
    assert e is not None and e.pod == "default/b" and e.best is not None
    assert e.best.node == "n2" and e.best.short_by == 1 and e.best.claim == "default/b-gpus"
    assert (
        "pod default/b (pod 2 of 2)" in e.message
        and "best node n2" in e.message
        and "3 available" in e.message
    )


def test_shared_claim_is_allocated_once_and_pins_its_pods() -> None:
    shared = ResourceClaim.model_validate(
        {
            "metadata": {"name": "fabric", "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu"}}]}},
        }
    )
    # only n2 has a GPU, so the shared claim lands there and both pods must follow
    state = ClusterState([node("n1"), node("n2")], [gpus("n2", 1)], [GPU], claims=[shared])
    r = place_gang([pod("a", shared="fabric"), pod("b", shared="fabric")], state)
    assert r.placed
    assert r.nodes == {"default/a": "n2", "default/b": "n2"}
    allocated = [ca.name for p in r.placements for ca in p.claims]
    assert allocated == ["fabric"]  # once, with the first pod
    assert r.transaction is not None
    committed = r.transaction.commit()
    assert [c.name for c in committed] == ["fabric"]
    assert state.claims["default/fabric"].status.allocation is not None


def test_already_allocated_shared_claim_restricts_nodes() -> None:
    shared = ResourceClaim.model_validate(
        {
            "metadata": {"name": "fabric", "namespace": "default"},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [{"request": "g", "driver": DRIVER, "pool": "n2", "device": "gpu-0"}]
                    },
                    "nodeSelector": {
                        "nodeSelectorTerms": [
                            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}
                        ]
                    },
                }
            },
        }
    )
    state = ClusterState([node("n1"), node("n2")], [gpus("n1", 1), gpus("n2", 1)], [GPU], claims=[shared])
    r = place_gang([pod("a", shared="fabric")], state)
    assert r.placed and r.nodes == {"default/a": "n2"}
    assert r.placements[0].claims == ()


def test_node_cpu_counts_running_pods() -> None:
    running = pod("running", cpu="3", nodeName="n1")
    state = ClusterState([node("n1", cpu="4"), node("n2", cpu="4")], [], [GPU], pods=[running])
    r = place_gang([pod("a", cpu="2"), pod("b", cpu="2")], state)
    assert r.placed and r.nodes == {"default/a": "n2", "default/b": "n2"}
    r.transaction.discard()  # type: ignore[union-attr]
    r2 = place_gang([pod("a", cpu="2"), pod("b", cpu="2"), pod("c", cpu="2")], state)
    assert not r2.placed and r2.explanation is not None
    assert r2.explanation.best is not None and r2.explanation.best.kind == "cpu"
    assert "cpu: needs 2, 1 free" in r2.explanation.message


def test_selectors_affinity_and_taints() -> None:
    nodes = [
        node("n1", labels={"pool": "cpu"}),
        node("n2", labels={"pool": "gpu"}, taints=[{"key": "gpu", "effect": "NoSchedule"}]),
        node("n3", labels={"pool": "gpu"}),
    ]
    state = ClusterState(nodes, [], [GPU])
    r = place_gang([pod("a", nodeSelector={"pool": "gpu"})], state)
    assert r.nodes == {"default/a": "n3"}
    r.transaction.discard()  # type: ignore[union-attr]
    tol = [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    r = place_gang([pod("a", nodeSelector={"pool": "gpu"}, tolerations=tol)], state)
    assert r.nodes == {"default/a": "n2"}
    r.transaction.discard()  # type: ignore[union-attr]
    aff = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": ["gpu"]}]}
                ]
            }
        }
    }
    r = place_gang([pod("a", affinity=aff)], state)
    assert r.nodes == {"default/a": "n1"}
    r.transaction.discard()  # type: ignore[union-attr]
    r = place_gang([pod("a", nodeSelector={"pool": "tpu"})], state)
    assert not r.placed and r.explanation is not None and "nodeSelector" in r.explanation.message


def test_commit_makes_devices_taken_and_discard_gives_them_back() -> None:
    state = ClusterState([node("n1")], [gpus("n1", 2)], [GPU], templates=[template("two", 2)])
    r = place_gang([pod("a", tmpl="two")], state)
    assert r.placed and r.transaction is not None
    with pytest.raises(RuntimeError):
        state.begin()  # one open transaction at a time
    r.transaction.discard()
    with pytest.raises(RuntimeError):
        r.transaction.commit()
    assert state.usage.devices == {}
    r = place_gang([pod("a", tmpl="two")], state)
    assert r.transaction is not None
    r.transaction.commit()
    assert len(state.usage.devices) == 2 and "default/a-gpus" in state.claims
    r2 = place_gang([pod("b", tmpl="two")], state)
    assert not r2.placed


def test_work_bound_is_reported() -> None:
    state = ClusterState(
        [node(f"n{i}") for i in range(5)],
        [gpus(f"n{i}", 1) for i in range(5)],
        [GPU],
        templates=[template("one", 1), template("two", 2)],
    )
    pods = [pod("a", tmpl="one"), pod("b", tmpl="one"), pod("c", tmpl="two")]
    r = place_gang(pods, state, max_node_checks=3)
    assert not r.placed and r.explanation is not None and r.explanation.bound_hit
    assert "node checks" in r.explanation.message
    assert state.usage.devices == {}


def test_missing_template_is_an_input_error() -> None:
    state = ClusterState([node("n1")], [], [GPU])
    with pytest.raises(
        AllocationError, match=r"Pod default/a: spec.resourceClaims\[0\].resourceClaimTemplateName"
    ):
        place_gang([pod("a", tmpl="nope")], state)
    state.begin().discard()  # the failed attempt left no transaction open


def test_identical_pods_do_not_explore_permutations() -> None:
    # 6 identical 1-GPU pods over 3 nodes with 2 GPUs, plus a 3-GPU pod that never fits:
    # with symmetry breaking the failing search stays small
    state = ClusterState(
        [node(f"n{i}") for i in range(3)],
        [gpus(f"n{i}", 2) for i in range(3)],
        [GPU],
        templates=[template("one", 1), template("three", 3)],
    )
    pods = [pod(f"w{i}", tmpl="one") for i in range(6)] + [pod("big", tmpl="three")]
    r = place_gang(pods, state)
    assert not r.placed
    assert r.node_checks < 200


@settings(max_examples=80, deadline=None)
@given(
    node_gpus=st.lists(st.integers(0, 4), min_size=1, max_size=4),
    pod_gpus=st.lists(st.integers(1, 4), min_size=1, max_size=5),
)
def test_gang_agrees_with_brute_force(node_gpus: list[int], pod_gpus: list[int]) -> None:
    """Backtracking with symmetry breaking finds a placement whenever one exists."""
    names = [f"n{i}" for i in range(len(node_gpus))]
    state = ClusterState(
        [node(n) for n in names],
        [gpus(n, k) for n, k in zip(names, node_gpus, strict=True) if k],
        [GPU],
        templates=[template(f"t{k}", k) for k in range(1, 5)],
    )
    pods = [pod(f"p{i}", tmpl=f"t{k}") for i, k in enumerate(pod_gpus)]
    r = place_gang(pods, state)

    def fits(i: int, free: list[int]) -> bool:
        if i == len(pod_gpus):
            return True
        for j in range(len(free)):
            if free[j] >= pod_gpus[i]:
                free[j] -= pod_gpus[i]
                if fits(i + 1, free):
                    return True
                free[j] += pod_gpus[i]
        return False

    assert r.placed == fits(0, list(node_gpus))
    if r.placed:
        used: dict[str, int] = {}
        for p in r.placements:
            used[p.node] = used.get(p.node, 0) + sum(
                len(ca.allocation.devices.results or []) for ca in p.claims if ca.allocation.devices
            )
        assert all(used[n] <= node_gpus[names.index(n)] for n in used)
        r.transaction.discard()  # type: ignore[union-attr]
    else:
        assert r.explanation is not None and r.explanation.pod
    assert state.usage.devices == {}
