"""Extended resources backed by DRA (DRAExtendedResource) and claims shared by containers and pods:
gang placement, the implicit claim, node allocatable, and what quota is charged (charge_gang)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queueing.api.core import Node, Pod
from queueing.api.quantity import Quantity
from queueing.api.resource import DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice
from queueing.dra.charges import charge_gang
from queueing.dra.errors import AllocationError
from queueing.dra.extended import (
    EXTENDED_RESOURCE_CLAIM_ANNOTATION,
    extended_resource_classes,
    implicit_claim,
    is_dra_extended_resource_name,
    is_extended_resource_claim,
    pod_extended_requests,
)
from queueing.dra.features import Features
from queueing.dra.gang import ClusterState, place_gang

DRIVER = "gpu.nvidia.com"
CLASS = "gpu.nvidia.com"
MEM = "143771Mi"  # an H200's memory as NVML reports it (../shared/hardware/h200)
MEM_VALUE = Quantity.parse(MEM).value


def gpu_class(
    ext: str | None = "nvidia.com/gpu", name: str = CLASS, created: str | None = None
) -> DeviceClass:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}
    if ext:
        spec["extendedResourceName"] = ext
    meta: dict[str, Any] = {"name": name}
    if created:
        meta["creationTimestamp"] = created
    return DeviceClass.model_validate({"metadata": meta, "spec": spec})


def node(name: str, **extra: str) -> Node:
    alloc = {"cpu": "64", "memory": "1Ti", "pods": "110", **extra}
    return Node.model_validate({"metadata": {"name": name}, "status": {"allocatable": alloc}})


def gpus(node_name: str, n: int) -> ResourceSlice:
    return ResourceSlice.model_validate(
        {
            "metadata": {"name": f"{node_name}-gpus"},
            "spec": {
                "driver": DRIVER,
                "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
                "nodeName": node_name,
                "devices": [{"name": f"gpu-{i}", "capacity": {"memory": {"value": MEM}}} for i in range(n)],
            },
        }
    )


def in_use(name: str, node_name: str, devices: list[str]) -> ResourceClaim:
    """A claim already allocated on ``node_name`` (takes those devices)."""
    return ResourceClaim.model_validate(
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": CLASS}}]}},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {"request": "g", "driver": DRIVER, "pool": node_name, "device": d}
                            for d in devices
                        ]
                    }
                }
            },
        }
    )


def template(name: str, count: int = 1) -> ResourceClaimTemplate:
    return ResourceClaimTemplate.model_validate(
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [{"name": "g", "exactly": {"deviceClassName": CLASS, "count": count}}]
                    }
                }
            },
        }
    )


def shared_claim(name: str, owner_job: str | None = None, config: Any = None) -> ResourceClaim:
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": CLASS}}]}},
    }
    if owner_job:
        body["metadata"]["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": owner_job, "uid": "u", "controller": True}
        ]
    if config is not None:
        body["spec"]["devices"]["config"] = [
            {"requests": ["g"], "opaque": {"driver": DRIVER, "parameters": config}}
        ]
    return ResourceClaim.model_validate(body)


def pod(
    name: str,
    *,
    job: str | None = "train",
    limits: dict[str, Any] | None = None,
    claims: list[dict[str, Any]] | None = None,
    containers: list[dict[str, Any]] | None = None,
    init: list[dict[str, Any]] | None = None,
    node_name: str | None = None,
) -> Pod:
    if containers is None:
        res: dict[str, Any] = {"requests": {"cpu": "1", "memory": "1Gi"}}
        if limits:
            res["limits"] = limits
        containers = [{"name": "main", "resources": res}]
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if job:
        meta["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": "u", "controller": True}
        ]
    spec: dict[str, Any] = {"containers": containers, "resourceClaims": claims or []}
    if init:
        spec["initContainers"] = init
    if node_name:
        spec["nodeName"] = node_name
    return Pod.model_validate({"metadata": meta, "spec": spec})


def devices_of(ca: Any) -> list[tuple[str, str]]:
    return [(r.pool, r.device) for r in ca.allocation.devices.results]


# ------------------------------------------------------------------ acceptance
def test_extended_resource_needs_two_matching_free_devices_and_is_charged_to_the_class() -> None:
    # node-a: 3 GPUs, 2 already allocated -> 1 free; node-b: 2 GPUs free
    state = ClusterState(
        [node("node-a"), node("node-b")],
        [gpus("node-a", 3), gpus("node-b", 2)],
        [gpu_class()],
        claims=[in_use("old", "node-a", ["gpu-0", "gpu-1"])],
    )
    p = pod("train-0", limits={"nvidia.com/gpu": "2"})
    r = place_gang([p], state)
    assert r.placed and r.nodes == {"default/train-0": "node-b"}
    pl = r.placements[0]
    assert pl.extended is not None and pl.extended_resources == ("nvidia.com/gpu",)
    assert pl.extended.name == "train-0-extended-resources"
    assert is_extended_resource_claim(pl.extended.claim)
    assert pl.extended.claim.annotations[EXTENDED_RESOURCE_CLAIM_ANNOTATION] == "true"
    # the container's requests (limits stand in) sorted: cpu, memory, nvidia.com/gpu -> index 2
    assert [r_.request for r_ in pl.extended.allocation.devices.results] == ["container-0-request-2"] * 2
    assert sorted(devices_of(pl.extended)) == [("node-b", "gpu-0"), ("node-b", "gpu-1")]
    assert pl.extended_devices == ((DRIVER, "node-b", "gpu-0"), (DRIVER, "node-b", "gpu-1"))
    assert [m.to_dict() for m in pl.extended_mappings] == [
        {"containerName": "main", "resourceName": "nvidia.com/gpu", "requestName": "container-0-request-2"}
    ]
    # the GPUs are not taken from node allocatable (the node does not publish nvidia.com/gpu)
    assert "nvidia.com/gpu" not in dict(pl.node_resources)
    charges = charge_gang(r, state, [p])
    assert charges.for_workload("default/Job/train") == {CLASS: 2, f"{CLASS}/memory": 2 * MEM_VALUE}
    assert [c.source for c in charges.claims] == ["extended-resource"]
    r.transaction.discard()

    # with one more GPU taken on node-b, two free devices exist nowhere: not placed, the implicit claim named
    state2 = ClusterState(
        [node("node-a"), node("node-b")],
        [gpus("node-a", 3), gpus("node-b", 2)],
        [gpu_class()],
        claims=[in_use("old", "node-a", ["gpu-0", "gpu-1"]), in_use("old2", "node-b", ["gpu-1"])],
    )
    r2 = place_gang([p], state2)
    assert not r2.placed and r2.explanation is not None
    assert "default/train-0-extended-resources" in r2.explanation.message
    assert r2.explanation.best is not None and r2.explanation.best.short_by == 1


def test_job_gang_with_extended_resources_takes_one_node_each() -> None:
    state = ClusterState([node("n1"), node("n2")], [gpus("n1", 2), gpus("n2", 2)], [gpu_class()])
    pods = [pod(f"train-{i}", limits={"nvidia.com/gpu": 2}) for i in range(2)]
    r = place_gang(pods, state)
    assert r.placed and sorted(r.nodes.values()) == ["n1", "n2"]
    assert charge_gang(r, state, pods).for_workload("default/Job/train")[CLASS] == 4
    # a third pod cannot fit: the gang gets nothing
    r.transaction.discard()
    r3 = place_gang([*pods, pod("train-2", limits={"nvidia.com/gpu": 2})], state)
    assert not r3.placed and state.usage.devices == {}


def test_explicit_claim_and_extended_resource_of_the_same_class_get_distinct_devices() -> None:
    state = ClusterState(
        [node("n1"), node("n2")], [gpus("n1", 1), gpus("n2", 2)], [gpu_class()], templates=[template("one")]
    )
    p = pod("mix", limits={"nvidia.com/gpu": 1}, claims=[{"name": "gpu", "resourceClaimTemplateName": "one"}])
    r = place_gang([p], state)
    assert r.placed and r.nodes["default/mix"] == "n2"  # n1 has one GPU for two requests
    pl = r.placements[0]
    assert {c.name for c in pl.claims} == {"mix-gpu", "mix-extended-resources"}
    got = [d for ca in pl.claims for d in devices_of(ca)]
    assert sorted(got) == [("n2", "gpu-0"), ("n2", "gpu-1")]  # distinct
    charges = charge_gang(r, state, [p])
    assert charges.for_workload("default/Job/train")[CLASS] == 2
    assert sorted(c.source for c in charges.claims) == ["extended-resource", "template"]


def test_class_without_mapping_leaves_extended_resource_a_node_resource() -> None:
    # no DeviceClass names nvidia.com/gpu: it is counted from node allocatable (device plugin)
    nodes = [node("n1", **{"nvidia.com/gpu": "1"}), node("n2", **{"nvidia.com/gpu": "4"}), node("n3")]
    running = pod("other", job="other", limits={"nvidia.com/gpu": "1"}, node_name="n2")
    state = ClusterState(nodes, [gpus("n3", 8)], [gpu_class(ext=None)], pods=[running])
    p = pod("train-0", limits={"nvidia.com/gpu": "2"})
    r = place_gang([p], state)
    assert r.placed and r.nodes["default/train-0"] == "n2"
    pl = r.placements[0]
    assert pl.claims == () and pl.extended is None  # no devices: the 8 DRA GPUs on n3 are not used
    assert dict(pl.node_resources)["nvidia.com/gpu"] == 2
    assert charge_gang(r, state, [p]).for_workload("default/Job/train") == {}
    r.transaction.commit()
    # n2 has 4 - 1 - 2 = 1 left, n1 has 1: two more fit nowhere; best node is short by one
    r2 = place_gang([pod("train-1", limits={"nvidia.com/gpu": "2"})], state)
    assert not r2.placed and r2.explanation is not None and r2.explanation.best is not None
    best = r2.explanation.best
    assert best.kind == "resource" and best.short_by == 1 and "nvidia.com/gpu" in best.message


def test_mapped_resource_published_by_a_node_is_served_there_by_the_device_plugin() -> None:
    # as kube-scheduler: a node listing the resource in allocatable serves it as a node resource;
    # DRA serves it only where the node does not publish it
    nodes = [node("n1", **{"nvidia.com/gpu": "8"}), node("n2")]
    state = ClusterState(nodes, [gpus("n2", 2)], [gpu_class()])
    r = place_gang([pod("a", limits={"nvidia.com/gpu": 2}), pod("b", limits={"nvidia.com/gpu": 2})], state)
    assert r.placed
    by_pod = {p.pod: p for p in r.placements}
    assert by_pod["default/a"].node == "n1" and by_pod["default/a"].extended is None
    # b is identical to a, so it is tried from n1 too and fits there as well
    assert by_pod["default/b"].node == "n1"
    r.transaction.discard()
    big = pod("big", limits={"nvidia.com/gpu": 9})  # more than n1 publishes
    assert not place_gang([big], state).placed  # n2 has only 2 DRA GPUs
    r3 = place_gang(
        [pod("c", limits={"nvidia.com/gpu": 2}, job=None)],
        ClusterState([node("n2")], [gpus("n2", 2)], [gpu_class()]),
    )
    assert r3.placed and r3.placements[0].extended is not None


def test_implicit_device_class_resource_name_works_without_extended_resource_name() -> None:
    state = ClusterState([node("n1")], [gpus("n1", 2)], [gpu_class(ext=None)])
    p = pod("a", limits={f"deviceclass.resource.kubernetes.io/{CLASS}": 1})
    r = place_gang([p], state)
    assert r.placed and r.placements[0].extended is not None
    assert len(r.placements[0].extended.picks) == 1


def test_two_containers_naming_one_claim_share_its_device() -> None:
    state = ClusterState([node("n1")], [gpus("n1", 1)], [gpu_class()], templates=[template("one")])
    both = {"requests": {"cpu": "1"}, "claims": [{"name": "gpu"}]}
    p = pod(
        "duo",
        claims=[{"name": "gpu", "resourceClaimTemplateName": "one"}],
        containers=[{"name": "a", "resources": both}, {"name": "b", "resources": both}],
    )
    r = place_gang([p], state)
    assert r.placed  # one device on the node is enough for both containers
    assert [devices_of(ca) for ca in r.placements[0].claims] == [[("n1", "gpu-0")]]
    assert charge_gang(r, state, [p]).for_workload("default/Job/train") == {
        CLASS: 1,
        f"{CLASS}/memory": MEM_VALUE,
    }
    r.transaction.discard()
    bad = pod("bad", containers=[{"name": "a", "resources": {"claims": [{"name": "nope"}]}}])
    with pytest.raises(AllocationError, match=r"spec\.containers\[0\]\.resources\.claims\[0\]\.name"):
        place_gang([bad], state)


def test_pods_sharing_a_claim_use_one_allocation_config_untouched_charged_once_to_the_owner() -> None:
    mps = {"apiVersion": "gpu.nvidia.com/v1beta1", "kind": "GpuConfig", "sharing": {"strategy": "MPS"}}
    ref = [{"name": "gpu", "resourceClaimName": "shared-gpu"}]
    pods = [pod(f"train-{i}", claims=ref) for i in range(3)]
    results = {}
    for config in (None, mps):
        state = ClusterState(
            [node("n1"), node("n2")],
            [gpus("n1", 1), gpus("n2", 1)],
            [gpu_class()],
            claims=[shared_claim("shared-gpu", owner_job="train", config=config)],
        )
        r = place_gang(pods, state)
        assert r.placed
        allocated = [ca for pl in r.placements for ca in pl.claims]
        assert len(allocated) == 1  # allocated once, with the first pod
        results[config is None] = (r.nodes, devices_of(allocated[0]))
        charges = charge_gang(r, state, pods)
        assert charges.for_workload("default/Job/train") == {CLASS: 1, f"{CLASS}/memory": MEM_VALUE}
        assert len(charges.claims) == 1 and charges.claims[0].charged_to == "default/Job/train"
        if config is not None:
            cfg = allocated[0].allocation.devices.config
            assert cfg is not None and cfg[-1].source == "FromClaim"
            assert cfg[-1].opaque is not None and cfg[-1].opaque.parameters == mps
    # the opaque sharing config never changes feasibility or the choice
    assert results[True] == results[False]


def test_claim_shared_across_workloads_is_charged_to_neither_and_reported() -> None:
    ref = [{"name": "gpu", "resourceClaimName": "fabric"}]
    pods = [pod("a-0", job="a", claims=ref), pod("b-0", job="b", claims=ref)]
    for owner in ("a", None):
        state = ClusterState(
            [node("n1")], [gpus("n1", 1)], [gpu_class()], claims=[shared_claim("fabric", owner)]
        )
        r = place_gang(pods, state)
        assert r.placed
        charges = charge_gang(r, state, pods)
        assert charges.for_workload("default/Job/a") == {} and charges.for_workload("default/Job/b") == {}
        (u,) = charges.unowned
        assert u.claim == "default/fabric" and u.users == ("default/Job/a", "default/Job/b")
        assert u.charges[CLASS] == 1  # reported with what it holds
    # no owner and one workload using it: that workload is charged
    state = ClusterState([node("n1")], [gpus("n1", 1)], [gpu_class()], claims=[shared_claim("fabric")])
    r = place_gang(pods[:1], state)
    assert charge_gang(r, state, pods[:1]).for_workload("default/Job/a")[CLASS] == 1


def test_committed_implicit_claim_is_in_use_for_the_next_gang() -> None:
    state = ClusterState([node("n1")], [gpus("n1", 3)], [gpu_class()])
    r = place_gang([pod("a", limits={"nvidia.com/gpu": 2})], state)
    committed = r.transaction.commit()
    (c,) = committed
    assert c.key == "default/a-extended-resources" and is_extended_resource_claim(c)
    assert c.metadata.owner_references and c.metadata.owner_references[0].kind == "Pod"
    assert state.claims[c.key].status.allocation is not None
    assert not place_gang([pod("b", limits={"nvidia.com/gpu": 2})], state).placed
    assert place_gang([pod("b", limits={"nvidia.com/gpu": 1})], state).placed


def test_feature_gate_off_makes_extended_resources_plain_node_resources() -> None:
    state = ClusterState(
        [node("n1")], [gpus("n1", 2)], [gpu_class()], features=Features.parse("DRAExtendedResource=false")
    )
    r = place_gang([pod("a", limits={"nvidia.com/gpu": 1})], state)
    assert not r.placed and r.explanation is not None and r.explanation.best is not None
    assert r.explanation.best.kind == "resource"


def test_non_integer_extended_resource_is_an_input_error() -> None:
    state = ClusterState([node("n1")], [gpus("n1", 2)], [gpu_class()])
    with pytest.raises(
        AllocationError, match=r"Pod default/a: spec\.containers\[0\]\.resources\.requests\[nvidia\.com/gpu\]"
    ):
        place_gang([pod("a", limits={"nvidia.com/gpu": "500m"})], state)


# ------------------------------------------------------------------ upstream request semantics
def test_init_containers_reuse_later_container_requests() -> None:
    mapping = {"nvidia.com/gpu": CLASS}
    gpu = lambda n: {"limits": {"nvidia.com/gpu": n}}  # noqa: E731
    p = pod(
        "p",
        init=[{"name": "setup", "resources": gpu(3)}],
        containers=[{"name": "c1", "resources": gpu(1)}, {"name": "c2", "resources": gpu(1)}],
    )
    # pod level: max(init 3, containers 1 + 1) = 3
    assert pod_extended_requests(p, mapping) == {"nvidia.com/gpu": 3}
    ic = implicit_claim(p, ["nvidia.com/gpu"], mapping)
    assert ic is not None
    reqs = [(r.name, r.exactly.count) for r in ic.claim.spec.devices.requests or [] if r.exactly]
    # containers 1 and 2 (indices after the init container) get their own; the init container reuses
    # both (2 devices) and asks for the third
    assert reqs == [("container-0-request-0", 1), ("container-1-request-0", 1), ("container-2-request-0", 1)]
    setup = [m.request_name for m in ic.mappings if m.container_name == "setup"]
    assert setup == ["container-1-request-0", "container-2-request-0", "container-0-request-0"]

    # fully covered init container: no request of its own
    p2 = pod(
        "p2", init=[{"name": "setup", "resources": gpu(1)}], containers=[{"name": "c", "resources": gpu(1)}]
    )
    ic2 = implicit_claim(p2, ["nvidia.com/gpu"], mapping)
    assert ic2 is not None and [r.name for r in ic2.claim.spec.devices.requests or []] == [
        "container-1-request-0"
    ]

    # a sidecar (restartPolicy Always) runs alongside: its devices add up
    p3 = pod(
        "p3",
        init=[{"name": "side", "restartPolicy": "Always", "resources": gpu(1)}],
        containers=[{"name": "c", "resources": gpu(1)}],
    )
    assert pod_extended_requests(p3, mapping) == {"nvidia.com/gpu": 2}
    ic3 = implicit_claim(p3, ["nvidia.com/gpu"], mapping)
    assert ic3 is not None and len(ic3.claim.spec.devices.requests or []) == 2


def test_extended_resource_names_and_class_resolution() -> None:
    assert is_dra_extended_resource_name("nvidia.com/gpu")
    assert is_dra_extended_resource_name("deviceclass.resource.kubernetes.io/gpu")
    assert not is_dra_extended_resource_name("cpu")
    assert not is_dra_extended_resource_name("kubernetes.io/something")
    assert not is_dra_extended_resource_name("hugepages-2Mi")
    old = gpu_class(name="a-old", created="2026-01-01T00:00:00Z")
    new = gpu_class(name="z-new", created="2026-02-01T00:00:00Z")
    assert extended_resource_classes([old, new])["nvidia.com/gpu"] == "z-new"  # created last wins
    same1 = gpu_class(name="b", created="2026-01-01T00:00:00Z")
    same2 = gpu_class(name="a", created="2026-01-01T00:00:00Z")
    m = extended_resource_classes([same1, same2])
    assert m["nvidia.com/gpu"] == "a"  # same time: lexicographically first
    assert m["deviceclass.resource.kubernetes.io/b"] == "b"  # every class keeps its implicit name


# ------------------------------------------------------------------ quota is never charged twice
@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b"]),  # workload (Job)
            st.integers(0, 2),  # nvidia.com/gpu
            st.booleans(),  # a template claim of one GPU
            st.sampled_from([None, "s-a", "s-none"]),  # a shared claim
            st.booleans(),  # two containers naming the template claim
        ),
        min_size=1,
        max_size=4,
    )
)
def test_every_device_is_charged_at_most_once(specs: list[tuple[str, int, bool, str | None, bool]]) -> None:
    pods = []
    for i, (job, ext, tmpl, shared, two) in enumerate(specs):
        claims = []
        if tmpl:
            claims.append({"name": "gpu", "resourceClaimTemplateName": "one"})
        if shared:
            claims.append({"name": "s", "resourceClaimName": shared})
        res: dict[str, Any] = {"requests": {"cpu": "1"}}
        if ext:
            res["limits"] = {"nvidia.com/gpu": ext}
        if tmpl:
            res["claims"] = [{"name": "gpu"}]
        containers = [{"name": "c", "resources": res}]
        if two and tmpl:
            containers.append({"name": "d", "resources": {"claims": [{"name": "gpu"}]}})
        pods.append(pod(f"{job}-{i}", job=job, claims=claims, containers=containers))
    state = ClusterState(
        [node("n1"), node("n2")],
        [gpus("n1", 4), gpus("n2", 4)],
        [gpu_class()],
        claims=[shared_claim("s-a", owner_job="a"), shared_claim("s-none")],
        templates=[template("one")],
    )
    r = place_gang(pods, state)
    if not r.placed:
        return
    allocated: set[tuple[str, str, str]] = set()
    n_picks = 0
    for pl in r.placements:
        for ca in pl.claims:
            for p in ca.picks:
                allocated.add(p.device.key)
                n_picks += 1
    assert n_picks == len(allocated)  # no device in two claims
    charges = charge_gang(r, state, pods)
    keys = [c.claim for c in charges.claims]
    assert len(keys) == len(set(keys))  # each claim appears once
    charged = sum(t.get(CLASS, Fraction(0)) for t in charges.workloads.values())
    reported = sum(c.charges.get(CLASS, Fraction(0)) for c in charges.unowned)
    assert charged + reported == len(allocated)
    # per pod expectations: extended + template devices are charged to the pod's own workload
    for (job, ext, tmpl, _, _), pl in zip(specs, r.placements, strict=True):
        own = sum(len(ca.picks) for ca in pl.claims if ca.claim.key not in pl.shared)
        assert own == ext + int(tmpl)
        assert charges.for_workload(f"default/Job/{job}").get(CLASS, 0) >= own
    r.transaction.discard()
