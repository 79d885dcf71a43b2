"""Flavor assignment + quota + gang placement for one workload in one ClusterQueue.

``Assigner.try_assign`` answers: with this quota usage and this placement state, can the workload
(with these pod counts) be admitted, and if so with which flavors, charging what, placed where?

* Every resource a pod set requests (``requests`` and ``device_requests`` keys) must be covered by
  one of the ClusterQueue's resource groups (Kueue: "resource X unavailable in ClusterQueue"),
  except device capacity charges (``<class>/<capacity>``), which are charged only when covered.
  ``pods`` is charged one per pod when the ClusterQueue covers it.
* Flavor combinations (one flavor per relevant resource group, groups in order, flavors in the
  group's order) are tried in order. A flavor is skipped when the pod set does not tolerate its
  taints or its node selector contradicts the flavor's labels.
* For each combination: a quota pre-check with the expected charges, then the placer, then the
  exact quota check with the charges of the planned devices. Flavor fungibility decides whether
  a fit by borrowing (``whenCanBorrow``) or a fit only by preemption (``whenCanPreempt``) stops the
  search or the next flavor is tried first.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from queueing.scheduling.placer import Placement, PlacementFailure, Placer
from queueing.scheduling.quota import QuotaTree, to_units
from queueing.scheduling.reasons import Why
from queueing.scheduling.snapshot import (
    ClusterQueueSpec,
    FlavorResource,
    FlavorSpec,
    PodSetInfo,
    ResourceGroup,
    WorkloadInfo,
)
from queueing.scheduling.verify import checked

__all__ = ["Assigner", "Assignment", "Combo", "Outcome", "ShapeCache"]

_ZERO = Fraction(0)
_SHAPES_LIMIT = 1 << 16  # shapes kept at most (emptied past it)


@dataclass(frozen=True)
class Assignment:
    counts: Mapping[str, int]  # pod set -> admitted pods
    flavors: Mapping[str, Mapping[str, str]]  # pod set -> resource -> flavor
    usage: Mapping[FlavorResource, Fraction]  # charged quota
    placement: Placement
    borrows: bool


@dataclass(frozen=True)
class Combo:
    """One choice of flavor per relevant resource group."""

    group_flavors: tuple[tuple[int, str], ...]  # (group index, flavor name)


@dataclass(frozen=True)
class Outcome:
    assignment: Assignment | None  # fits now (within the fungibility rules)
    # combinations that could fit by evicting something (quota mode Preempt or devices short)
    preemptible: tuple[Combo, ...]
    message: str  # why it does not fit now (empty when it does)
    hard: bool = False  # can never fit in this ClusterQueue as configured
    why: Why | None = None  # ``message`` as data, when it names the workload's pods or claims


def _is_capacity(resource: str) -> bool:
    # device charges are DeviceClass names (DNS subdomains, no "/") or "<class>/<capacity>"
    return "/" in resource


@dataclass
class _Shape:
    """What ``try_assign`` derives from a workload's pod sets in one ClusterQueue, computed once:
    the workloads of one fit signature (``WorkloadInfo.fit_signature``: pod set names, counts,
    requests, selectors, tolerations) derive the same. Filled as needed; an entry never changes
    and the values handed out are shared (callers must not modify them)."""

    cq: ClusterQueueSpec  # the spec it was derived from (a cache entry is only used for this one)
    groups: dict[str, set[int]]
    groups_err: str
    combos: tuple[list[Combo], str] | None = None
    flavors: dict[Combo, tuple[dict[str, dict[str, str]], dict[str, list[FlavorSpec]]]] = field(
        default_factory=dict
    )
    # (combo, pod counts, with devices) -> regular_usage
    usage: dict[tuple[Combo, tuple[tuple[str, int], ...], bool], dict[FlavorResource, Fraction]] = field(
        default_factory=dict
    )
    # (combo, pod counts) -> the expected usage with devices in units, sorted (QuotaTree.fit_units)
    units: dict[tuple[Combo, tuple[tuple[str, int], ...]], list[tuple[FlavorResource, int]]] = field(
        default_factory=dict
    )


# (ClusterQueue, fit signature) -> what try_assign derives for it (see _Shape)
ShapeCache = dict[tuple[str, str], _Shape]


class Assigner:
    def __init__(
        self,
        flavors: Mapping[str, FlavorSpec],
        placer: Placer[Any],
        shapes: ShapeCache | None = None,
        *,
        verify: bool = False,
    ):
        """``shapes``: a cache of derived shapes to use and fill (kept by a caller between cycles);
        only valid for the same flavors (a shape depends on the ClusterQueue spec, which it checks,
        on the workload's fit signature and on the flavors, not on the placer). ``verify``: every
        answer from the cache is checked against the same derivation afresh (``VerifyError``)."""
        self.flavors = flavors
        self.placer = placer
        self.verify = verify
        # (ClusterQueue, fit signature) -> shape
        self._shapes: ShapeCache = {} if shapes is None else shapes

    def _shape(self, cq: ClusterQueueSpec, wl: WorkloadInfo) -> _Shape:
        k = (cq.name, wl.fit_signature)
        got = self._shapes.get(k)
        if got is None or got.cq is not cq:
            groups, err = self._derive_groups(cq, wl)
            if len(self._shapes) >= _SHAPES_LIMIT:
                self._shapes.clear()
            got = self._shapes[k] = _Shape(cq, groups, err)
        elif self.verify:
            checked(
                "Assigner shape cache (groups)",
                (got.groups, got.groups_err),
                lambda: self._derive_groups(cq, wl),
                f"ClusterQueue {cq.name}, workload {wl.key}",
            )
        return got

    def _combos(self, shape: _Shape, wl: WorkloadInfo) -> tuple[list[Combo], str]:
        if shape.combos is None:
            shape.combos = self._derive_combos(shape.cq, wl, shape.groups)
        elif self.verify:
            checked(
                "Assigner shape cache (combos)",
                shape.combos,
                lambda: self._derive_combos(shape.cq, wl, shape.groups),
                f"workload {wl.key}",
            )
        return shape.combos

    def _flavor_map(
        self, shape: _Shape, wl: WorkloadInfo, combo: Combo
    ) -> tuple[dict[str, dict[str, str]], dict[str, list[FlavorSpec]]]:
        got = shape.flavors.get(combo)
        if got is None:
            got = shape.flavors[combo] = self._derive_flavor_map(shape.cq, wl, combo, shape.groups)
        elif self.verify:
            checked(
                "Assigner shape cache (flavor map)",
                got,
                lambda: self._derive_flavor_map(shape.cq, wl, combo, shape.groups),
                f"workload {wl.key}, {combo}",
            )
        return got

    def _usage(
        self, shape: _Shape, wl: WorkloadInfo, counts: Mapping[str, int], combo: Combo, with_devices: bool
    ) -> dict[FlavorResource, Fraction]:
        k = (combo, tuple(counts.items()), with_devices)
        got = shape.usage.get(k)
        if got is None:
            res_flavor = self._flavor_map(shape, wl, combo)[0]
            got = shape.usage[k] = self.regular_usage(shape.cq, wl, counts, res_flavor, with_devices)
        elif self.verify:
            checked(
                "Assigner shape cache (usage)",
                got,
                lambda: self.regular_usage(
                    shape.cq,
                    wl,
                    counts,
                    self._derive_flavor_map(shape.cq, wl, combo, shape.groups)[0],
                    with_devices,
                ),
                f"workload {wl.key}, {combo}, counts {dict(counts)}",
            )
        return got

    def _units(
        self, shape: _Shape, wl: WorkloadInfo, counts: Mapping[str, int], combo: Combo
    ) -> list[tuple[FlavorResource, int]]:
        k = (combo, tuple(counts.items()))
        got = shape.units.get(k)
        if got is None:
            expected = self._usage(shape, wl, counts, combo, True)
            got = shape.units[k] = [(fr, to_units(expected[fr])) for fr in sorted(expected)]
        elif self.verify:
            expected = self._usage(shape, wl, counts, combo, True)
            checked(
                "Assigner shape cache (units)",
                got,
                lambda: [(fr, to_units(expected[fr])) for fr in sorted(expected)],
                f"workload {wl.key}, {combo}",
            )
        return got

    def expected_usage(
        self, cq: ClusterQueueSpec, wl: WorkloadInfo, counts: Mapping[str, int], combo: Combo
    ) -> dict[FlavorResource, Fraction]:
        """The charges expected for ``combo`` before placing (``regular_usage`` with devices);
        shared: do not modify."""
        return self._usage(self._shape(cq, wl), wl, counts, combo, True)

    def expected_units(
        self, cq: ClusterQueueSpec, wl: WorkloadInfo, counts: Mapping[str, int], combo: Combo
    ) -> list[tuple[FlavorResource, int]]:
        """:meth:`expected_usage` in units, sorted (what ``QuotaTree.fit_units`` takes); shared."""
        return self._units(self._shape(cq, wl), wl, counts, combo)

    # ---- helpers -------------------------------------------------------------------------------
    @staticmethod
    def _group_of(cq: ClusterQueueSpec, resource: str) -> int | None:
        for i, g in enumerate(cq.resource_groups):
            if resource in g.covered_resources:
                return i
        return None

    def _flavor_ok(self, ps: PodSetInfo, name: str) -> str:
        f = self.flavors.get(name)
        if f is None:
            return f"flavor {name} not found"
        for t in f.node_taints:
            if t.effect == "PreferNoSchedule":
                continue
            if not any(tol.tolerates(t) for tol in (*ps.tolerations, *f.tolerations)):
                return f"untolerated taint {t.key}={t.value}:{t.effect} in flavor {name}"
        for k, v in ps.node_selector.items():
            if k in f.node_labels and f.node_labels[k] != v:
                return f"flavor {name} doesn't match node affinity ({k}={v})"
        return ""

    def relevant_groups(self, cq: ClusterQueueSpec, wl: WorkloadInfo) -> tuple[dict[str, set[int]], str]:
        """Pod set -> indices of the resource groups it needs; or an error message (shared: do not
        modify)."""
        shape = self._shape(cq, wl)
        return shape.groups, shape.groups_err

    def combos(
        self, cq: ClusterQueueSpec, wl: WorkloadInfo, groups: Mapping[str, set[int]]
    ) -> tuple[list[Combo], str]:
        """The flavor combinations to try, in order; or why there is none (shared: do not modify)."""
        shape = self._shape(cq, wl)
        if groups is shape.groups:  # what relevant_groups gave: derived once per shape
            return self._combos(shape, wl)
        return self._derive_combos(cq, wl, groups)

    def flavor_map(
        self, cq: ClusterQueueSpec, wl: WorkloadInfo, combo: Combo, groups: Mapping[str, set[int]]
    ) -> tuple[dict[str, dict[str, str]], dict[str, list[FlavorSpec]]]:
        """Pod set -> resource -> flavor, and pod set -> the flavors' specs (shared: do not modify)."""
        shape = self._shape(cq, wl)
        if groups is shape.groups:
            return self._flavor_map(shape, wl, combo)
        return self._derive_flavor_map(cq, wl, combo, groups)

    def _derive_groups(self, cq: ClusterQueueSpec, wl: WorkloadInfo) -> tuple[dict[str, set[int]], str]:
        out: dict[str, set[int]] = {}
        for ps in wl.pod_sets:
            need: set[int] = set()
            names = [r for r, v in ps.requests.items() if v > 0] + [
                r for r, v in ps.device_requests.items() if v > 0
            ]
            for r in names:
                gi = self._group_of(cq, r)
                if gi is None:
                    if r in ps.device_requests and _is_capacity(r):
                        continue
                    return {}, f"resource {r} unavailable in ClusterQueue {cq.name}"
                need.add(gi)
            gp = self._group_of(cq, "pods")
            if gp is not None:
                need.add(gp)
            out[ps.name] = need
        return out, ""

    def _derive_combos(
        self, cq: ClusterQueueSpec, wl: WorkloadInfo, groups: Mapping[str, set[int]]
    ) -> tuple[list[Combo], str]:
        used = sorted(set().union(*groups.values())) if groups else []
        per_group: list[list[tuple[int, str]]] = []
        why = ""
        for gi in used:
            g: ResourceGroup = cq.resource_groups[gi]
            ok = []
            for fq in g.flavors:
                msgs = [
                    self._flavor_ok(ps, fq.name) for ps in wl.pod_sets if gi in groups.get(ps.name, set())
                ]
                bad = next((m for m in msgs if m), "")
                if bad:
                    why = why or bad
                    continue
                ok.append((gi, fq.name))
            if not ok:
                return [], why or f"no flavor in resource group {gi} of ClusterQueue {cq.name}"
            per_group.append(ok)
        return [Combo(tuple(c)) for c in itertools.product(*per_group)], ""

    def _derive_flavor_map(
        self, cq: ClusterQueueSpec, wl: WorkloadInfo, combo: Combo, groups: Mapping[str, set[int]]
    ) -> tuple[dict[str, dict[str, str]], dict[str, list[FlavorSpec]]]:
        chosen = dict(combo.group_flavors)
        res_flavor: dict[str, dict[str, str]] = {}
        specs: dict[str, list[FlavorSpec]] = {}
        for ps in wl.pod_sets:
            gis = sorted(groups.get(ps.name, set()))
            res_flavor[ps.name] = {
                r: chosen[gi] for gi in gis for r in cq.resource_groups[gi].covered_resources
            }
            specs[ps.name] = [self.flavors[chosen[gi]] for gi in gis]
        return res_flavor, specs

    def regular_usage(
        self,
        cq: ClusterQueueSpec,
        wl: WorkloadInfo,
        counts: Mapping[str, int],
        res_flavor: Mapping[str, Mapping[str, str]],
        with_devices: bool,
    ) -> dict[FlavorResource, Fraction]:
        usage: dict[FlavorResource, Fraction] = {}
        for ps in wl.pod_sets:
            n = counts.get(ps.name, ps.count)
            fl = res_flavor[ps.name]
            items = list(ps.requests.items())
            if with_devices:
                items += list(ps.device_requests.items())
            if "pods" in fl and "pods" not in ps.requests:
                items.append(("pods", Fraction(1)))
            for r, v in items:
                if r in fl and v:
                    k = (fl[r], r)
                    usage[k] = usage.get(k, _ZERO) + v * n
        return usage

    @staticmethod
    def charges_known(cq: ClusterQueueSpec, wl: WorkloadInfo) -> bool:
        """Whether a plan charges exactly the expected usage (``regular_usage`` with devices): every
        pod set's device charges are exact and the ClusterQueue covers no device capacity."""
        if not all(ps.devices_exact for ps in wl.pod_sets):
            return False
        return not any(_is_capacity(r) for g in cq.resource_groups for r in g.covered_resources)

    def device_usage(
        self, cq: ClusterQueueSpec, res_flavor: Mapping[str, Mapping[str, str]], placement: Placement
    ) -> tuple[dict[FlavorResource, Fraction], str]:
        # the flavor of a device resource: from the first pod set whose groups cover it
        usage: dict[FlavorResource, Fraction] = {}
        for r, v in placement.device_charges.items():
            if not v:
                continue
            flavor = next((fl[r] for fl in res_flavor.values() if r in fl), None)
            if flavor is None:
                gi = self._group_of(cq, r)
                if gi is None:
                    if _is_capacity(r):
                        continue
                    return {}, f"resource {r} unavailable in ClusterQueue {cq.name}"
                flavor = cq.resource_groups[gi].flavors[0].name
            usage[(flavor, r)] = usage.get((flavor, r), _ZERO) + v
        return usage, ""

    # ---- the search ----------------------------------------------------------------------------
    def try_assign(
        self,
        cq: ClusterQueueSpec,
        wl: WorkloadInfo,
        counts: Mapping[str, int],
        tree: QuotaTree,
        state: object,
        only: Sequence[Combo] | None = None,
        allow_borrow: bool = True,
    ) -> Outcome:
        shape = self._shape(cq, wl)
        if shape.groups_err:
            return Outcome(None, (), shape.groups_err, hard=True)
        if only is None:
            combos, err = self._combos(shape, wl)
            if err:
                return Outcome(None, (), err, hard=True)
        else:
            combos = list(only)
        fung = cq.flavor_fungibility
        fallback: Assignment | None = None
        preemptible: list[Combo] = []
        first_msg = ""
        first_why: Why | None = None  # first_msg as data (a placement failure's)
        all_nofit = True
        for combo in combos:
            res_flavor, specs = self._flavor_map(shape, wl, combo)
            pre = tree.fit_units(cq.name, self._units(shape, wl, counts, combo))
            if pre.mode == "NoFit":
                first_msg = first_msg or pre.message()
                continue
            all_nofit = False
            if pre.mode == "Preempt" or (pre.borrows and not allow_borrow):
                preemptible.append(combo)
                first_msg = first_msg or pre.message() or "needs to borrow"
                if fung.when_can_preempt == "Preempt":
                    break
                continue
            placed = self.placer.place(wl, counts, specs, state)
            if isinstance(placed, PlacementFailure):
                preemptible.append(combo)
                if not first_msg:
                    first_msg = f"couldn't place the gang: {placed.message}"
                    if placed.why is not None:
                        first_why = placed.why.prefixed("couldn't place the gang: ")
                if fung.when_can_preempt == "Preempt":
                    break
                continue
            dev, err = self.device_usage(cq, res_flavor, placed)
            if err:
                return Outcome(None, (), err, hard=True)
            usage = dict(self._usage(shape, wl, counts, combo, False))
            for k, v in dev.items():
                usage[k] = usage.get(k, _ZERO) + v
            fit = tree.fit(cq.name, usage)
            if fit.mode == "Fit" and (allow_borrow or not fit.borrows):
                a = Assignment(dict(counts), res_flavor, usage, placed, fit.borrows)
                if not fit.borrows or fung.when_can_borrow == "Borrow":
                    return Outcome(a, tuple(preemptible), "")
                fallback = fallback or a
                continue
            if fit.mode == "NoFit":
                first_msg = first_msg or fit.message()
                continue
            preemptible.append(combo)
            first_msg = first_msg or fit.message() or "needs to borrow"
            if fung.when_can_preempt == "Preempt":
                break
        if fallback is not None:
            return Outcome(fallback, tuple(preemptible), "")
        return Outcome(
            None,
            tuple(preemptible),
            first_msg or "does not fit",
            hard=all_nofit and not preemptible,
            why=first_why,
        )
