"""The integer (unit) paths of the quota tree and the shares agree with the exact ones, and quota is
monotone in what is taken out (what the eviction planner's shortcuts rely on)."""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from sched_helpers import gpu_cq

from queueing.api.quantity import Quantity
from queueing.scheduling import CohortSpec
from queueing.scheduling.fairshare import (
    ZERO_SHARE,
    dominant_resource_share,
    extra_units,
    share_key,
    share_units,
)
from queueing.scheduling.quota import QuotaFit, QuotaTree, cq_id, from_units, to_units
from queueing.scheduling.snapshot import FlavorQuotas, ResourceGroup, ResourceQuota

F = Fraction
FR = ("default", "gpu")
# amounts: whole numbers and fractions, some below 10^-9 (not whole units)
amounts = st.one_of(
    st.integers(0, 12).map(F),
    st.fractions(min_value=0, max_value=12, max_denominator=7),
    st.integers(1, 3).map(lambda n: F(n, 3 * 10**9)),
)


@st.composite
def trees(draw: st.DrawFn) -> tuple[QuotaTree, list[str]]:
    n_cq = draw(st.integers(1, 4))
    cohorts: list[CohortSpec] = []
    if draw(st.booleans()):
        group = ResourceGroup(
            ("gpu",), (FlavorQuotas("default", {"gpu": ResourceQuota(F(draw(st.integers(0, 8))))}),)
        )
        cohorts = [CohortSpec("root", resource_groups=(group,)), CohortSpec("co", parent="root")]
    cqs = []
    for i in range(n_cq):
        nominal = draw(st.integers(0, 10))
        cqs.append(
            gpu_cq(
                f"cq{i}",
                nominal,
                cohort="co" if cohorts or draw(st.booleans()) else None,
                borrowing=draw(st.one_of(st.none(), st.integers(0, 10))),
                lending=draw(st.one_of(st.none(), st.integers(0, nominal))),
                fair_weight=F(draw(st.integers(0, 3))),
            )
        )
    tree = QuotaTree(cqs, cohorts)
    names = [cq.name for cq in cqs]
    for name in names:
        for _ in range(draw(st.integers(0, 3))):
            tree.add_usage(name, {FR: draw(amounts)})
    return tree, names


@settings(max_examples=150, deadline=None)
@given(trees(), st.data())
def test_unit_paths_match_exact_ones(sc: tuple[QuotaTree, list[str]], data: st.DataObject) -> None:
    tree, names = sc
    name = data.draw(st.sampled_from(names))
    extra = {FR: data.draw(amounts)}
    # fit / fit_units
    units = [(fr, to_units(v)) for fr, v in sorted(extra.items())]
    assert tree.fit_units(name, units) == tree.fit(name, extra)
    # shares: share_units is dominant_resource_share's key, also with another usage given
    drs = dominant_resource_share(tree, cq_id(name), extra)
    assert share_units(tree, cq_id(name), None, extra_units(extra)) == (drs.borrowing, drs.key())
    path = tree.path(name)[1:]  # share_key: the shares from the root's child down to the ClusterQueue
    expected = tuple(dominant_resource_share(tree, nid, extra).key() for nid in path) or (ZERO_SHARE,)
    assert share_key(tree, name, extra) == expected
    taken = {FR: data.draw(amounts)}
    usage = dict(tree.node(cq_id(name)).usage)
    if taken[FR]:
        usage[FR] = usage.get(FR, 0) - to_units(taken[FR])
    before = tree.clone()
    tree.remove_usage(name, taken)
    drs = dominant_resource_share(tree, cq_id(name))
    assert share_units(before, cq_id(name), usage) == (drs.borrowing, drs.key())
    # add_units / remove_units are add_usage / remove_usage of whole-unit amounts
    whole = {FR: F(data.draw(st.integers(0, 5)))}
    a, b = tree.clone(), tree.clone()
    a.add_usage(name, whole)
    b.add_units(name, {fr: to_units(v) for fr, v in whole.items()})
    assert {n: x.usage for n, x in a.nodes.items()} == {n: x.usage for n, x in b.nodes.items()}
    a.remove_usage(name, whole)
    b.remove_units(name, {fr: to_units(v) for fr, v in whole.items()})
    assert {n: x.usage for n, x in a.nodes.items()} == {n: x.usage for n, x in b.nodes.items()}


@settings(max_examples=150, deadline=None)
@given(trees(), st.data())
def test_quota_fit_is_monotone_in_what_is_taken_out(
    sc: tuple[QuotaTree, list[str]], data: st.DataObject
) -> None:
    """Taking out a superset of non-negative amounts never fits less (the eviction planner checks
    quota with everything the strategy allows gone before checking its subsets)."""
    tree, names = sc
    name = data.draw(st.sampled_from(names))
    request = {FR: data.draw(amounts)}
    small = [
        (data.draw(st.sampled_from(names)), data.draw(amounts)) for _ in range(data.draw(st.integers(0, 3)))
    ]
    more = [
        (data.draw(st.sampled_from(names)), data.draw(amounts)) for _ in range(data.draw(st.integers(0, 3)))
    ]

    def fits(removed: list[tuple[str, Fraction]], allow_borrow: bool = True) -> bool:
        t = tree.clone()
        for q, v in removed:
            t.remove_usage(q, {FR: v})
        fit = t.fit(name, request)
        return fit.mode == "Fit" and (allow_borrow or not fit.borrows)

    for allow_borrow in (True, False):  # also fitting without borrowing (reclamation)
        if fits(small, allow_borrow):
            assert fits([*small, *more], allow_borrow)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 10**12), st.integers(-(10**12), 10**12), st.booleans(), st.sampled_from(["gpu", "memory"])
)
def test_fit_messages_in_units_read_as_the_exact_amounts(req: int, have: int, nofit: bool, res: str) -> None:
    """The amounts in a quota message are quantities as kubectl prints them, exactly the amounts."""
    fit = QuotaFit("NoFit" if nofit else "Preempt", False, ("f", res, req, have))
    r, h = from_units(req), from_units(have)
    assert fit.short == ("f", res, r, h)
    msg = fit.message()
    if nofit:
        m = re.search(r"request > maximum capacity \((\S+) > (\S+)\)$", msg)
        assert m is not None, msg
        assert (Quantity.parse(m.group(1)).value, Quantity.parse(m.group(2)).value) == (r, h)
    else:
        m = re.search(r", (\S+) more needed$", msg)
        assert m is not None, msg
        assert Quantity.parse(m.group(1)).value == r - h
    assert QuotaFit("Fit", True).message() == "" and QuotaFit("Fit", True).short is None


def test_fit_messages_print_quantities_as_kubectl_does() -> None:
    gi = 2**30 * 10**9  # 1Gi in units
    assert (
        QuotaFit("Preempt", False, ("f", "memory", 20 * gi, 4 * gi)).message().endswith(", 16Gi more needed")
    )
    assert QuotaFit("NoFit", False, ("f", "cpu", 10**9 // 2 * 3, 10**9)).message().endswith("(1500m > 1)")
    assert (
        QuotaFit("Preempt", False, ("f", "gpu.nvidia.com", 8 * 10**9, 0))
        .message()
        .endswith(", 8 more needed")
    )


# the tree's arithmetic written out plainly from the node methods (the tree inlines them)
def _ref_available(n: Any, fr: tuple[str, str]) -> int:
    if n.parent is None:
        return int(n.subtree.get(fr, 0) - n.usage.get(fr, 0))
    parent = _ref_available(n.parent, fr)
    bl = n.bl.get(fr)
    if bl is not None:
        g = n.guaranteed(fr)
        parent = min(n.subtree.get(fr, 0) - g - max(0, n.usage.get(fr, 0) - g) + bl, parent)
    return int(n.local_available(fr) + parent)


def _ref_potential(n: Any, fr: tuple[str, str]) -> int:
    if n.parent is None:
        return int(n.subtree.get(fr, 0))
    got = n.guaranteed(fr) + _ref_potential(n.parent, fr)
    bl = n.bl.get(fr)
    return int(got if bl is None else min(n.subtree.get(fr, 0) + bl, got))


def _ref_add(n: Any, fr: tuple[str, str], val: int) -> None:
    local = n.local_available(fr)
    n.usage[fr] = n.usage.get(fr, 0) + val
    if n.parent is not None and val > local:
        _ref_add(n.parent, fr, val - local)


def _ref_remove(n: Any, fr: tuple[str, str], val: int) -> None:
    stored = n.usage.get(fr, 0) - n.guaranteed(fr)
    n.usage[fr] = n.usage.get(fr, 0) - val
    if stored > 0 and n.parent is not None:
        _ref_remove(n.parent, fr, min(val, stored))


@settings(max_examples=150, deadline=None)
@given(trees(), st.data())
def test_inlined_arithmetic_matches_the_node_formulas(
    sc: tuple[QuotaTree, list[str]], data: st.DataObject
) -> None:
    tree, names = sc
    ref = tree.clone()
    for _ in range(data.draw(st.integers(1, 6))):
        name = data.draw(st.sampled_from(names))
        val = to_units(data.draw(amounts))
        if data.draw(st.booleans()):
            tree.add_units(name, {FR: val})
            if val:
                _ref_add(ref.node(cq_id(name)), FR, val)
        else:
            tree.remove_units(name, {FR: val})
            if val:
                _ref_remove(ref.node(cq_id(name)), FR, val)
        assert {n: x.usage for n, x in tree.nodes.items()} == {n: x.usage for n, x in ref.nodes.items()}
        for nid, node in tree.nodes.items():
            if nid.startswith("cq:") and nid[3:] not in tree.disabled:
                assert tree._available(node, FR) == _ref_available(node, FR)
                assert tree.potential_units(nid, FR) == _ref_potential(node, FR)
