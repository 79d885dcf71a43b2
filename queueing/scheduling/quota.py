"""The quota tree: ClusterQueues and (hierarchical) Cohorts with nominal quota, borrowing and lending.

Semantics follow Kueue's resource nodes exactly (per flavor-resource ``fr``):

* ``subtree(node)``: a ClusterQueue's nominal quota; for a Cohort its own nominal quota plus, for
  every child, ``subtree(child) - guaranteed(child)``.
* ``guaranteed(node) = max(0, subtree(node) - lendingLimit)`` if a lending limit is set, else 0:
  the part of the node's quota that is never lent to its parent.
* ``usage(node)``: a ClusterQueue's admitted usage; for a Cohort the sum of its children's usage
  beyond their guaranteed quota.
* ``available(node)``: for a root ``subtree - usage``; otherwise the unused guaranteed quota plus
  what the parent has available, the latter capped, when a borrowing limit is set, at
  ``subtree - guaranteed - max(0, usage - guaranteed) + borrowingLimit``.
* A request fits when ``request <= available`` for every flavor-resource it charges. This keeps
  ``usage <= nominal + borrowingLimit`` for every ClusterQueue and never lets the others in a
  cohort use more than a member's lendingLimit of its quota.

A cohort whose parent chain loops is not part of any tree; the ClusterQueues below it are
disabled (``disabled`` maps their names to the reason).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from queueing.api.quantity import format_amount
from queueing.scheduling.snapshot import ClusterQueueSpec, CohortSpec, FlavorResource, ResourceQuota

__all__ = ["FitMode", "QuotaFit", "QuotaTree", "cohort_cycles", "cohort_id", "cq_id"]

FitMode = Literal["Fit", "Preempt", "NoFit"]
_ZERO = Fraction(0)
# Internally amounts are integers of 10^-9 units: quantities have at most that precision
# (Quantity rounds to 1n), so this stays exact and is much faster than Fraction arithmetic.
SCALE = 10**9


def to_units(v: Fraction | int) -> int:
    if isinstance(v, int):
        return v * SCALE
    n = v.numerator * SCALE
    return -(-n // v.denominator)  # round up (never under-charge)


def from_units(n: int) -> Fraction:
    return Fraction(n, SCALE)


def cq_id(name: str) -> str:
    return "cq:" + name


def cohort_id(name: str) -> str:
    return "cohort:" + name


class _Node:
    __slots__ = ("bl", "children", "id", "ll", "name", "parent", "quotas", "subtree", "usage", "weight")

    def __init__(
        self, node_id: str, name: str, quotas: dict[FlavorResource, ResourceQuota], weight: Fraction
    ):
        self.id = node_id
        self.name = name
        self.quotas = quotas
        self.weight = weight
        self.parent: _Node | None = None
        self.children: list[_Node] = []
        # all in units of 10^-9
        self.bl: dict[FlavorResource, int] = {
            fr: to_units(q.borrowing_limit) for fr, q in quotas.items() if q.borrowing_limit is not None
        }
        self.ll: dict[FlavorResource, int] = {
            fr: to_units(q.lending_limit) for fr, q in quotas.items() if q.lending_limit is not None
        }
        self.subtree: dict[FlavorResource, int] = {}
        self.usage: dict[FlavorResource, int] = {}

    def guaranteed(self, fr: FlavorResource) -> int:
        ll = self.ll.get(fr)
        if ll is not None:
            return max(0, self.subtree.get(fr, 0) - ll)
        return 0

    def local_available(self, fr: FlavorResource) -> int:
        return max(0, self.guaranteed(fr) - self.usage.get(fr, 0))


@dataclass(frozen=True)
class QuotaFit:
    """How a request fits a ClusterQueue's quota."""

    mode: FitMode
    borrows: bool  # fits only by borrowing from the cohort
    # for anything but Fit: (flavor, resource, requested, available-or-maximum) of the first miss,
    # amounts in units (``short`` gives them as amounts)
    miss: tuple[str, str, int, int] | None = None

    @property
    def short(self) -> tuple[str, str, Fraction, Fraction] | None:
        """For anything but Fit: (flavor, resource, requested, available-or-maximum) of the first miss."""
        if self.miss is None:
            return None
        flavor, res, req, have = self.miss
        return flavor, res, from_units(req), from_units(have)

    def message(self) -> str:
        if self.miss is None:
            return ""
        return _message(self.mode == "NoFit", *self.miss)


@functools.lru_cache(maxsize=1 << 12)
def _message(nofit: bool, flavor: str, res: str, req: int, have: int) -> str:
    """:meth:`QuotaFit.message` (amounts in units, printed as kubectl prints quantities: ``16Gi``,
    ``500m``); cached: the same misses come back every cycle."""
    if nofit:
        return (
            f"insufficient quota for {res} in flavor {flavor}, request > maximum capacity "
            f"({_fmt_units(req, res)} > {_fmt_units(have, res)})"
        )
    return (
        f"insufficient unused quota for {res} in flavor {flavor}, {_fmt_units(req - have, res)} more needed"
    )


_FITS = QuotaFit("Fit", False)
_FITS_BORROWING = QuotaFit("Fit", True)


def _fmt_units(n: int, resource: str) -> str:
    """An amount of ``resource`` in units as text (``queueing.api.quantity.format_amount``)."""
    return format_amount(from_units(n), resource)


def cohort_cycles(specs: Mapping[str, CohortSpec]) -> dict[str, str]:
    """Cohort name -> "a -> b -> a" for every cohort that is on a parent cycle."""
    out: dict[str, str] = {}
    for start in sorted(specs):
        path: list[str] = []
        cur: str | None = start
        while cur is not None and cur not in path:
            path.append(cur)
            spec = specs.get(cur)
            cur = spec.parent if spec else None
        if cur is not None and cur == start:
            out[start] = " -> ".join([*path, start])
    return out


class QuotaTree:
    """Mutable per-cycle accounting of quota usage (build one per cycle; ``clone`` to try things)."""

    def __init__(self, cluster_queues: Iterable[ClusterQueueSpec], cohorts: Iterable[CohortSpec] = ()):
        self.nodes: dict[str, _Node] = {}
        self.disabled: dict[str, str] = {}
        cohort_specs = {c.name: c for c in cohorts}
        cq_specs = list(cluster_queues)
        # implicit cohorts: named by a ClusterQueue or as a parent, without a Cohort object
        names = set(cohort_specs)
        names.update(cq.cohort for cq in cq_specs if cq.cohort)
        names.update(c.parent for c in cohort_specs.values() if c.parent)
        for name in sorted(names):
            spec = cohort_specs.get(name, CohortSpec(name=name))
            self.nodes[cohort_id(name)] = _Node(cohort_id(name), name, spec.quotas(), spec.fair_weight)
        cyclic = cohort_cycles(cohort_specs)
        for name in sorted(names):
            own = cohort_specs.get(name)
            if own is not None and own.parent and name not in cyclic:
                self._link(self.nodes[cohort_id(name)], self.nodes[cohort_id(own.parent)])
        for cq in cq_specs:
            node = _Node(cq_id(cq.name), cq.name, cq.quotas(), cq.fair_weight)
            self.nodes[node.id] = node
            if cq.cohort:
                bad = self._cycle_reason(cq.cohort, cohort_specs, cyclic)
                if bad:
                    self.disabled[cq.name] = bad
                    continue
                self._link(node, self.nodes[cohort_id(cq.cohort)])
        # drop cohorts on or under a cycle from the forest
        for name in sorted(names):
            if self._cycle_reason(name, cohort_specs, cyclic):
                n = self.nodes[cohort_id(name)]
                if n.parent is not None and n in n.parent.children:
                    n.parent.children.remove(n)
                n.parent = None
                n.children = []
        for root in [n for n in self.nodes.values() if n.parent is None]:
            self._accumulate(root)
        # per node: resource -> what it could borrow at most (depends on quotas only)
        self._lendable: dict[str, dict[str, int]] = {}
        # (node, flavor-resource) -> _potential (depends on quotas only)
        self._potentials: dict[tuple[str, FlavorResource], int] = {}

    # ---- construction helpers ------------------------------------------------------------------
    @staticmethod
    def _link(child: _Node, parent: _Node) -> None:
        child.parent = parent
        parent.children.append(child)

    @staticmethod
    def _cycle_reason(name: str, specs: Mapping[str, CohortSpec], cyclic: Mapping[str, str]) -> str:
        seen: set[str] = set()
        cur: str | None = name
        while cur is not None and cur not in seen:
            if cur in cyclic:
                return f"cohort {name} is in a cohort tree with a cycle: {cyclic[cur]}"
            seen.add(cur)
            spec = specs.get(cur)
            cur = spec.parent if spec else None
        return ""

    def _accumulate(self, node: _Node) -> None:
        node.subtree = {fr: to_units(q.nominal) for fr, q in node.quotas.items()}
        for child in node.children:
            self._accumulate(child)
            for fr, q in child.subtree.items():
                node.subtree[fr] = node.subtree.get(fr, 0) + q - child.guaranteed(fr)

    # ---- copying -------------------------------------------------------------------------------
    def clone(self) -> QuotaTree:
        new = QuotaTree.__new__(QuotaTree)
        new.disabled = self.disabled
        new._lendable = self._lendable  # quotas and structure are shared
        new._potentials = self._potentials
        new.nodes = {}
        for nid, n in self.nodes.items():
            c = _Node.__new__(_Node)
            c.id, c.name, c.quotas, c.weight = n.id, n.name, n.quotas, n.weight
            c.bl, c.ll, c.parent, c.children = n.bl, n.ll, None, []
            c.subtree = n.subtree
            c.usage = dict(n.usage)
            new.nodes[nid] = c
        for nid, n in self.nodes.items():
            c = new.nodes[nid]
            if n.parent is not None:
                c.parent = new.nodes[n.parent.id]
            c.children = [new.nodes[ch.id] for ch in n.children]
        return new

    # ---- queries -------------------------------------------------------------------------------
    def has_cq(self, name: str) -> bool:
        return cq_id(name) in self.nodes

    def node(self, node_id: str) -> _Node:
        return self.nodes[node_id]

    def root_of(self, cq: str) -> str:
        n = self.nodes[cq_id(cq)]
        while n.parent is not None:
            n = n.parent
        return n.id

    def path(self, cq: str) -> list[str]:
        """Node ids from the root down to the ClusterQueue."""
        out = []
        n: _Node | None = self.nodes[cq_id(cq)]
        while n is not None:
            out.append(n.id)
            n = n.parent
        return out[::-1]

    def cluster_queues_under(self, node_id: str) -> list[str]:
        out: list[str] = []
        stack = [self.nodes[node_id]]
        while stack:
            n = stack.pop()
            if n.id.startswith("cq:"):
                out.append(n.name)
            stack.extend(n.children)
        return sorted(out)

    def nominal(self, cq: str, fr: FlavorResource) -> Fraction:
        q = self.nodes[cq_id(cq)].quotas.get(fr)
        return q.nominal if q else _ZERO

    def usage(self, cq: str, fr: FlavorResource) -> Fraction:
        return from_units(self.nodes[cq_id(cq)].usage.get(fr, 0))

    def usage_of(self, node_id: str) -> dict[FlavorResource, Fraction]:
        return {fr: from_units(v) for fr, v in self.nodes[node_id].usage.items()}

    def subtree_of(self, node_id: str) -> dict[FlavorResource, Fraction]:
        return {fr: from_units(v) for fr, v in self.nodes[node_id].subtree.items()}

    def available(self, cq: str, fr: FlavorResource) -> Fraction:
        return from_units(self._available(self.nodes[cq_id(cq)], fr))

    def _available(self, n: _Node, fr: FlavorResource) -> int:
        if n.parent is None:
            return n.subtree.get(fr, 0) - n.usage.get(fr, 0)
        parent_avail = self._available(n.parent, fr)
        # n.guaranteed(fr) and n.local_available(fr), inline
        ll = n.ll.get(fr)
        g = max(0, n.subtree.get(fr, 0) - ll) if ll is not None else 0
        u = n.usage.get(fr, 0)
        bl = n.bl.get(fr)
        if bl is not None:
            stored = n.subtree.get(fr, 0) - g
            used = max(0, u - g)
            parent_avail = min(stored - used + bl, parent_avail)
        return max(0, g - u) + parent_avail

    def potential_available(self, node_id: str, fr: FlavorResource) -> Fraction:
        """The most the node could get with no usage anywhere, within borrowing limits."""
        return from_units(self._potential(self.nodes[node_id], fr))

    def potential_units(self, node_id: str, fr: FlavorResource) -> int:
        return self._potential(self.nodes[node_id], fr)

    def _potential(self, n: _Node, fr: FlavorResource) -> int:
        k = (n.id, fr)
        got = self._potentials.get(k)
        if got is None:
            if n.parent is None:
                got = n.subtree.get(fr, 0)
            else:
                got = n.guaranteed(fr) + self._potential(n.parent, fr)
                bl = n.bl.get(fr)
                if bl is not None:
                    got = min(n.subtree.get(fr, 0) + bl, got)
            self._potentials[k] = got
        return got

    def lendable_units(self, node_id: str) -> dict[str, int]:
        """Per resource, the sum over the tree's flavors of what the node's parent could give it at
        most (``potential_available``; the denominator of the dominant resource share)."""
        got = self._lendable.get(node_id)
        if got is None:
            n = self.nodes[node_id]
            got = {}
            if n.parent is not None:
                root = n
                while root.parent is not None:
                    root = root.parent
                for fr in root.subtree:
                    got[fr[1]] = got.get(fr[1], 0) + self._potential(n.parent, fr)
            self._lendable[node_id] = got
        return got

    def is_borrowing(self, node_id: str, frs: Iterable[FlavorResource] | None = None) -> bool:
        n = self.nodes[node_id]
        keys = n.usage.keys() if frs is None else frs
        return any(n.usage.get(fr, 0) > n.subtree.get(fr, 0) for fr in keys)

    def fit(self, cq: str, request: Mapping[FlavorResource, Fraction]) -> QuotaFit:
        """Kueue's per-flavor fit: Fit (maybe borrowing), Preempt (only by evicting), NoFit."""
        return self.fit_units(cq, [(fr, to_units(request[fr])) for fr in sorted(request)])

    def fit_units(self, cq: str, request: Iterable[tuple[FlavorResource, int]]) -> QuotaFit:
        """:meth:`fit` of a request in units, as (flavor-resource, amount) sorted by flavor-resource."""
        n = self.nodes[cq_id(cq)]
        mode: FitMode = "Fit"
        borrows = False
        miss: tuple[str, str, int, int] | None = None
        for fr, val in request:
            if val <= 0:
                continue
            avail = self._available(n, fr)
            if val <= avail:
                if n.usage.get(fr, 0) + val > n.subtree.get(fr, 0):
                    borrows = True
                continue
            pot = self._potential(n, fr)
            if val <= pot:
                if mode == "Fit":
                    mode, miss = "Preempt", (fr[0], fr[1], val, max(avail, 0))
                if val > n.subtree.get(fr, 0):
                    borrows = True
            else:
                mode, miss = "NoFit", (fr[0], fr[1], val, pot)
                break
        if miss is None:  # fits: one of two values (frozen, so shared)
            return _FITS_BORROWING if borrows else _FITS
        return QuotaFit(mode, borrows, miss)

    # ---- updates -------------------------------------------------------------------------------
    def add_usage(self, cq: str, usage: Mapping[FlavorResource, Fraction]) -> None:
        n = self.nodes[cq_id(cq)]
        for fr, val in usage.items():
            if val:
                self._add(n, fr, to_units(val))

    def add_units(self, cq: str, usage: Mapping[FlavorResource, int]) -> None:
        """:meth:`add_usage` of amounts in units."""
        n = self.nodes[cq_id(cq)]
        for fr, val in usage.items():
            if val:
                self._add(n, fr, val)

    def _add(self, n: _Node, fr: FlavorResource, val: int) -> None:
        u = n.usage.get(fr, 0)
        ll = n.ll.get(fr)  # n.local_available(fr), inline
        local = max(0, (max(0, n.subtree.get(fr, 0) - ll) if ll is not None else 0) - u)
        n.usage[fr] = u + val
        if n.parent is not None and val > local:
            self._add(n.parent, fr, val - local)

    def remove_usage(self, cq: str, usage: Mapping[FlavorResource, Fraction]) -> None:
        n = self.nodes[cq_id(cq)]
        for fr, val in usage.items():
            if val:
                self._remove(n, fr, to_units(val))

    def remove_units(self, cq: str, usage: Mapping[FlavorResource, int]) -> None:
        """:meth:`remove_usage` of amounts in units."""
        n = self.nodes[cq_id(cq)]
        for fr, val in usage.items():
            if val:
                self._remove(n, fr, val)

    def _remove(self, n: _Node, fr: FlavorResource, val: int) -> None:
        u = n.usage.get(fr, 0)
        ll = n.ll.get(fr)  # n.guaranteed(fr), inline
        stored = u - (max(0, n.subtree.get(fr, 0) - ll) if ll is not None else 0)
        n.usage[fr] = u - val
        if stored > 0 and n.parent is not None:
            self._remove(n.parent, fr, min(val, stored))

    # ---- invariants ----------------------------------------------------------------------------
    def violations(self) -> list[str]:
        """Broken quota invariants (empty when all hold); for tests and the simulator's checks."""
        out: list[str] = []
        for n in self.nodes.values():
            for fr, u in n.usage.items():
                uf = from_units(u)
                if u < 0:
                    out.append(f"{n.id}: negative usage {uf} of {fr}")
                if n.id.startswith("cq:"):
                    bl = n.bl.get(fr) if n.parent is not None else 0
                    if bl is not None:
                        cap = n.subtree.get(fr, 0) + bl
                        if u > cap:
                            out.append(
                                f"{n.id}: usage {uf} of {fr} exceeds nominal + borrowingLimit {from_units(cap)}"
                            )
                if n.parent is None and u > n.subtree.get(fr, 0):
                    out.append(
                        f"{n.id}: usage {uf} of {fr} exceeds the quota of the tree {from_units(n.subtree.get(fr, 0))}"
                    )
        return out
