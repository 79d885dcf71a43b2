"""Kueue's dominant resource share (DRS), exact.

For a node (ClusterQueue or Cohort) with a parent:

* borrowed[r] = sum over flavors of ``max(0, usage + extra - subtree quota)`` for resource r;
* lendable[r] = sum over the flavors the tree knows of ``potential_available(parent, fr)``;
* DRS = max over r with lendable > 0 of ``borrowed[r] / lendable[r]``, divided by the node's
  fair-sharing weight. A node with weight 0 that borrows anything has an infinite share; a node
  that does not borrow has share 0. Lower shares are preferred for admission, higher shares are
  preempted first.

Kueue scales the ratio by 1000 and rounds; here it stays an exact fraction.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

from queueing.scheduling.quota import QuotaTree, _Node, cq_id, to_units
from queueing.scheduling.snapshot import AdmittedWorkload, ClusterQueueSpec, CohortSpec, FlavorResource

__all__ = [
    "DRS",
    "ZERO_SHARE",
    "ShareKey",
    "dominant_resource_share",
    "extra_units",
    "share_key",
    "share_units",
    "weighted_shares",
]

_ZERO = Fraction(0)
ShareKey = tuple[int, float, Fraction]
ZERO_SHARE: ShareKey = (0, 0.0, _ZERO)


@dataclass(frozen=True)
class DRS:
    weight: Fraction
    ratio: Fraction  # unweighted borrowed / lendable of the dominant resource
    borrowing: bool
    dominant: str = ""

    @property
    def infinite(self) -> bool:
        return self.borrowing and not self.weight

    def key(self) -> ShareKey:
        """Sort key: ``(1, ...)`` for infinite shares, else ``(0, ...)``, then the weighted share as a
        float (compared first, at C speed: correctly rounded division is monotone, so unequal floats
        order like the exact values) and exact (deciding between equal floats)."""
        k = self.__dict__.get("_key")
        if k is None:
            w = self.weight
            k = _key(self.ratio.numerator, self.ratio.denominator, w.numerator, w.denominator, self.borrowing)
            object.__setattr__(self, "_key", k)
        return k

    def value(self) -> float:
        """The weighted share as a float (``inf`` for weight 0 while borrowing)."""
        if self.infinite:
            return float("inf")
        return self.key()[1]


@functools.lru_cache(maxsize=1 << 12)
def _key(num: int, den: int, wnum: int, wden: int, borrowing: bool) -> ShareKey:
    """:meth:`DRS.key` of ``ratio = num / den`` and ``weight = wnum / wden``. Cached so that equal
    keys are mostly the same object: comparing them (the cycle's heap of heads) then stops at the
    identity check instead of comparing fractions. Bounded: a few thousand keys cover the heads
    of a cycle; an evicted key is only a new, equal object."""
    if borrowing and not wnum:  # infinite
        ratio = Fraction(num, den)
        return (1, float(ratio), ratio)
    if not num:
        return ZERO_SHARE
    v = Fraction(num * wden, den * wnum)
    return (0, float(v), v)


def _dominant(
    tree: QuotaTree, node: _Node, usage: Mapping[FlavorResource, int], ext: Mapping[FlavorResource, int]
) -> tuple[bool, int, int, str]:
    """(borrowing, borrowed, lendable, dominant resource) of the node with ``usage`` and ``ext``
    added (in units; ``borrowed / lendable`` is the unweighted ratio, ``0 / 1`` when none)."""
    if node.parent is None:
        return False, 0, 1, ""
    borrowed: dict[str, int] = {}
    for fr, quota in node.subtree.items():
        b = ext.get(fr, 0) + usage.get(fr, 0) - quota
        if b > 0:
            borrowed[fr[1]] = borrowed.get(fr[1], 0) + b
    for fr, v in ext.items():  # requests in flavor-resources the node has no quota for
        if fr not in node.subtree and v + usage.get(fr, 0) > 0:
            borrowed[fr[1]] = borrowed.get(fr[1], 0) + v + usage.get(fr, 0)
    if not borrowed:
        return False, 0, 1, ""
    lendable = tree.lendable_units(node.id)
    num, den, dominant = 0, 1, ""
    for r in sorted(borrowed):
        lr = lendable.get(r, 0)
        if lr > 0 and borrowed[r] * den > num * lr:  # borrowed/lendable above the best so far
            num, den, dominant = borrowed[r], lr, r
    return True, num, den, dominant


def extra_units(extra: Mapping[FlavorResource, Fraction] | None) -> dict[FlavorResource, int]:
    """A request to add to a node's usage, in units, as the share functions take it (zero amounts
    stay: a zero request of a flavor-resource the node has no quota for counts its usage there)."""
    return {fr: to_units(v) for fr, v in extra.items()} if extra else {}


def dominant_resource_share(
    tree: QuotaTree, node_id: str, extra: Mapping[FlavorResource, Fraction] | None = None
) -> DRS:
    node = tree.node(node_id)
    borrowing, num, den, dominant = _dominant(tree, node, node.usage, extra_units(extra))
    return DRS(node.weight, Fraction(num, den) if num else _ZERO, borrowing, dominant)


def share_units(
    tree: QuotaTree,
    node_id: str,
    usage: Mapping[FlavorResource, int] | None = None,
    extra: Mapping[FlavorResource, int] | None = None,
) -> tuple[bool, ShareKey]:
    """Whether the node borrows, and ``dominant_resource_share(...).key()``, with the node's usage
    replaced by ``usage`` and ``extra`` added (both in units), without building a :class:`DRS`."""
    node = tree.node(node_id)
    borrowing, num, den, _ = _dominant(tree, node, node.usage if usage is None else usage, extra or {})
    w = node.weight
    return borrowing, _key(num, den, w.numerator, w.denominator, borrowing)


def share_key(tree: QuotaTree, cq: str, extra: Mapping[FlavorResource, Fraction]) -> tuple[ShareKey, ...]:
    """The tournament key of admitting ``extra`` to ``cq``: the DRS of every node on the path from
    the root's children down to the ClusterQueue, each with the request added. Comparing keys
    lexicographically picks, at every cohort level, the child with the lowest share (Kueue's
    hierarchical fair-sharing tournament)."""
    node = tree.node(cq_id(cq))
    if node.parent is None:  # no cohort: nothing to share, like a member that does not borrow
        return (ZERO_SHARE,)
    ext = extra_units(extra)
    keys: list[ShareKey] = []  # from the ClusterQueue up to the root's child
    while node.parent is not None:
        keys.append(share_units(tree, node.id, None, ext)[1])
        node = node.parent
    return tuple(reversed(keys))


def weighted_shares(
    cluster_queues: Iterable[ClusterQueueSpec],
    cohorts: Iterable[CohortSpec],
    admitted: Iterable[AdmittedWorkload],
) -> dict[str, float]:
    """Every active ClusterQueue's weighted share (what Kueue reports as ``weightedShare``; here the
    plain ratio, ``inf`` for weight 0 while borrowing) given the admitted workloads' usage."""
    cqs = list(cluster_queues)
    tree = QuotaTree(cqs, cohorts)
    for a in admitted:
        if tree.has_cq(a.cluster_queue):
            tree.add_usage(a.cluster_queue, a.usage)
    return {
        cq.name: dominant_resource_share(tree, cq_id(cq.name)).value() for cq in cqs if tree.has_cq(cq.name)
    }
