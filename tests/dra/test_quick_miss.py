"""The placer's fast paths against its general path, on the cases that once answered differently:
``_quick_miss`` (the necessary-condition check before any search) counting picks where devices
count, and extended resources a node serves through its device plugin as DRA demand; the best node
a failure names; the pods cache of a kept placer after a flavor's node labels change; verify mode
raising on a difference."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from test_extended_resources import gpu_class
from test_gang import GPU, gpus, node, pod, template
from test_simple_gang import workload

from queueing.api.core import Node, PodSpec
from queueing.api.resource import ResourceClaim
from queueing.dra.allocator import Allocator
from queueing.dra.gang import ClusterState, place_gang, place_simple
from queueing.dra.inventory import Inventory
from queueing.dra.verify import VerifyError
from queueing.scheduling.dra_placer import DraPlacer
from queueing.scheduling.placer import Placement, PlacementFailure
from queueing.scheduling.snapshot import FlavorSpec


def spec(tmpl: str | None = "t2", **extra: Any) -> PodSpec:
    body: dict[str, Any] = {
        "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}],
        **extra,
    }
    if tmpl:
        body["resourceClaims"] = [{"name": "g", "resourceClaimTemplateName": tmpl}]
    return PodSpec.model_validate(body)


@pytest.mark.parametrize("verify", [False, True])
def test_overlapping_reservations_count_devices_not_picks(verify: bool) -> None:
    """A preemptor's reservation may hold its victim's devices while the victim still does (one
    device, two plans): the device is taken once, and the other two GPUs are free."""
    placer = DraPlacer([node("n0")], [gpus("n0", 4)], [GPU], templates=[template("t2", 2)], verify=verify)
    root = placer.initial_state([])
    victim = workload("victim", [("main", 1, spec())])
    held = placer.place(victim, {}, {}, root)
    assert isinstance(held, Placement)
    with_victim = placer.add(root, victim.key, held)
    preemptor = workload("preemptor", [("main", 1, spec())])
    reserved = placer.place(preemptor, {}, {}, placer.remove(with_victim, victim.key))
    assert isinstance(reserved, Placement)
    assert reserved.detail.pods[0].devices == held.detail.pods[0].devices  # type: ignore[attr-defined]
    both = placer.add(with_victim, preemptor.key, reserved)
    late = placer.place(workload("late", [("main", 1, spec())]), {}, {}, both)
    assert isinstance(late, Placement), late
    assert {d[2] for d in late.detail.pods[0].devices} == {"gpu-2", "gpu-3"}  # type: ignore[attr-defined]
    # and a third pair does not fit: the check still bounds
    full = placer.add(both, "default/late", late)
    miss = placer.place(workload("more", [("main", 1, spec())]), {}, {}, full)
    assert isinstance(miss, PlacementFailure)
    assert "best node n0 has 0 free (2 short)" in miss.message


def plugin_node(name: str) -> Node:
    """A node that serves ``nvidia.com/gpu`` through its device plugin (in allocatable)."""
    return Node.model_validate(
        {
            "metadata": {"name": name},
            "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "4"}},
        }
    )


@pytest.mark.parametrize("verify", [False, True])
def test_device_plugin_extended_resources_are_no_dra_demand(verify: bool) -> None:
    """A pod asking for ``nvidia.com/gpu: 2`` fits on the device-plugin node (no DRA device needed
    there) next to a DRA node with one GPU: the check before the search must not reject it."""
    gpu = gpu_class(ext="nvidia.com/gpu", name="gpu")
    placer = DraPlacer(
        [plugin_node("dp"), node("dra")],
        [gpus("dra", 1)],
        [gpu],
        verify=verify,
    )
    root = placer.initial_state([])
    two = spec(
        None,
        containers=[
            {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "2"}}}
        ],
    )
    got = placer.place(workload("ext", [("main", 1, two)]), {}, {}, root)
    assert isinstance(got, Placement), got
    assert got.nodes == ("dp",)
    # three such pods: two fit on the plugin node, the third nowhere (1 DRA GPU): the search says so
    three = placer.place(workload("ext3", [("main", 3, two)]), {}, {}, root)
    assert isinstance(three, PlacementFailure)
    assert "pod 3 of 3" in three.message


@pytest.mark.parametrize("verify", [False, True])
def test_best_node_has_devices_of_the_class(verify: bool) -> None:
    """All GPUs are taken; the cpu-only node ``a`` (shorter name, first in order) has no GPU: the
    failure names the GPU node."""
    placer = DraPlacer(
        [node("a"), node("n0")], [gpus("n0", 2)], [GPU], templates=[template("t2", 2)], verify=verify
    )
    root = placer.initial_state([])
    first = placer.place(workload("first", [("main", 1, spec())]), {}, {}, root)
    assert isinstance(first, Placement)
    state = placer.add(root, "default/first", first)
    miss = placer.place(workload("second", [("main", 1, spec())]), {}, {}, state)
    assert isinstance(miss, PlacementFailure)
    assert "best node n0 has 0 free (2 short)" in miss.message, miss.message


@pytest.mark.parametrize("verify", [False, True])
def test_kept_placer_follows_a_flavors_changed_node_labels(verify: bool) -> None:
    """A flavor of the same name whose node labels changed: the pods go to the nodes it names now."""
    nodes = [node("na", labels={"zone": "a"}), node("nb", labels={"zone": "b"})]
    placer = DraPlacer(
        nodes, [gpus("na", 2), gpus("nb", 2)], [GPU], templates=[template("t2", 1)], verify=verify
    )
    root = placer.initial_state([])
    # a pod set with two claims of one template: ``place_simple`` handles it once the spec is
    # prepared; the first placement with each spec goes through the general path
    wl = workload("w", [("main", 1, spec())])
    for zone in ["a", "b", "a", "b"]:
        flavor = FlavorSpec("f", node_labels={"zone": zone})
        got = placer.place(wl, {}, {"main": [flavor]}, root)
        assert isinstance(got, Placement), got
        assert got.nodes == (f"n{zone}",)


def test_verify_raises_when_a_fast_path_differs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Verify mode is not silent: a ``_quick_miss`` that rejects a gang the search places raises,
    naming the fast path and both answers."""
    placer = DraPlacer([node("n0")], [gpus("n0", 4)], [GPU], templates=[template("t2", 2)], verify=True)
    monkeypatch.setattr(placer, "_quick_miss", lambda *a: "at most 0 fit (wrong)")
    with pytest.raises(VerifyError) as err:
        placer.place(workload("w", [("main", 1, spec())]), {}, {}, placer.initial_state([]))
    assert err.value.fast_path == "DraPlacer._quick_miss"
    assert err.value.fast == "at most 0 fit (wrong)"
    assert "n0" in str(err.value.general)
    # without verify the fast path's answer stands
    quiet = DraPlacer([node("n0")], [gpus("n0", 4)], [GPU], templates=[template("t2", 2)])
    monkeypatch.setattr(quiet, "_quick_miss", lambda *a: "at most 0 fit (wrong)")
    out = quiet.place(workload("w", [("main", 1, spec())]), {}, {}, quiet.initial_state([]))
    assert isinstance(out, PlacementFailure)


# ------------------------------------------------------------------------------------ the allocator
class _LastFirst(Allocator):
    """A greedy path that takes the last free devices (the search takes the first)."""

    def _greedy(self, steps: Any, candidates: Any, s: Any) -> bool:
        return super()._greedy(steps, [c[::-1] for c in candidates], s)


class _ShortFill(Allocator):
    """A ``greedy_fill`` that stops one allocation early and says the next does not fit."""

    def _greedy_fill(self, claims: Any, steps: Any, node: Any, usage: Any, limit: int) -> Any:
        got, after = super()._greedy_fill(claims, steps, node, usage, limit)
        if got:
            for per_claim in got[-1:]:
                for picks in per_claim:
                    usage.give_back_all(picks)
            return got[:-1], False
        return got, after


def _claim(n: int) -> ResourceClaim:
    return ResourceClaim.model_validate(
        {
            "metadata": {"name": "c", "namespace": "default"},
            "spec": {
                "devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu", "count": n}}]}
            },
        }
    )


def test_verify_raises_where_the_allocators_greedy_paths_differ() -> None:
    nd, sl = node("n0"), gpus("n0", 4)
    inv = Inventory([sl])
    wrong = _LastFirst(inv, [GPU], verify=True)
    with pytest.raises(VerifyError) as err:
        wrong.allocate_on(wrong.prepare([_claim(2)]), nd, inv.usage([]))
    assert err.value.fast_path == "Allocator._greedy (allocate_on)"
    # without verify the greedy path's answer stands (the last two devices)
    quiet = _LastFirst(inv, [GPU])
    got = quiet.allocate_on(quiet.prepare([_claim(2)]), nd, inv.usage([]))
    assert isinstance(got, tuple) and [p.device.key[2] for p in got[0].picks] == ["gpu-3", "gpu-2"]

    short = _ShortFill(inv, [GPU], verify=True)
    pc = short.prepare([_claim(1)])
    steps = [(ci, alts) for ci, c in enumerate(pc) for alts in c.requests]
    with pytest.raises(VerifyError) as err:
        short.greedy_fill(pc, steps, nd, inv.usage([]), 3)
    assert err.value.fast_path == "Allocator.greedy_fill"
    right = Allocator(inv, [GPU], verify=True)
    usage = inv.usage([])
    pc = right.prepare([_claim(1)])
    steps = [(ci, alts) for ci, c in enumerate(pc) for alts in c.requests]
    fill, after = right.greedy_fill(pc, steps, nd, usage, 3)
    assert len(fill) == 3 and after is None and len(usage.devices) == 3


def test_gang_explanation_names_a_node_with_devices_of_the_class() -> None:
    """The cpu-only node ``a`` is closer by the numbers (half a cpu short) than the GPU node (one
    GPU short), but it has no GPU at all: the explanation names the GPU node."""
    cs = ClusterState(
        [node("a", cpu="500m"), node("n0")], [gpus("n0", 1)], [GPU], templates=[template("t2", 2)]
    )
    got = place_gang([pod("p0", tmpl="t2")], cs)
    assert not got.placed and got.explanation is not None and got.explanation.best is not None
    assert got.explanation.best.node == "n0", got.explanation.message
    assert (
        "best node n0: claim default/p0-gpus, request g: 2 devices of class gpu needed"
        in got.explanation.message
    )
    # without devices of the class anywhere, the closest node by the numbers
    bare = ClusterState([node("a", cpu="500m"), node("n0")], [], [GPU], templates=[template("t2", 2)])
    none = place_gang([pod("p0", tmpl="t2")], bare)
    assert none.explanation is not None and none.explanation.best is not None
    assert none.explanation.best.node == "a"


@pytest.mark.parametrize("how", ["place_gang", "place_simple"])
def test_verify_raises_where_the_free_device_index_is_wrong(how: str) -> None:
    """A block sum of the free-device index that says "short" where a node has free devices: the
    search would skip the node; verify mode raises instead."""

    def state(verify: bool) -> ClusterState:
        cs = ClusterState([node("n0"), node("n1")], [gpus("n0", 2), gpus("n1", 2)], [GPU], verify=verify)
        cs.templates = {t.key: t for t in [template("t2", 2)]}
        assert cs.usage.node_block is not None and cs.usage.block_free == [4]
        return cs

    def run(cs: ClusterState) -> bool:
        got = place_gang([pod("p0", tmpl="t2")], cs)  # prepares the spec for place_simple
        assert got.placed and got.transaction is not None
        got.transaction.discard()
        cs.usage.block_free[0] = 0  # wrong: four GPUs are free
        if how == "place_gang":
            return place_gang([pod("p1", tmpl="t2")], cs).placed
        p0 = pod("p0", tmpl="t2")
        spec = next(k for k in cs._spec_static.values()).spec
        assert p0.spec == spec
        return place_simple([(spec, "default", 1)], cs) is not None

    assert run(state(False)) is False  # the wrong index skips every node
    with pytest.raises(VerifyError) as err:
        run(state(True))
    assert err.value.fast_path == "free-device index (Usage.block_free)"


def test_published_resources_are_computed_once_and_checked_in_verify_mode() -> None:
    """The resources nodes publish in allocatable (extended resources served by a device plugin) are
    computed once per placer; verify mode recomputes them and catches a change the memo missed."""
    quiet = DraPlacer([node("n0")], [gpus("n0", 1)], [GPU])
    first = quiet._published_resources()
    assert "cpu" in first and quiet._published_resources() is first
    checked = DraPlacer([node("n0")], [gpus("n0", 1)], [GPU], verify=True)
    assert checked._published_resources() == first
    checked.cluster.allocatable[0] = {"example.com/new": Fraction(1)}  # what the memo must not miss
    with pytest.raises(VerifyError) as err:
        checked._published_resources()
    assert err.value.fast_path == "DraPlacer._published_resources"


@pytest.mark.parametrize("seed", range(6))
def test_demand_is_kept_per_signature_and_answers_as_each_pod_set(seed: int) -> None:
    """``DraPlacer._demand`` is kept per (namespace, pod set, fit signature): pod sets that differ
    only in what no signature reads (images, commands, labels) share an entry, and the entry is
    what each of them computes; pod sets that differ in a template name, a claim name, an
    extended-resource request or a container's requests have their own (other signatures). In
    verify mode a kept entry that does not match raises."""
    import random

    from queueing.api.core import PodTemplateSpec
    from queueing.scheduling.dra_placer import ClaimRef, DraPodSet, DraRequest

    rng = random.Random(seed)
    gpu = gpu_class(ext="nvidia.com/gpu", name="gpu")
    placer = DraPlacer(
        [plugin_node("dp"), node("dra")],
        [gpus("dra", 4)],
        [gpu],
        templates=[template("t1", 1), template("t2", 2), template("t3", 3)],
    )

    def pod_set(tmpl: str | None, claim: str, ext: str, image: str, label: str, cpu: str = "1") -> DraPodSet:
        requests = {"cpu": cpu}
        if ext:
            requests["nvidia.com/gpu"] = ext
        body: dict[str, Any] = {
            "containers": [{"name": "c", "image": image, "resources": {"requests": requests}}]
        }
        if tmpl:
            body["resourceClaims"] = [{"name": claim, "resourceClaimTemplateName": tmpl}]
        sp = PodSpec.model_validate(body)
        refs = tuple(
            ClaimRef(c.name, c.resource_claim_name, c.resource_claim_template_name)
            for c in sp.resource_claims or []
        )
        return DraPodSet(
            "main", PodTemplateSpec.model_validate({"metadata": {"labels": {"x": label}}, "spec": body}), refs
        )

    for _ in range(40):
        dps = pod_set(
            rng.choice([None, "t1", "t2", "t3", "missing"]),
            rng.choice(["g", "h"]),
            rng.choice(["", "1", "2"]),
            rng.choice(["a", "b"]),
            rng.choice(["p", "q"]),
            rng.choice(["1", "2"]),
        )
        sig = DraRequest((dps,)).signature
        got = placer._demand("default", dps, sig)
        assert got == placer._compute_demand("default", dps)
        assert placer._demand_cache[("default", "main", sig)] == got
    # what no signature reads shares an entry; what decides placement does not
    same = [DraRequest((pod_set("t1", "g", "", image, label),)).signature for image in "ab" for label in "pq"]
    assert len(set(same)) == 1
    other = [
        pod_set("t2", "g", "", "a", "p"),
        pod_set("t1", "h", "", "a", "p"),
        pod_set("t1", "g", "1", "a", "p"),
        pod_set("t1", "g", "", "a", "p", cpu="2"),
    ]
    assert len({DraRequest((d,)).signature for d in other} | {same[0]}) == 5
    # tampered: verify mode raises
    strict = DraPlacer([node("dra")], [gpus("dra", 4)], [GPU], templates=[template("t2", 2)], verify=True)
    dps = pod_set("t2", "g", "", "a", "p")
    sig = DraRequest((dps,)).signature
    assert strict._demand("default", dps, sig)[0] == 2
    strict._demand_cache[("default", "main", sig)] = (5, "claim g: 5 x gpu", ("gpu",))
    with pytest.raises(VerifyError, match="_demand"):
        strict._demand("default", pod_set("t2", "g", "", "b", "q"), sig)
