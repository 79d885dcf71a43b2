"""Placement scoring (``queueing.dra.scoring``): LeastFragmentation takes a different feasible
placement than FirstFit, never a different answer to whether the gang fits, and what it takes is a
valid allocation (devices once, counters within their totals, selectors, nodes)."""

from __future__ import annotations

import sys
from fractions import Fraction
from typing import Any

import pytest
from dra_helpers import FIXTURES, load
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queueing.api.core import Node, Pod
from queueing.api.resource import DeviceClass, ResourceClaimTemplate, ResourceSlice
from queueing.dra.gang import ClusterState, GangResult
from queueing.dra.scoring import FIRST_FIT, LEAST_FRAGMENTATION, Scorer, card_loss, place_scored
from queueing.dra.verify import VerifyError

sys.path.insert(0, str(FIXTURES))
import h200

HW = h200.hardware()
PROFILES = [p["name"] for p in HW["profiles"]]
_, _, CLASSES = load("h200-mig-node.yaml")


def cluster(n_nodes: int, gpus: int) -> tuple[list[Node], list[ResourceSlice]]:
    nodes = [Node.model_validate(h200.node(f"h200-{i}")) for i in range(n_nodes)]
    slices = [
        ResourceSlice.model_validate(s)
        for i in range(n_nodes)
        for s in h200.node_slices(f"h200-{i}", HW, gpus=gpus)
    ]
    return nodes, slices


def template(name: str, cls: str, count: int, profile: str | None = None) -> ResourceClaimTemplate:
    body: dict[str, Any] = {"deviceClassName": cls, "count": count}
    if profile:
        body["selectors"] = [
            {"cel": {"expression": f"device.attributes['gpu.nvidia.com'].profile == '{profile}'"}}
        ]
    return ResourceClaimTemplate.model_validate(
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"spec": {"devices": {"requests": [{"name": "g", "exactly": body}]}}},
        }
    )


TEMPLATES = [template(f"gpu{k}", "gpu.nvidia.com", k) for k in (1, 2, 4, 8)] + [
    template(f"mig-{p.replace('.', '-').replace('+', '-')}", "mig.nvidia.com", 1, p) for p in PROFILES
]
SHAPES = [t.name for t in TEMPLATES]


def pod(name: str, tmpl: str) -> Pod:
    return Pod.model_validate(
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
                "resourceClaims": [{"name": "g", "resourceClaimTemplateName": tmpl}],
            },
        }
    )


def state(n_nodes: int = 1, gpus: int = 8) -> ClusterState:
    nodes, slices = cluster(n_nodes, gpus)
    return ClusterState(nodes, slices, CLASSES, templates=TEMPLATES, verify=True)


def picks_of(r: GangResult) -> list[list[str]]:
    return [[p.device.name for ca in pp.claims for p in ca.picks] for pp in r.placements]


def test_mig_slices_keep_the_4g_placeable_on_the_card() -> None:
    """Three 1g.18gb then a 4g.71gb on an H200 node: first fit puts the 1g slices at starts 0-2 and
    the 4g on a second card; LeastFragmentation puts them at the high starts and the 4g beside them."""
    got = {}
    for policy in (FIRST_FIT, LEAST_FRAGMENTATION):
        st_ = state()
        sc = Scorer(st_)
        out = []
        for k in range(3):
            r = place_scored([pod(f"p{k}", "mig-1g-18gb")], st_, policy, scorer=sc)
            assert r.placed and r.transaction is not None
            out += picks_of(r)
            r.transaction.commit()
        r = place_scored([pod("big", "mig-4g-71gb")], st_, policy, scorer=sc)
        out += picks_of(r)
        got[policy] = out
    assert got[FIRST_FIT] == [
        ["gpu-0-mig-1g-18gb-0"],
        ["gpu-0-mig-1g-18gb-1"],
        ["gpu-0-mig-1g-18gb-2"],
        ["gpu-1-mig-4g-71gb-0"],
    ]
    lf = got[LEAST_FRAGMENTATION]
    assert all(p[0].startswith("gpu-0-mig-1g-18gb-") and int(p[0].rsplit("-", 1)[1]) >= 4 for p in lf[:3])
    assert lf[3] == ["gpu-0-mig-4g-71gb-0"]  # the card with the 1g slices still takes the 4g


def test_small_job_fills_the_used_node_and_keeps_a_whole_node_free() -> None:
    st_ = state(n_nodes=3)
    r = place_scored([pod("a", "gpu4")], st_, FIRST_FIT)
    assert r.transaction is not None and r.nodes == {"default/a": "h200-0"}
    r.transaction.commit()
    # node h200-0 has 4 GPUs taken; a 2-GPU job goes there under both policies
    # (first fit: first node), but once h200-1 is half used too, the fuller node wins
    r = place_scored([pod("b", "gpu2")], st_, LEAST_FRAGMENTATION)
    assert r.transaction is not None and r.nodes == {"default/b": "h200-0"}
    r.transaction.commit()
    st2 = state(n_nodes=3)
    for name, node_i in (("x", 1), ("y", 1)):
        rr = place_scored([pod(name, "gpu2")], st2, LEAST_FRAGMENTATION, nodes=[node_i])
        assert rr.transaction is not None
        rr.transaction.commit()
    # h200-1 has 4 taken: a 1-GPU job goes there under LeastFragmentation, to h200-0 under first fit
    ff = place_scored([pod("z", "gpu1")], st2, FIRST_FIT)
    assert ff.nodes == {"default/z": "h200-0"}
    assert ff.transaction is not None
    ff.transaction.discard()
    lf = place_scored([pod("z", "gpu1")], st2, LEAST_FRAGMENTATION)
    assert lf.nodes == {"default/z": "h200-1"}


def test_among_equally_full_nodes_the_one_with_more_pods_takes_the_job() -> None:
    """h200-0 runs one 4-GPU pod, h200-1 four 1-GPU pods: the same whole free cards and free units.
    A 1-GPU job goes to h200-1 under LeastFragmentation (the node with more pods drains later; the
    other is the likelier to come free whole), to h200-0 under first fit."""
    st_ = state(n_nodes=3)
    placed = [("a", "gpu4", 0)] + [(f"s{k}", "gpu1", 1) for k in range(4)]
    for name, tmpl, node_i in placed:
        r = place_scored([pod(name, tmpl)], st_, FIRST_FIT, nodes=[node_i])
        assert r.transaction is not None
        r.transaction.commit()
    sc = Scorer(st_)
    usage = st_.usage
    assert sc.whole_free(0, usage) == sc.whole_free(1, usage) == 4
    assert sc.free_units(0, usage) == sc.free_units(1, usage)
    ff = place_scored([pod("z", "gpu1")], st_, FIRST_FIT)
    assert ff.nodes == {"default/z": "h200-0"} and ff.transaction is not None
    ff.transaction.discard()
    lf = place_scored([pod("z", "gpu1")], st_, LEAST_FRAGMENTATION, scorer=sc)
    assert lf.nodes == {"default/z": "h200-1"}


def test_a_domain_restricts_the_nodes_and_explains_within_it() -> None:
    st_ = state(n_nodes=3, gpus=2)
    r = place_scored([pod(f"p{i}", "gpu2") for i in range(2)], st_, LEAST_FRAGMENTATION, nodes=[0, 2])
    assert r.placed and set(r.nodes.values()) == {"h200-0", "h200-2"}
    assert r.transaction is not None
    r.transaction.discard()
    r = place_scored([pod(f"p{i}", "gpu2") for i in range(2)], st_, FIRST_FIT, nodes=[1])
    assert not r.placed and r.explanation is not None
    assert "fits on none of 1 nodes" in r.explanation.message


def test_search_bound_is_reported() -> None:
    st_ = state(n_nodes=4, gpus=2)
    pods = [pod(f"p{i}", "gpu2") for i in range(5)]  # 5 x 2 GPUs on 4 nodes of 2: never fits
    r = place_scored(pods, st_, LEAST_FRAGMENTATION, max_node_checks=10)
    assert not r.placed and r.explanation is not None and r.explanation.bound_hit
    assert "search stopped after" in r.explanation.message


def test_unknown_policy_is_an_error() -> None:
    with pytest.raises(ValueError, match="placement policy 'BestFit'"):
        place_scored([pod("a", "gpu1")], state(), "BestFit")  # type: ignore[arg-type]


def test_card_loss_memo_is_verified() -> None:
    st_ = state(gpus=1)
    sc = Scorer(st_, verify=True)
    card = next(iter(sc._cards.values()))
    used = tuple(Fraction(0) for _ in card.counters)
    k = next(j for j, d in enumerate(card.devices) if d.name == "gpu-0-mig-1g-18gb-0")
    want = card_loss(card.totals, used, card.uses, card.weights, k)
    assert sc.loss(card, used, k) == want
    sc._loss[(card.layout, used)][k] = want + 1  # a wrong memo entry is caught in verify mode
    with pytest.raises(VerifyError, match=r"Scorer\.loss"):
        sc.loss(card, used, k)


# ------------------------------------------------------------------ properties
def counters_ok(st_: ClusterState, slices: list[ResourceSlice]) -> None:
    """Independently of ``Usage``: what the taken devices consume fits every counter's total."""
    totals: dict[tuple[str, str, str], Fraction] = {}
    consumes: dict[tuple[str, str], list[tuple[tuple[str, str, str], Fraction]]] = {}
    for s in slices:
        pool = s.spec.pool.name
        for cs in s.spec.shared_counters or []:
            for name, c in cs.counters.items():
                totals[(pool, cs.name, name)] = c.value.value
        for d in s.spec.devices or []:
            for cc in d.consumes_counters or []:
                for name, c in cc.counters.items():
                    consumes.setdefault((pool, d.name), []).append(
                        ((pool, cc.counter_set, name), c.value.value)
                    )
    used: dict[tuple[str, str, str], Fraction] = {}
    for key, n in st_.usage.devices.items():
        assert n == 1, f"device {key} taken {n} times"
        for ck, a in consumes.get((key[1], key[2]), []):
            used[ck] = used.get(ck, Fraction(0)) + a
    for ck, v in used.items():
        assert v <= totals[ck], f"counter {ck}: {v} > {totals[ck]}"


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    before=st.lists(st.sampled_from(SHAPES), max_size=8),
    gang=st.lists(st.sampled_from(SHAPES), min_size=1, max_size=4),
    n_nodes=st.integers(1, 3),
)
def test_least_fragmentation_is_valid_and_feasible_when_first_fit_is(
    before: list[str], gang: list[str], n_nodes: int
) -> None:
    nodes, slices = cluster(n_nodes, 2)
    answers = {}
    for policy in (FIRST_FIT, LEAST_FRAGMENTATION):
        st_ = ClusterState(nodes, slices, CLASSES, templates=TEMPLATES, verify=True)
        sc = Scorer(st_, verify=True)
        # the same jobs run before, placed by LeastFragmentation so both see one cluster
        for k, shape in enumerate(before):
            r0 = place_scored([pod(f"b{k}", shape)], st_, LEAST_FRAGMENTATION, scorer=sc)
            if r0.transaction is not None:
                r0.transaction.commit()
        taken = dict(st_.usage.devices)
        pods = [pod(f"g{k}", shape) for k, shape in enumerate(gang)]
        r = place_scored(pods, st_, policy, scorer=sc)
        answers[policy] = r.placed
        if not r.placed:
            assert st_.usage.devices == taken
            continue
        assert r.transaction is not None
        for pp, shape in zip(r.placements, gang, strict=True):
            tmpl = next(t for t in TEMPLATES if t.name == shape)
            req = tmpl.spec.spec.devices.requests[0].exactly  # type: ignore[union-attr]
            assert req is not None
            devs = [p.device for ca in pp.claims for p in ca.picks]
            assert len(devs) == req.count
            for d in devs:
                assert d.node_name == pp.node
                want_type = "gpu" if req.device_class_name == "gpu.nvidia.com" else "mig"
                assert d.attributes["gpu.nvidia.com/type"] == ("string", want_type)
                if req.selectors:
                    profile = shape.removeprefix("mig-")
                    assert (
                        d.attributes["gpu.nvidia.com/profile"][1].replace(".", "-").replace("+", "-")
                        == profile
                    )
        counters_ok(st_, slices)
        r.transaction.discard()
        assert st_.usage.devices == taken
    # first fit decides a scored miss: LeastFragmentation fits whenever FirstFit does; it may fit
    # where first fit does not (another device order for an earlier pod on a shared card), so
    # exactly when FirstFit does for whole GPUs alone (no partitionable card shared by two pods)
    if answers[FIRST_FIT]:
        assert answers[LEAST_FRAGMENTATION]
    if all(not s.startswith("mig-") for s in before + gang):
        assert answers[FIRST_FIT] == answers[LEAST_FRAGMENTATION]


def test_plain_devices_prefer_the_used_pcie_root() -> None:
    """GPUs without counters under two PCIe roots (interleaved in inventory order): with gpu-0 of
    root a taken, a 1-GPU job under LeastFragmentation takes root a's other GPU (gpu-2), keeping
    root b's pair free; first fit takes gpu-1."""
    devs = [
        {"name": f"gpu-{i}", "attributes": {"resource.kubernetes.io/pcieRoot": {"string": root}}}
        for i, root in enumerate(["a", "b", "a", "b"])
    ]
    cls = DeviceClass.model_validate(
        {"metadata": {"name": "gpu.nvidia.com"}, "spec": {"selectors": [{"cel": {"expression": "true"}}]}}
    )
    st_ = _one_node("n-gpus", {"devices": devs}, [cls], verify=True)
    sc = Scorer(st_)
    r = place_scored([pod("a", "gpu1")], st_, LEAST_FRAGMENTATION, scorer=sc)
    assert picks_of(r) == [["gpu-0"]] and r.transaction is not None  # equally free: inventory order
    r.transaction.commit()
    ff = place_scored([pod("b", "gpu1")], st_, FIRST_FIT)
    assert picks_of(ff) == [["gpu-1"]] and ff.transaction is not None
    ff.transaction.discard()
    lf = place_scored([pod("b", "gpu1")], st_, LEAST_FRAGMENTATION, scorer=sc)
    assert picks_of(lf) == [["gpu-2"]]


SMALL = ["gpu1", "gpu2", *(t for t in SHAPES if t.startswith("mig-"))]  # shapes that fit a 2-card node


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("place"), st.sampled_from(SMALL)),
            st.tuples(st.just("free"), st.integers(0, 7)),
        ),
        min_size=4,
        max_size=24,
    ),
    policy=st.sampled_from([FIRST_FIT, LEAST_FRAGMENTATION]),
    n_nodes=st.integers(1, 3),
)
def test_memos_across_releases_on_other_nodes(
    steps: list[tuple[str, Any]], policy: str, n_nodes: int
) -> None:
    """The allocator's failure memo, kept while no device of the node is released (releases on other
    nodes keep it: ``Usage.node_epochs``), and the scorer's node keys, kept while the node's devices
    and pods stay as they were (``Usage.node_changes``), as are its device orders and cards' counters
    used (``Scorer.device_order``), and the scored search's skip of nodes the failure memo rules out
    (``Allocator.known_misfit``) and of ordering a request none of whose devices can be taken
    (``Allocator._none_placeable``): placements and releases over up to three nodes,
    in verify mode (each kept answer computed again, a difference raises) and without it; both
    states place every pod on the same devices."""
    nodes, slices = cluster(n_nodes, 2)
    runs = []
    for verify in (True, False):
        st_ = ClusterState(nodes, slices, CLASSES, templates=TEMPLATES, verify=verify)
        sc = Scorer(st_, verify=verify)
        held: list[GangResult] = []
        out: list[object] = []
        for k, (what, arg) in enumerate(steps):
            if what == "place":
                r = place_scored([pod(f"p{k}", arg)], st_, policy, scorer=sc)
                out.append(picks_of(r) if r.placed else None)
                if r.transaction is not None:
                    r.transaction.commit()
                    held.append(r)
            elif held:
                gone = held.pop(arg % len(held))
                st_.usage.give_back_all([p for pp in gone.placements for ca in pp.claims for p in ca.picks])
                out.append(("freed", picks_of(gone)))
        runs.append(out)
    assert runs[0] == runs[1]


def _cards_node(cards: list[tuple[int, list[list[int]]]]) -> ClusterState:
    """One node whose cards (counter sets ``c<k>`` of counters ``a`` and ``b``) have the given total
    of each counter and devices consuming the given amounts of ``a`` and ``b`` (0: not at all)."""
    sets = [
        {"name": f"c{k}", "counters": {"a": {"value": str(total)}, "b": {"value": str(total)}}}
        for k, (total, _) in enumerate(cards)
    ]
    devs = []
    for k, (_, rows) in enumerate(cards):
        for d, amounts in enumerate(rows):
            used = {n: {"value": str(v)} for n, v in zip("ab", amounts, strict=True) if v}
            devs.append(
                {"name": f"c{k}-d{d}", "consumesCounters": [{"counterSet": f"c{k}", "counters": used}]}
            )
    return _one_node("n-cards", {"sharedCounters": sets, "devices": devs}, CLASSES)


def _one_node(
    slice_name: str, devices: dict[str, object], classes: list[DeviceClass], verify: bool = False
) -> ClusterState:
    """A cluster of one node ``n`` whose pool ``n`` is one ResourceSlice with these devices (and
    shared counters)."""
    sl = ResourceSlice.model_validate(
        {
            "metadata": {"name": slice_name},
            "spec": {
                "driver": "gpu.example.com",
                "pool": {"name": "n", "generation": 1, "resourceSliceCount": 1},
                "nodeName": "n",
                **devices,
            },
        }
    )
    n = Node.model_validate(
        {"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "8", "pods": "10"}}}
    )
    return ClusterState([n], [sl], classes, templates=TEMPLATES, verify=verify)


@settings(max_examples=60, deadline=None)
@given(
    cards=st.lists(
        st.tuples(
            st.integers(1, 4),
            st.lists(st.tuples(st.integers(1, 4), st.integers(0, 4)), min_size=1, max_size=3),
        ),
        min_size=1,
        max_size=5,
    )
)
def test_card_structure_is_computed_once_per_layout(cards: list[tuple[int, list[tuple[int, int]]]]) -> None:
    """``Scorer._build`` derives a card's representative counter and weights once per layout (its
    counters' names and totals and its devices' consumption): each card's are what its own totals
    and consumption give, with verify mode on (it derives every card's again) and off."""
    st_ = _cards_node([(total, [[min(a, total) for a in row] for row in rows]) for total, rows in cards])
    for verify in (False, True):
        sc = Scorer(st_, verify=verify)
        assert len(sc._cards) == len(cards)
        for card in sc._cards.values():
            common = set(range(len(card.totals)))
            for row in card.uses:
                common &= {j for j, _ in row}
            assert card.rep == card.counters[min(common) if common else 0]
            want = tuple(
                (sum((Fraction(a, card.totals[j]) for j, a in row), Fraction(0)) / len(card.totals)) ** 2
                for row in card.uses
            )
            assert card.weights == want
