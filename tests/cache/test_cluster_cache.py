"""The cluster cache kept in place by informer deltas equals a cache built from scratch from the same
objects, after every event of a generated stream (creates, updates, deletes of nodes, slices,
classes, claims, templates and pods; holds of admitted plans), compared by value: inventory devices,
usage, node free resources, free-device counts, candidate lists and the placement of a probe
workload."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queueing.api.core import Job, Node, Pod
from queueing.api.resource import DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice
from queueing.cache import CacheMismatch, ClusterCache, differences, light_pod
from queueing.scheduling.dra_placer import DraPlacer, DraPlan, DraState
from queueing.scheduling.from_api import ApiContext, workload_info
from queueing.scheduling.jobs import workload_for_job
from queueing.scheduling.placer import Placement, PlacementFailure

DRIVER = "gpu.example.com"
MANAGED = "queueing.dra.io/workload-uid"
NODES = [f"n{i}" for i in range(4)]


def node(name: str, cpu: int = 8, zone: str = "a", unschedulable: bool = False) -> Node:
    return Node.model_validate(
        {
            "metadata": {"name": name, "labels": {"zone": zone}},
            "spec": {"unschedulable": True} if unschedulable else {},
            "status": {"allocatable": {"cpu": str(cpu), "memory": "64Gi", "pods": "110"}},
        }
    )


def gpus(node_name: str, n: int, generation: int = 1, model: str = "a100") -> ResourceSlice:
    return ResourceSlice.model_validate(
        {
            "metadata": {"name": f"{node_name}-gpus"},
            "spec": {
                "driver": DRIVER,
                "pool": {"name": node_name, "generation": generation, "resourceSliceCount": 1},
                "nodeName": node_name,
                "devices": [
                    {"name": f"gpu-{i}", "attributes": {"index": {"int": i}, "model": {"string": model}}}
                    for i in range(n)
                ],
            },
        }
    )


def gpu_class(model: str | None = None) -> DeviceClass:
    sels = [f'device.driver == "{DRIVER}"']
    if model:
        sels.append(f'device.attributes["{DRIVER}"].model == "{model}"')
    return DeviceClass.model_validate(
        {"metadata": {"name": "gpu"}, "spec": {"selectors": [{"cel": {"expression": s}} for s in sels]}}
    )


def gpu_request(count: int = 1) -> dict[str, Any]:
    """A claim spec asking for ``count`` GPUs of class gpu."""
    return {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu", "count": count}}]}}


def template(name: str, count: int) -> ResourceClaimTemplate:
    meta = {"name": name, "namespace": "default"}
    return ResourceClaimTemplate.model_validate({"metadata": meta, "spec": {"spec": gpu_request(count)}})


def claim(name: str, devices: list[tuple[str, int]], per_pod: bool) -> ResourceClaim:
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if per_pod:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": f"{name}-pod", "uid": "u"}]
    body: dict[str, Any] = {
        "metadata": meta,
        "spec": gpu_request(),
    }
    if devices:
        body["status"] = {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "g", "driver": DRIVER, "pool": n, "device": f"gpu-{i}"}
                        for n, i in devices
                    ]
                }
            }
        }
    return ResourceClaim.model_validate(body)


def pod(name: str, node_name: str | None, cpu: int, phase: str, managed: bool) -> Pod:
    raw: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "kube-system",
            "labels": {"app": "x", **({MANAGED: "w"} if managed else {})},
            "annotations": {"big": "x" * 100},
        },
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "i",
                    "env": [{"name": "A", "value": "1"}],
                    "resources": {"requests": {"cpu": str(cpu)}},
                }
            ],
            **({"nodeName": node_name} if node_name else {}),
        },
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True"}]},
    }
    return Pod.model_validate(light_pod(raw, (MANAGED,)))


def probe_job(tmpl: str = "t1", cpu: int = 2) -> Job:
    return Job.model_validate(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": "probe",
                "namespace": "default",
                "uid": "u-probe",
                "labels": {"queueing.dra.io/queue-name": "lq"},
            },
            "spec": {
                "parallelism": 2,
                "template": {
                    "spec": {
                        "resourceClaims": [{"name": "g", "resourceClaimTemplateName": tmpl}],
                        "containers": [
                            {
                                "name": "m",
                                "image": "x",
                                "resources": {"requests": {"cpu": str(cpu)}, "claims": [{"name": "g"}]},
                            }
                        ],
                    }
                },
            },
        }
    )


def answer(placer: DraPlacer, cache: ClusterCache, state: DraState) -> object:
    """The probe workload's placement (nodes, devices) or failure message."""
    ctx = ApiContext.from_objects([*cache.classes.values(), *cache.templates.values()])
    info = workload_info(workload_for_job(probe_job()), ctx)
    got = placer.place(info, {"main": 2}, {}, state)
    if isinstance(got, PlacementFailure):
        return got.message
    assert isinstance(got.detail, DraPlan)
    return (got.nodes, [pp.devices for pp in got.detail.pods], dict(got.device_charges))


def candidate_lists(placer: DraPlacer) -> dict[str, list[tuple[str, str, str]]]:
    """Per node, the devices the allocator lists as candidates for one GPU of class gpu."""
    alloc = placer.cluster.allocator
    prepared = alloc.prepare_claim(claim("probe-claim", [], per_pod=False))
    out = {}
    for n in placer.cluster.nodes:
        out[n.name] = [c.dev.key for alts in prepared.requests for a in alts for c in alloc.candidates(a, n)]
    return out


# ---- the event stream ------------------------------------------------------------------------
node_ev = st.tuples(
    st.just("node"), st.sampled_from(NODES), st.booleans(), st.integers(2, 8), st.sampled_from(["a", "b"])
)
slice_ev = st.tuples(
    st.just("slice"), st.sampled_from(NODES), st.booleans(), st.integers(0, 4), st.integers(1, 3)
)
class_ev = st.tuples(st.just("class"), st.booleans(), st.sampled_from([None, "a100", "h100"]))
tmpl_ev = st.tuples(st.just("template"), st.sampled_from(["t1", "t2"]), st.booleans(), st.integers(1, 2))
claim_ev = st.tuples(
    st.just("claim"),
    st.integers(0, 5),
    st.booleans(),
    st.lists(st.tuples(st.sampled_from(NODES), st.integers(0, 3)), max_size=2, unique=True),
    st.booleans(),
)
pod_ev = st.tuples(
    st.just("pod"),
    st.integers(0, 5),
    st.booleans(),
    st.sampled_from([None, *NODES]),
    st.integers(1, 6),
    st.sampled_from(["Running", "Pending", "Succeeded"]),
    st.booleans(),
)
hold_ev = st.tuples(
    st.just("hold"),
    st.integers(0, 2),
    st.lists(st.tuples(st.sampled_from(NODES), st.integers(0, 3)), max_size=3),
)
plan_ev = st.tuples(st.just("plan"), st.booleans())
event = st.one_of(node_ev, slice_ev, class_ev, tmpl_ev, claim_ev, pod_ev, hold_ev, plan_ev)


def _step(
    cache: ClusterCache, ev: tuple[Any, ...], holds: dict[str, frozenset[tuple[str, str, str]]]
) -> None:
    kind = ev[0]
    if kind == "node":
        _, name, present, cpu, zone = ev
        old = cache.nodes.get(name)
        cache.apply(old, node(name, cpu, zone) if present else None)
    elif kind == "slice":
        _, name, present, n, gen = ev
        key = f"{name}-gpus"
        cache.apply(cache.slices.get(key), gpus(name, n, gen) if present else None)
    elif kind == "class":
        _, present, model = ev
        cache.apply(cache.classes.get("gpu"), gpu_class(model) if present else None)
    elif kind == "template":
        _, name, present, count = ev
        cache.apply(cache.templates.get(f"default/{name}"), template(name, count) if present else None)
    elif kind == "claim":
        _, i, present, devices, per_pod = ev
        key = f"default/c{i}"
        cache.apply(cache.claims.get(key), claim(f"c{i}", devices, per_pod) if present else None)
    elif kind == "pod":
        _, i, present, node_name, cpu, phase, managed = ev
        key = f"kube-system/p{i}"
        cache.apply(cache.pods.get(key), pod(f"p{i}", node_name, cpu, phase, managed) if present else None)
    elif kind == "hold":
        _, h, devices = ev
        holds[f"h{h}"] = frozenset((DRIVER, n, f"gpu-{d}") for n, d in devices)
        cache.sync_holds(dict(holds), lambda ds: ds)


@settings(max_examples=60, deadline=None)
@given(events=st.lists(event, min_size=1, max_size=40))
def test_incremental_cache_equals_a_rebuild_after_every_event(events: list[tuple[Any, ...]]) -> None:
    cache = ClusterCache(managed_labels=(MANAGED,))
    cache.add_all([*(node(n) for n in NODES), *(gpus(n, 2) for n in NODES), gpu_class(), template("t1", 1)])
    cache.placer()
    holds: dict[str, frozenset[tuple[str, str, str]]] = {}
    state = DraState()
    for ev in events:
        if ev[0] == "plan":  # a workload admitted (its plan held) or the plans taken back
            placer = cache.placer()
            if ev[1]:
                got = placer.place(
                    workload_info(
                        workload_for_job(probe_job()),
                        ApiContext.from_objects([*cache.classes.values(), *cache.templates.values()]),
                    ),
                    {"main": 2},
                    {},
                    state,
                )
                if isinstance(got, Placement):
                    state = placer.add(state, f"w{len(state.holds)}", got)
            else:
                state = DraState()
            placer.sync(state)  # the next deltas land on a placer with plans applied
            continue
        before = cache.rebuilds
        _step(cache, ev, holds)
        incremental = cache.placer()
        scratch = cache.from_scratch()
        if ev[0] in ("claim", "pod", "template", "hold"):
            assert cache.rebuilds == before, f"{ev[0]} events are applied in place"
        assert differences(incremental, scratch) == []
        if incremental is not scratch and cache.classes and cache.templates:
            assert answer(incremental, cache, state) == answer(scratch, cache, state)
            assert answer(incremental, cache, DraState()) == answer(scratch, cache, DraState())
            if "default/t1" in cache.templates:
                assert candidate_lists(incremental) == candidate_lists(scratch)
        incremental.sync(state)


def test_foreign_pods_count_and_managed_ones_do_not() -> None:
    cache = ClusterCache(managed_labels=(MANAGED,))
    cache.add_all([node("n0", cpu=32), gpus("n0", 2), gpu_class(), template("t1", 1)])
    placer = cache.placer()
    cache.apply(None, pod("ds", "n0", 30, "Running", managed=False))
    cache.apply(None, pod("ours", "n0", 1, "Running", managed=True))
    assert placer.cluster.used[0]["cpu"] == 30
    # 2 CPUs left on the only node: the probe's two 2-CPU pods do not fit
    miss = answer(placer, cache, DraState())
    assert isinstance(miss, str) and "cpu" in miss
    done = pod("ds", "n0", 30, "Succeeded", managed=False)
    cache.apply(cache.pods["kube-system/ds"], done)
    assert placer.cluster.used[0]["cpu"] == 0
    assert not isinstance(answer(placer, cache, DraState()), str)
    assert cache.placer() is placer and cache.rebuilds == 1


def test_a_hold_hides_the_per_pod_claim_on_its_devices() -> None:
    cache = ClusterCache()
    cache.add_all([node("n0"), gpus("n0", 2), gpu_class()])
    placer = cache.placer()
    cache.apply(None, claim("mine", [("n0", 0)], per_pod=True))
    cache.apply(None, claim("other", [("n0", 1)], per_pod=False))
    assert set(placer.cluster.usage.devices) == {(DRIVER, "n0", "gpu-0"), (DRIVER, "n0", "gpu-1")}
    cache.sync_holds({"uid": "adm"}, lambda _a: [(DRIVER, "n0", "gpu-0"), (DRIVER, "n0", "gpu-1")])
    # the plan holds both; the per-pod claim is not counted again, the other claim still is
    assert set(placer.cluster.usage.devices) == {(DRIVER, "n0", "gpu-1")}
    cache.sync_holds({}, lambda _a: [])
    assert set(placer.cluster.usage.devices) == {(DRIVER, "n0", "gpu-0"), (DRIVER, "n0", "gpu-1")}
    assert differences(placer, cache.from_scratch()) == []


def test_updates_that_change_nothing_placement_reads_keep_the_placer() -> None:
    cache = ClusterCache()
    n = node("n0")
    cache.add_all([n, gpus("n0", 2), gpu_class()])
    placer = cache.placer()
    beat = n.model_copy(update={"metadata": n.metadata.model_copy(update={"resource_version": "7"})})
    cache.apply(n, beat)
    assert cache.placer() is placer
    cache.apply(beat, node("n0", cpu=4))
    assert cache.placer() is not placer and cache.rebuilds == 2


def test_verify_mode_raises_on_a_difference() -> None:
    cache = ClusterCache(verify=True)
    cache.add_all([node("n0"), gpus("n0", 2), gpu_class()])
    placer = cache.placer()
    cache.apply(None, claim("c", [("n0", 0)], per_pod=False))
    assert cache.placer() is placer  # checked against a rebuild: equal
    placer.cluster.usage.take_all(placer.cluster.inventory.picks_of(claim("x", [("n0", 1)], per_pod=False)))
    with pytest.raises(CacheMismatch, match=r"usage\.devices"):
        cache.placer()


def test_light_pod_keeps_what_placement_reads() -> None:
    p = pod("p", "n1", 3, "Running", managed=True)
    assert p.spec.node_name == "n1" and p.status.phase == "Running"
    assert p.spec.containers[0].requests["cpu"].value == 3
    assert p.metadata.labels == {MANAGED: "w"}  # other labels and annotations are dropped
    assert p.metadata.annotations is None and p.status.conditions is None


def test_a_slice_change_builds_only_that_pool_again() -> None:
    cache = ClusterCache()
    cache.add_all([*(node(n) for n in NODES), *(gpus(n, 2) for n in NODES), gpu_class("a100")])
    before = cache.placer().cluster.inventory.pools
    candidate_lists(cache.placer())
    evaluated = len(cache.selectors)  # (selector, device, generation) evaluations, kept across rebuilds
    cache.apply(cache.slices["n0-gpus"], gpus("n0", 3, generation=2))  # n0 grows: later pools shift
    after = cache.placer().cluster.inventory.pools
    candidate_lists(cache.placer())
    # the class's 2 selectors on n0's 3 devices of the new generation, nothing else again
    assert len(cache.selectors) == evaluated + 2 * 3
    assert cache.rebuilds == 2
    assert after[(DRIVER, "n0")] is not before[(DRIVER, "n0")]
    assert [d.order for d in after[(DRIVER, "n1")].devices] == [3, 4]  # taken over, order shifted
    assert after[(DRIVER, "n1")].devices[0].device is before[(DRIVER, "n1")].devices[0].device
    cache.apply(None, node("n9"))  # nodes changed, no slice: every pool taken over as it is
    again = cache.placer().cluster.inventory.pools
    assert all(again[k] is after[k] for k in after)
    candidate_lists(cache.placer())
    assert len(cache.selectors) == evaluated + 2 * 3 and cache.rebuilds == 3  # nothing evaluated again
    assert differences(cache.placer(), cache.from_scratch()) == []
