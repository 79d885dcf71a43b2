"""The eviction planner: which admitted workloads to evict so that a pending one fits.

Kubernetes cannot preempt DRA devices, so the planner decides by **what an eviction frees**: every
candidate set is checked by releasing the victims' quota *and* their devices/node capacity in the
placer state and re-running the preemptor's gang placement. A plan is only returned when the
preemptor then fits (quota and placement); gangs are evicted whole (an admitted workload is one
unit).

Candidates (Kueue's policies, ``pkg/scheduler/preemption``), using a flavor-resource that needs
preemption:

* own ClusterQueue, by ``withinClusterQueue``: ``LowerPriority`` (priority below the preemptor's)
  or ``LowerOrNewerEqualPriority`` (also equal priority admitted... created later);
* other ClusterQueues of the same cohort tree, by ``reclaimWithinCohort`` (``LowerPriority`` or
  ``Any``), only where that queue, and every cohort between it and the lowest common ancestor with
  the preemptor's queue, uses more than its quota (checked again after every removal). Classical
  preemption sorts them into Kueue's variants: *hierarchical* when the preemptor's request fits the
  quota of its side of the tree below that ancestor (its own ClusterQueue's nominal quota, or a
  cohort's subtree quota above it: any priority the policy allows, also while the preemptor
  borrows); else *reclaim while borrowing* with ``borrowWithinCohort: LowerPriority`` for lower
  priority (at most ``maxPriorityThreshold``); else *reclaim without borrowing* (the preemptor must
  then fit without borrowing). Hierarchical candidates come first, then the others, then the own
  queue's; the preemptor may keep borrowing unless only reclaim-without-borrowing candidates could
  make room (Kueue's attempt order);
* with fair sharing, other ClusterQueues' candidates where those queues borrow, in Kueue's order
  (:func:`_fair_order`): the ClusterQueue with the highest share first; when the preemptor stays
  within its nominal quota they are reclaimed (``InCohortReclamation``), else the strategies decide
  (``LessThanOrEqualToFinalShare``: the preemptor's share with the workload admitted must not exceed
  the target's share after the eviction; ``LessThanInitialShare``, the second pass over the
  candidates the first skipped, with what it took still gone: below the target's share before it),
  the shares compared just below the two queues' lowest common ancestor.

Candidate order: workloads already being evicted, then Kueue's order above (within a group: other
ClusterQueues before the own, lower priority, more recently admitted, key). Classical preemption
keeps the set minimal in this order of preference: fewest victims (a single victim that suffices
wins; pairs are searched when the greedy set is larger), then the candidate order; after a greedy
pass victims that are not needed are put back (Kueue's fill-back). The fewest-victims preference is
a deliberate difference from Kueue (one gang that frees a node rather than many small ones spread
over several, see docs/migrating-from-kueue.md). With fair sharing the victims are the shortest
prefix of Kueue's order that makes room, then filled back, as in Kueue (no single-victim shortcut:
it would take from a queue the fair-sharing order does not reach).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

from queueing.scheduling.assign import Assigner, Assignment, Combo
from queueing.scheduling.config import SchedulingConfig
from queueing.scheduling.fairshare import ShareKey, extra_units, share_units
from queueing.scheduling.placer import Placer
from queueing.scheduling.quota import SCALE, QuotaTree, cq_id, to_units
from queueing.scheduling.snapshot import AdmittedWorkload, ClusterQueueSpec, FlavorResource, WorkloadInfo
from queueing.scheduling.verify import checked

__all__ = ["CohortState", "PlanMemo", "PreemptionPlan", "Victim", "plan_preemption"]

_ZERO = Fraction(0)
Reason = Literal[
    "InClusterQueue", "InCohortReclamation", "InCohortFairSharing", "InCohortReclaimWhileBorrowing"
]


@dataclass(frozen=True)
class Victim:
    key: str
    cluster_queue: str
    reason: Reason
    priority: int


@dataclass(frozen=True)
class PreemptionPlan:
    preemptor: str
    cluster_queue: str
    victims: tuple[Victim, ...]
    assignment: Assignment  # how the preemptor fits once the victims are gone
    # victims that were already being evicted (counted as gone; not part of ``victims``)
    waiting_for: tuple[str, ...] = ()

    @property
    def message(self) -> str:
        if not self.victims:
            return f"waiting for the eviction of {len(self.waiting_for)} workload(s) to finish"
        names = ", ".join(v.key for v in self.victims)
        return f"preempting {len(self.victims)} workload(s): {names}"


@dataclass
class _Ctx:
    wl: WorkloadInfo
    cq: ClusterQueueSpec
    counts: Mapping[str, int]
    combos: Sequence[Combo]
    tree: QuotaTree
    state: object
    assigner: Assigner
    placer: Placer[Any]
    expected: list[dict[FlavorResource, Fraction]]  # expected usage per combination
    expected_units: list[list[tuple[FlavorResource, int]]]  # the same in units (QuotaTree.fit_units)
    # the preemptor's charges when known without placing it (one combination, exact charges)
    known_charges: dict[FlavorResource, Fraction] | None = None
    # the flavor-resources that need preemption (Kueue's ``frsNeedPreemption``; every flavor-resource
    # the preemptor charges when quota is not what is short, e.g. when only the placement fails)
    need: frozenset[FlavorResource] = frozenset()
    # per other ClusterQueue: the cohorts strictly between it and its lowest common ancestor with the
    # preemptor's ClusterQueue (a candidate there is valid only while these exceed their quota too)
    between: dict[str, tuple[str, ...]] = field(default_factory=dict)
    checks: int = 0
    placed: bool = False  # a placement was tried (the answer then depends on the placer state)
    memo: dict[tuple[frozenset[str], bool], Assignment | None] = field(default_factory=dict)
    quota_memo: dict[tuple[frozenset[str], bool], bool] = field(default_factory=dict)
    # per candidate key: its usage in units when every amount is a whole number of units, else None
    _units: dict[str, dict[FlavorResource, int] | None] = field(default_factory=dict)

    def fits(self, removed: Sequence[AdmittedWorkload], allow_borrow: bool) -> Assignment | None:
        """Whether the preemptor fits with ``removed`` gone (quota first, then placement)."""
        memo_key = (frozenset(a.key for a in removed), allow_borrow)
        if memo_key in self.memo:
            return self.memo[memo_key]
        # quota known not to fit: no placement
        got = None if self.quota_memo.get(memo_key) is False else self._fits(removed, allow_borrow)
        self.memo[memo_key] = got
        return got

    def _fits(self, removed: Sequence[AdmittedWorkload], allow_borrow: bool) -> Assignment | None:
        self.checks += 1
        with self._without(removed):
            if not self.quota_may_fit(allow_borrow):
                return None
            self.placed = True
            state = self.state
            for a in removed:
                state = self.placer.remove(state, a.key)
            out = self.assigner.try_assign(
                self.cq, self.wl, self.counts, self.tree, state, only=self.combos, allow_borrow=allow_borrow
            )
            return out.assignment

    def quota_fits(self, removed: Sequence[AdmittedWorkload], allow_borrow: bool) -> bool:
        """The quota part of :meth:`fits` alone (a necessary condition; no placement)."""
        memo_key = (frozenset(a.key for a in removed), allow_borrow)
        if memo_key in self.memo:
            return self.memo[memo_key] is not None
        got = self.quota_memo.get(memo_key)
        if got is None:
            per_cq = self._units_out(removed)
            if per_cq is None:
                with self._without_exact(removed):
                    got = self.quota_may_fit(allow_borrow)
            else:  # what _without does, without a context manager (the hot path)
                tree = self.tree
                for name, units in per_cq.items():
                    tree.remove_units(name, units)
                try:
                    got = self.quota_may_fit(allow_borrow)
                finally:
                    for name, units in per_cq.items():
                        tree.add_units(name, units)
            self.quota_memo[memo_key] = got
        return got

    def units(self, a: AdmittedWorkload) -> dict[FlavorResource, int] | None:
        """``a``'s usage in units (zero amounts left out) if every amount is a whole number of units
        (then converting a sum equals summing the conversions), else None."""
        if a.key in self._units:
            return self._units[a.key]
        got: dict[FlavorResource, int] = {}
        for fr, v in a.usage.items():
            if not v:
                continue
            if isinstance(v, Fraction) and SCALE % v.denominator:
                self._units[a.key] = None
                return None
            got[fr] = to_units(v)
        self._units[a.key] = got
        return got

    def monotone(self, removed: Sequence[AdmittedWorkload]) -> bool:
        """Whether no amount of ``removed`` is negative. Then the quota check with ``removed`` gone
        fails for every subset of it too: taking out more only lowers every node's usage (removing
        non-negative amounts is additive and commutative in the tree) and what is available only
        grows as usage drops."""
        for a in removed:
            u = self.units(a)
            if u is not None:
                if any(v < 0 for v in u.values()):
                    return False
            elif any(v < 0 for v in a.usage.values()):
                return False
        return True

    @contextmanager
    def _without(self, removed: Sequence[AdmittedWorkload]) -> Iterator[None]:
        """The quota tree with ``removed``'s usage taken out, in place; restored on exit (removing a
        sum at once equals removing its parts one by one; add/remove are exact inverses)."""
        tree = self.tree
        per_cq = self._units_out(removed)
        if per_cq is None:  # amounts below a unit: sum exactly, then convert (QuotaTree.remove_usage)
            with self._without_exact(removed):
                yield
            return
        for name, units in per_cq.items():
            tree.remove_units(name, units)
        try:
            yield
        finally:
            for name, units in per_cq.items():
                tree.add_units(name, units)

    def _units_out(self, removed: Sequence[AdmittedWorkload]) -> dict[str, dict[FlavorResource, int]] | None:
        """What :meth:`_without` takes out of each ClusterQueue, in units, when every amount of
        ``removed`` is a whole number of units; else None."""
        per_cq: dict[str, dict[FlavorResource, int]] = {}
        for a in removed:
            u = self.units(a)
            if u is None:
                return None
            acc = per_cq.get(a.cluster_queue)
            if acc is None:
                per_cq[a.cluster_queue] = dict(u)
            else:
                for fr, v in u.items():
                    acc[fr] = acc.get(fr, 0) + v
        return per_cq

    def cq_usage_without(self, name: str, removed: Sequence[AdmittedWorkload]) -> dict[FlavorResource, int]:
        """The usage of ClusterQueue ``name``'s node as :meth:`_without` leaves it (a node's own usage
        drops by exactly what is taken out of it), without touching the tree when ``removed``'s
        amounts in that ClusterQueue are whole units."""
        node = self.tree.node(cq_id(name))
        taken: dict[FlavorResource, int] = {}
        for a in removed:
            if a.cluster_queue != name:
                continue
            u = self.units(a)
            if u is None:
                with self._without(removed):
                    return dict(node.usage)
            for fr, v in u.items():
                taken[fr] = taken.get(fr, 0) + v
        usage = dict(node.usage)
        for fr, v in taken.items():
            if v:
                usage[fr] = usage.get(fr, 0) - v
        return usage

    @contextmanager
    def _without_exact(self, removed: Sequence[AdmittedWorkload]) -> Iterator[None]:
        """:meth:`_without` summing exact amounts (for usage that is not whole units)."""
        tree = self.tree
        per_cq: dict[str, dict[FlavorResource, Fraction]] = {}
        for a in removed:
            acc = per_cq.setdefault(a.cluster_queue, {})
            for fr, v in a.usage.items():
                acc[fr] = acc.get(fr, _ZERO) + v
        for name, u in per_cq.items():
            tree.remove_usage(name, u)
        try:
            yield
        finally:
            for name, u in per_cq.items():
                tree.add_usage(name, u)

    def quota_may_fit(self, allow_borrow: bool) -> bool:
        for units in self.expected_units:
            fit = self.tree.fit_units(self.cq.name, units)
            if fit.mode == "Fit" and (allow_borrow or not fit.borrows):
                return True
        return False


def _order(cq: str) -> Callable[[AdmittedWorkload], tuple[int, int, int, float, str]]:
    def key(a: AdmittedWorkload) -> tuple[int, int, int, float, str]:
        return (
            0 if a.evicting else 1,
            0 if a.cluster_queue != cq else 1,
            a.workload.priority,
            -a.admission_time,
            a.key,
        )

    return key


def _resources(wl: WorkloadInfo) -> set[str]:
    out: set[str] = set()
    for ps in wl.pod_sets:
        out.update(r for r, v in ps.requests.items() if v)
        out.update(r for r, v in ps.device_requests.items() if v)
    return out


def _over_quota(
    node_usage: Mapping[FlavorResource, int],
    subtree: Mapping[FlavorResource, int],
    need: frozenset[FlavorResource],
) -> bool:
    """Whether a node uses more than its quota in one of ``need`` (not Kueue's ``IsWithinNominalInResources``)."""
    return any(node_usage.get(fr, 0) > subtree.get(fr, 0) for fr in need)


def _borrowing_after(ctx: _Ctx, removed: Sequence[AdmittedWorkload], cq: str) -> bool:
    """Whether ClusterQueue ``cq`` still uses more than its nominal quota in a flavor-resource that
    needs preemption once ``removed`` are gone."""
    node = ctx.tree.node(cq_id(cq))
    usage = ctx.cq_usage_without(cq, removed) if removed else node.usage
    return _over_quota(usage, node.subtree, ctx.need)


@dataclass(frozen=True)
class CohortState:
    """What a plan reads of a cohort tree, as a number: the usage of every node of the tree and the
    candidates (``PlanMemo.state``). Equal ids mean equal contents (within one :class:`PlanMemo`)."""

    id: int
    keys: frozenset[str]  # the candidates' keys
    # the sequence of candidates the state was taken of, and :func:`_candidates` of it (built once)
    source: Sequence[AdmittedWorkload] | None = field(default=None, compare=False, repr=False)
    _prepared: tuple[_Cand, ...] | None = field(default=None, compare=False, repr=False)

    def prepared(self, admitted: Sequence[AdmittedWorkload]) -> tuple[_Cand, ...] | None:
        """``_candidates(admitted)`` when ``admitted`` is the very sequence the state was taken of
        (built once per state), else None."""
        if admitted is not self.source:
            return None
        got = self._prepared
        if got is None:
            got = _candidates(admitted)
            object.__setattr__(self, "_prepared", got)
        return got


# what the candidate filter of a plan reads of a candidate: the candidate, its ClusterQueue, key, the
# resources it uses a non-zero amount of (None when its usage is empty), evicting, priority, the
# flavor-resources it uses a non-zero amount of
_Cand = tuple[AdmittedWorkload, str, str, frozenset[str] | None, bool, int, frozenset[FlavorResource]]


def _candidates(admitted: Sequence[AdmittedWorkload]) -> tuple[_Cand, ...]:
    out: list[_Cand] = []
    for a in admitted:
        frs = frozenset(fr for fr, v in a.usage.items() if v)
        used = frozenset(r for _, r in frs) if a.usage else None
        out.append((a, a.cluster_queue, a.key, used, a.evicting, a.workload.priority, frs))
    return tuple(out)


# what a plan reads of a candidate
_Fingerprint = tuple[str, str, bool, float, int, float, tuple[tuple[FlavorResource, Fraction], ...]]


class PlanMemo:
    """Preemption questions that had no answer, kept to answer them again without work (between
    cycles too: a cache, the result is the same without it).

    Without a placement (most plans are rejected by quota) a plan depends only on the preemptor's
    ClusterQueue and what it asks (fit signature, pod counts, flavor combinations, priority, its
    order time where the policy compares it), on the cohort tree's usage and candidates
    (:class:`CohortState`), and on what is fixed while the memo is bound (:meth:`bind`: the queue
    and cohort objects, the flavors, the configuration, the placer). A question is remembered only
    when it failed without any placement tried; a plan that tried one also depends on the placer
    state and is never remembered. Every part is bounded: past its limit a part is emptied (ids
    are never reused, so a forgotten id only stops matching)."""

    def __init__(self, limit: int = 1 << 14) -> None:
        self.limit = limit
        self.failed: set[Hashable] = set()
        self._bound: tuple[object, ...] = ()
        self._next = 0
        # candidate object (held, so its id is not reused) -> id of its fingerprint
        self._by_obj: dict[int, tuple[AdmittedWorkload, int]] = {}
        self._prints: dict[_Fingerprint, int] = {}
        self._states: dict[tuple[str, tuple[object, ...], tuple[int, ...]], int] = {}
        # per state id: ClusterQueue -> (borrowing, share key) with the tree's usage as it is
        self._shares: dict[int, dict[str, tuple[bool, ShareKey]]] = {}

    def bind(self, *fixed: object) -> None:
        """Forget everything unless ``fixed`` are the same (or equal) values as at the last call."""
        if len(fixed) != len(self._bound) or any(
            a is not b and a != b for a, b in zip(fixed, self._bound, strict=True)
        ):
            self.failed.clear()
            self._shares.clear()
            self._by_obj.clear()
            self._prints.clear()
            self._states.clear()
            self._bound = fixed

    def _id(self, table: dict[Any, int], content: Hashable) -> int:
        got = table.get(content)
        if got is None:
            if len(table) >= self.limit:
                table.clear()
            self._next += 1
            got = table[content] = self._next
        return got

    def _print(self, a: AdmittedWorkload) -> int:
        got = self._by_obj.get(id(a))
        if got is not None and got[0] is a:
            return got[1]
        fp: _Fingerprint = (
            a.key,
            a.cluster_queue,
            a.evicting,
            a.admission_time,
            a.workload.priority,
            a.workload.order_time,
            tuple(a.usage.items()),
        )
        n = self._id(self._prints, fp)
        if len(self._by_obj) >= self.limit:
            self._by_obj.clear()
        self._by_obj[id(a)] = (a, n)
        return n

    def state(self, tree: QuotaTree, root: str, admitted: Sequence[AdmittedWorkload]) -> CohortState:
        """The state of the cohort tree with root node ``root`` and candidates ``admitted`` (as
        :func:`plan_preemption` takes them) at this moment; the tree must not change while it is
        used."""
        usage: list[object] = []
        stack = [tree.node(root)]
        while stack:
            n = stack.pop()
            usage.append(n.id)
            usage.append(tuple(n.usage.items()))
            stack.extend(n.children)
        pool = tuple(self._print(a) for a in admitted)
        sid = self._id(self._states, (root, tuple(usage), pool))
        return CohortState(sid, frozenset(a.key for a in admitted), admitted)

    def shares(self, state: CohortState) -> dict[str, tuple[bool, ShareKey]]:
        """The ClusterQueues' shares in the cohort tree in ``state`` (filled by the plans)."""
        got = self._shares.get(state.id)
        if got is None:
            if len(self._shares) >= self.limit:
                self._shares.clear()
            got = self._shares[state.id] = {}
        return got

    def key(
        self,
        state: CohortState,
        wl: WorkloadInfo,
        cq: ClusterQueueSpec,
        counts: Mapping[str, int],
        combos: Sequence[Combo],
    ) -> Hashable:
        """The question ``plan_preemption`` answers, as far as a failed plan without a placement
        depends on it."""
        newer = cq.preemption.within_cluster_queue == "LowerOrNewerEqualPriority"
        return (
            state.id,
            cq.name,
            wl.fit_signature,
            tuple(ps.devices_exact for ps in wl.pod_sets),
            wl.priority,
            wl.order_time if newer else None,
            tuple(counts.items()),
            tuple(combos),
        )

    def remember(self, key: Hashable) -> None:
        if len(self.failed) >= self.limit * 4:
            self.failed.clear()
        self.failed.add(key)


def plan_preemption(
    wl: WorkloadInfo,
    cq: ClusterQueueSpec,
    counts: Mapping[str, int],
    combos: Sequence[Combo],
    tree: QuotaTree,
    state: object,
    admitted: Sequence[AdmittedWorkload],
    assigner: Assigner,
    placer: Placer[Any],
    config: SchedulingConfig,
    cq_specs: Mapping[str, ClusterQueueSpec],
    *,
    memo: PlanMemo | None = None,
    cohort: CohortState | None = None,
) -> PreemptionPlan | None:
    """A plan to evict a minimal set of admitted workloads so that ``wl`` fits, or None.

    With ``memo`` (bound to the objects this call uses, see :class:`PlanMemo`) and ``cohort``
    (``memo.state(tree, <root of cq>, admitted)`` of this very tree and ``admitted``) a question
    that failed before without a placement is answered at once.

    With ``config.verify`` every answer the memo (a remembered failure, the shares it keeps, the
    cohort state's prepared candidates) gave is checked against the plan made without it."""

    def general() -> PreemptionPlan | None:
        return _plan_preemption(wl, cq, counts, combos, tree, state, admitted, assigner, placer, config)[0]

    where = f"preemptor {wl.key}, ClusterQueue {cq.name}"
    key: Hashable = None
    if memo is not None and cohort is not None and wl.key not in cohort.keys:
        key = memo.key(cohort, wl, cq, counts, combos)
        if key in memo.failed:
            if config.verify:
                checked("PlanMemo (a remembered failure)", None, general, where)
            return None
    shared = memo.shares(cohort) if memo is not None and cohort is not None else None
    prepared = cohort.prepared(admitted) if cohort is not None else None
    plan, ctx = _plan_preemption(
        wl, cq, counts, combos, tree, state, admitted, assigner, placer, config, shared, prepared
    )
    if config.verify and (shared is not None or prepared is not None):
        checked("PlanMemo (shares, prepared candidates)", plan, general, where)
    if plan is None and memo is not None and key is not None and (ctx is None or not ctx.placed):
        memo.remember(key)
    return plan


def _plan_preemption(
    wl: WorkloadInfo,
    cq: ClusterQueueSpec,
    counts: Mapping[str, int],
    combos: Sequence[Combo],
    tree: QuotaTree,
    state: object,
    admitted: Sequence[AdmittedWorkload],
    assigner: Assigner,
    placer: Placer[Any],
    config: SchedulingConfig,
    shared: dict[str, tuple[bool, ShareKey]] | None = None,
    prepared: tuple[_Cand, ...] | None = None,
) -> tuple[PreemptionPlan | None, _Ctx | None]:
    """``shared``: the ClusterQueues' shares with the tree's usage as it is (``PlanMemo.shares``);
    ``prepared``: ``_candidates(admitted)``."""
    pol = cq.preemption
    if (
        pol.within_cluster_queue == "Never"
        and pol.reclaim_within_cohort == "Never"
        and pol.borrow_within_cohort == "Never"
        and not any(a.evicting for a in admitted)
    ):
        return None, None
    expected = [assigner.expected_usage(cq, wl, counts, c) for c in combos]
    known = expected[0] if len(expected) == 1 and assigner.charges_known(cq, wl) else None
    units = [assigner.expected_units(cq, wl, counts, c) for c in combos]
    ctx = _Ctx(wl, cq, counts, combos, tree, state, assigner, placer, expected, units, known)
    ctx.need = _need_preemption(ctx)
    need = ctx.need
    names = _resources(wl)
    root = tree.root_of(cq.name)
    own: list[AdmittedWorkload] = []
    others: list[AdmittedWorkload] = []
    evicting: list[AdmittedWorkload] = []
    in_tree: dict[str, bool] = {}  # ClusterQueue -> in the preemptor's cohort tree
    others_cqs: set[str] = set()  # the ClusterQueues of ``others``
    wl_key = wl.key
    for a, q, k, used, evict, p, frs in _candidates(admitted) if prepared is None else prepared:
        ok = in_tree.get(q)
        if ok is None:
            ok = in_tree[q] = tree.has_cq(q) and tree.root_of(q) == root
        if not ok or k == wl_key:
            continue
        # only candidates that use a resource the preemptor requests (or nothing)
        if used is not None and used.isdisjoint(names):
            continue
        if evict:
            evicting.append(a)
            continue
        # Kueue's WorkloadUsesResources: a flavor-resource that needs preemption
        if used is not None and frs.isdisjoint(need):
            continue
        if q == cq.name:
            w = pol.within_cluster_queue
            if (w == "LowerPriority" and p < wl.priority) or (
                w == "LowerOrNewerEqualPriority"
                and (p < wl.priority or (p == wl.priority and a.workload.order_time > wl.order_time))
            ):
                own.append(a)
        elif pol.reclaim_within_cohort == "Any" or (
            pol.reclaim_within_cohort == "LowerPriority" and p < wl.priority
        ):
            others.append(a)
            others_cqs.add(q)

    # workloads already being evicted count as gone
    if evicting:
        got = ctx.fits(evicting, allow_borrow=True)
        if got is not None:
            return PreemptionPlan(wl.key, cq.name, (), got, tuple(a.key for a in evicting)), ctx

    key = _order(cq.name)
    own.sort(key=key)
    fair = config.fair_sharing.enable and cq.cohort is not None
    if fair:
        # Kueue's fair sharing: other ClusterQueues' candidates where those queues borrow
        # (asked once per ClusterQueue: nothing is removed, so the answer depends on the queue only)
        borrowing = {q for q in others_cqs if _borrowing_after(ctx, (), q)}
        fair_others = [a for a in others if a.cluster_queue in borrowing] if borrowing else []
        if not own and not fair_others:
            return None, ctx  # nothing to search (most failed plans end here)
        if others:
            _link_others(ctx, others)
        if own or fair_others:
            shares = _Shares(ctx, evicting, own, fair_others, shared)
            found = _fair_search(
                ctx, shares, evicting, own, fair_others, config.fair_sharing.preemption_strategies
            )
            if found is not None:
                return _plan(ctx, evicting, *found), ctx
        if own:
            victims = _search(ctx, evicting, own, True, config.max_preemption_pairs)
            if victims is not None:
                return _plan(ctx, evicting, victims, {}), ctx
        return None, ctx
    if others:
        _link_others(ctx, others)
    return _classical(ctx, evicting, own, others, key, config.max_preemption_pairs), ctx


# Kueue's preemption variants of a candidate in another ClusterQueue (classical preemption)
_HIERARCHICAL = "HierarchicalReclaim"  # the preemptor is closer to the quota the candidate uses
_WITHOUT_BORROWING = "ReclaimWithoutBorrowing"  # only if the preemptor then does not borrow
_WHILE_BORROWING = "ReclaimWhileBorrowing"  # also while the preemptor borrows
_VARIANT_REASON: dict[str, Reason] = {
    _HIERARCHICAL: "InCohortReclamation",
    _WITHOUT_BORROWING: "InCohortReclamation",
    _WHILE_BORROWING: "InCohortReclaimWhileBorrowing",
}


def _need_preemption(ctx: _Ctx) -> frozenset[FlavorResource]:
    """The flavor-resources of the preemptor's request that do not fit what is available now (the
    ones Kueue's flavor assigner marks ``Preempt``), over every flavor combination tried; when quota
    is not what is short (only the placement fails) every flavor-resource it charges."""
    tree, name = ctx.tree, ctx.cq.name
    short: set[FlavorResource] = set()
    charged: set[FlavorResource] = set()
    for units in ctx.expected_units:
        for fr, v in units:
            if v <= 0:
                continue
            charged.add(fr)
            if v > to_units(tree.available(name, fr)):
                short.add(fr)
    return frozenset(short or charged)


def _fits_in_quota(
    node: Any, request: Mapping[FlavorResource, int]
) -> tuple[bool, dict[FlavorResource, int]]:
    """Kueue's ``QuantitiesFitInQuota``: whether ``request`` fits the node's own subtree quota on top
    of its usage, and what is left of it for the parent after the node's unused guaranteed quota."""
    fits = True
    rest: dict[FlavorResource, int] = {}
    for fr, v in request.items():
        if node.subtree.get(fr, 0) < node.usage.get(fr, 0) + v:
            fits = False
        rest[fr] = max(0, v - node.local_available(fr))
    return fits, rest


def _link_others(ctx: _Ctx, others: Sequence[AdmittedWorkload]) -> None:
    """Fill ``ctx.between`` for the ClusterQueues of ``others``."""
    tree = ctx.tree
    mine = tree.path(ctx.cq.name)
    on_path = set(mine)
    for q in {a.cluster_queue for a in others}:
        if q in ctx.between:
            continue
        path = tree.path(q)  # root .. q
        i = len(path) - 2
        while i >= 0 and path[i] not in on_path:
            i -= 1
        ctx.between[q] = tuple(path[i + 1 : -1])


def _lca(ctx: _Ctx, q: str) -> str:
    """The lowest common ancestor (a cohort id) of ClusterQueue ``q`` and the preemptor's queue."""
    path = ctx.tree.path(q)
    between = ctx.between.get(q, ())
    return path[len(path) - 2 - len(between)]


def _advantage(ctx: _Ctx) -> dict[str, bool]:
    """Per cohort on the preemptor's path: whether the preemptor has Kueue's hierarchical advantage
    over candidates whose lowest common ancestor with it is that cohort (its request fits the quota
    of the subtree below, the preemptor's own ClusterQueue included)."""
    tree = ctx.tree
    node = tree.node(cq_id(ctx.cq.name))
    request: dict[FlavorResource, int] = {}
    for fr, v in ctx.expected_units[0] if ctx.expected_units else ():
        request[fr] = request.get(fr, 0) + v
    fits, rest = _fits_in_quota(node, request)
    out: dict[str, bool] = {}
    n = node.parent
    while n is not None:
        out[n.id] = fits
        f, rest = _fits_in_quota(n, rest)
        fits = fits or f
        n = n.parent
    return out


def _classical(
    ctx: _Ctx,
    evicting: Sequence[AdmittedWorkload],
    own: Sequence[AdmittedWorkload],
    others: Sequence[AdmittedWorkload],
    key: Callable[[AdmittedWorkload], Any],
    max_pairs: int,
) -> PreemptionPlan | None:
    """Kueue's classical preemption (``classicalPreemptions``): candidates of other ClusterQueues
    only where those queues (and the cohorts up to the common ancestor) exceed their quota;
    hierarchical candidates first, then priority candidates, then the own queue's; the preemptor may
    keep borrowing unless a candidate may only be taken if it does not."""
    pol = ctx.cq.preemption
    forbidden = pol.borrow_within_cohort == "Never"
    thr = pol.max_priority_threshold
    prio = ctx.wl.priority
    adv = _advantage(ctx) if others else {}
    variant: dict[str, str] = {}
    hier: list[AdmittedWorkload] = []
    by_prio: list[AdmittedWorkload] = []
    for a in others:
        if not _removable(ctx, (), a):  # not exceeding its quota: never a candidate (Kueue)
            continue
        p = a.workload.priority
        if adv.get(_lca(ctx, a.cluster_queue), False):
            variant[a.key] = _HIERARCHICAL
            hier.append(a)
            continue
        above = p >= prio or (thr is not None and p > thr)
        variant[a.key] = _WITHOUT_BORROWING if forbidden or above else _WHILE_BORROWING
        by_prio.append(a)
    hier.sort(key=key)
    by_prio.sort(key=key)
    if (not hier and not by_prio) or (forbidden and not _under_nominal(ctx)):
        attempts = [True]
    elif forbidden and not hier:
        attempts = [False, True]
    else:
        attempts = [True, False]
    reasons: dict[str, Reason] = {k: _VARIANT_REASON[v] for k, v in variant.items()}
    for borrow in attempts:
        pool = [a for a in by_prio if not borrow or variant[a.key] != _WITHOUT_BORROWING]
        cands = [*hier, *pool, *own]
        victims = _search(ctx, evicting, cands, borrow, max_pairs)
        if victims is not None:
            return _plan(ctx, evicting, victims, reasons)
    return None


def _under_nominal(ctx: _Ctx) -> bool:
    """Kueue's ``queueUnderNominalInResourcesNeedingPreemption``: the preemptor's queue uses less than
    its nominal quota in every flavor-resource that needs preemption."""
    node = ctx.tree.node(cq_id(ctx.cq.name))
    return all(node.usage.get(fr, 0) < node.subtree.get(fr, 0) for fr in ctx.need)


def set_union(a: Sequence[AdmittedWorkload], b: Sequence[AdmittedWorkload]) -> list[AdmittedWorkload]:
    seen: dict[str, AdmittedWorkload] = {x.key: x for x in a}
    for x in b:
        seen.setdefault(x.key, x)
    return list(seen.values())


def _plan(
    ctx: _Ctx,
    evicting: Sequence[AdmittedWorkload],
    victims: Sequence[AdmittedWorkload],
    reasons: Mapping[str, Reason],
) -> PreemptionPlan | None:
    """The plan evicting ``victims``; ``reasons``: the reason of each victim in another ClusterQueue
    (own-queue victims are ``InClusterQueue``)."""
    got = ctx.fits([*evicting, *victims], allow_borrow=True)
    if got is None:
        return None
    out = tuple(
        Victim(
            v.key,
            v.cluster_queue,
            "InClusterQueue" if v.cluster_queue == ctx.cq.name else reasons[v.key],
            v.workload.priority,
        )
        for v in victims
    )
    return PreemptionPlan(ctx.wl.key, ctx.cq.name, out, got, tuple(a.key for a in evicting))


def _removable(ctx: _Ctx, removed: Sequence[AdmittedWorkload], a: AdmittedWorkload) -> bool:
    """Kueue's ``candidateIsValid``: an own-queue candidate always is; another ClusterQueue's only
    while that queue, and every cohort between it and the lowest common ancestor with the preemptor's
    queue, still uses more than its quota in a flavor-resource that needs preemption."""
    if a.cluster_queue == ctx.cq.name:
        return True
    if not _borrowing_after(ctx, removed, a.cluster_queue):
        return False
    between = ctx.between.get(a.cluster_queue)
    if not between:
        return True
    with ctx._without(removed):
        tree = ctx.tree
        return all(_over_quota(tree.node(n).usage, tree.node(n).subtree, ctx.need) for n in between)


def _quota_may_pass(
    ctx: _Ctx, base: Sequence[AdmittedWorkload], cands: Sequence[AdmittedWorkload], allow_borrow: bool
) -> bool:
    """Whether quota lets a single victim of :func:`_search` or the longest prefix of its greedy
    order pass (the greedy's order depends on ``_removable`` alone, not on the checks' answers)."""
    for c in cands:
        if _removable(ctx, base, c) and ctx.quota_fits([*base, c], allow_borrow):
            return True
    removed: list[AdmittedWorkload] = []
    for c in cands:
        if _removable(ctx, [*base, *removed], c):
            removed.append(c)
    return bool(removed) and ctx.quota_fits([*base, *removed], allow_borrow)


def _search(
    ctx: _Ctx,
    base: Sequence[AdmittedWorkload],
    cands: Sequence[AdmittedWorkload],
    allow_borrow: bool,
    max_pairs: int,
) -> list[AdmittedWorkload] | None:
    if not cands:
        return None
    # every check below starts with quota: when quota lets none of the sets tried below pass, the
    # answer is None without placing anything (quota is monotone in what is taken out, so the
    # greedy's prefixes fail when its longest one does)
    if ctx.monotone([*base, *cands]) and not _quota_may_pass(ctx, base, cands, allow_borrow):
        return None
    # cheap necessary condition: with every candidate gone it must fit
    if ctx.fits([*base, *cands], allow_borrow) is None:
        return None
    # a single victim, best first
    for c in cands:
        if _removable(ctx, base, c) and ctx.fits([*base, c], allow_borrow) is not None:
            return [c]
    # greedy in candidate order, then put back what is not needed
    removed: list[AdmittedWorkload] = []
    fitted = False
    for c in cands:
        if not _removable(ctx, [*base, *removed], c):
            continue
        removed.append(c)
        if ctx.fits([*base, *removed], allow_borrow) is not None:
            fitted = True
            break
    if not fitted:
        return None
    for c in list(reversed(removed[:-1])):
        trial = [x for x in removed if x.key != c.key]
        if ctx.fits([*base, *trial], allow_borrow) is not None:
            removed = trial
    if len(removed) > 2:
        budget = max_pairs
        for i in range(len(cands)):
            for j in range(i + 1, len(cands)):
                if budget <= 0:
                    return removed
                budget -= 1
                pair = [cands[i], cands[j]]
                if not _removable(ctx, base, cands[i]) or not _removable(ctx, [*base, cands[i]], cands[j]):
                    continue
                if ctx.fits([*base, *pair], allow_borrow) is not None:
                    return pair
    return removed


class _Shares:
    """ClusterQueue shares (DRS keys) with ``base`` gone and the candidates of a ClusterQueue taken
    out in candidate order, shared by the strategies of one plan.

    A ClusterQueue's share depends only on its own usage (its quota and what its parent could lend
    it are fixed), so taking workloads out of one ClusterQueue changes no other's share: the shares
    are computed on copies of the ClusterQueues' usage, taking each workload out as
    ``QuotaTree.remove_usage`` takes it out of its ClusterQueue, without touching the tree."""

    def __init__(
        self,
        ctx: _Ctx,
        base: Sequence[AdmittedWorkload],
        own: Sequence[AdmittedWorkload],
        others: Sequence[AdmittedWorkload],
        shared: dict[str, tuple[bool, ShareKey]] | None = None,
    ):
        """``own``: the own candidates in candidate order; ``others``: the other candidates;
        ``shared``: shares with the tree's usage as it is, to use and fill (``PlanMemo.shares``)."""
        self.ctx = ctx
        # with nothing taken out, a share is the share of the tree as it is
        self._shared = shared if not base else None
        self.base = base
        self.own = own
        self.others = others
        # per ClusterQueue: its usage with ``base`` gone and then its first k candidates, k = 0, 1, ...
        self._usage: dict[str, list[dict[FlavorResource, int]]] = {}
        self._shares: dict[tuple[str, int], tuple[bool, ShareKey]] = {}
        self._floor: ShareKey | None = None

    @functools.cached_property
    def by_cq(self) -> dict[str, list[AdmittedWorkload]]:
        """The candidates per ClusterQueue, in candidate order."""
        out: dict[str, list[AdmittedWorkload]] = {}
        for a in self.others:
            out.setdefault(a.cluster_queue, []).append(a)
        key = _order(self.ctx.cq.name)
        for lst in out.values():
            lst.sort(key=key)
        if self.own:
            out[self.ctx.cq.name] = list(self.own)
        return out

    def usage(self, name: str, k: int) -> dict[FlavorResource, int]:
        """The usage of ClusterQueue ``name`` with ``base`` and its first ``k`` candidates gone."""
        got = self._usage.get(name)
        if got is None:
            got = self._usage[name] = [self.ctx.cq_usage_without(name, self.base)]
        while len(got) <= k:
            got.append(_minus(got[-1], self.by_cq[name][len(got) - 1]))
        return got[k]

    def share(self, name: str, k: int = 0) -> tuple[bool, ShareKey]:
        """(borrowing, share key) of ClusterQueue ``name`` with ``base`` and its first ``k``
        candidates gone."""
        got = self._shares.get((name, k))
        if got is None:
            shared = self._shared if k == 0 else None
            if shared is not None:
                got = shared.get(name)
            if got is None:
                got = share_units(self.ctx.tree, cq_id(name), self.usage(name, k))
                if shared is not None:
                    shared[name] = got
            self._shares[(name, k)] = got
        return got

    def floor(self) -> ShareKey:
        """The preemptor's lowest possible share: every own candidate gone (taken out at once, as
        the placement checks do), the expected charges of the preemptor added."""
        if self._floor is None:
            ctx = self.ctx
            req0 = extra_units(ctx.expected[0] if ctx.expected else {})
            usage = ctx.cq_usage_without(ctx.cq.name, [*self.base, *self.own])
            self._floor = share_units(ctx.tree, cq_id(ctx.cq.name), usage, req0)[1]
        return self._floor


def _minus(usage: Mapping[FlavorResource, int], a: AdmittedWorkload) -> dict[FlavorResource, int]:
    """``usage`` of ``a``'s ClusterQueue with ``a`` taken out (what ``QuotaTree.remove_usage``
    leaves at the ClusterQueue's node)."""
    out = dict(usage)
    for fr, v in a.usage.items():
        if v:
            out[fr] = out.get(fr, 0) - to_units(v)
    return out


def _allows(strategy: str, mine: ShareKey, before: ShareKey, after: ShareKey) -> bool:
    """Whether the fair-sharing strategy allows taking a workload from a ClusterQueue whose share
    goes from ``before`` to ``after``, given the preemptor's share ``mine``."""
    if strategy == "LessThanOrEqualToFinalShare":
        return mine <= after
    return mine < before


def _within_nominal(
    ctx: _Ctx, usage: Mapping[FlavorResource, int], req: Mapping[FlavorResource, int]
) -> bool:
    """Kueue's ``FairSharingPreemptWithinNominal``: with its request added the preemptor's queue stays
    within its nominal quota in every flavor-resource that needs preemption."""
    subtree = ctx.tree.node(cq_id(ctx.cq.name)).subtree
    return all(usage.get(fr, 0) + req.get(fr, 0) <= subtree.get(fr, 0) for fr in ctx.need)


def _fair_order(
    shares: _Shares,
    own: Sequence[AdmittedWorkload],
    others: Sequence[AdmittedWorkload],
    req: Mapping[FlavorResource, int],
    strategies: Sequence[str],
) -> tuple[list[AdmittedWorkload], dict[str, Reason]]:
    """From quota alone (no placement), Kueue's fair-sharing order of victims: the order in which
    Kueue takes them (``runFirstFsStrategy`` then, with what it took still gone,
    ``runSecondFsStrategy`` over the candidates the first skipped) and each victim's reason.

    The first pass repeatedly picks the ClusterQueue with the highest share (the preemptor's own with
    its request added; equal shares by the candidate order of their first candidates; a queue that
    does not borrow, other than the preemptor's, or has no candidates left drops out): from the own
    queue its next candidate; from another queue, when the preemptor stays within its nominal quota,
    its next candidate (``InCohortReclamation``), else the first candidate the strategy allows
    (``InCohortFairSharing``), the ones before it kept for the second pass. The second pass (only
    ``LessThanInitialShare``) takes, per ClusterQueue in the same order, its first skipped candidate
    if the preemptor's share is below the queue's, then drops the queue."""
    ctx = shares.ctx
    mine = ctx.cq.name
    tree = ctx.tree
    order = _order(mine)
    usage: dict[str, dict[FlavorResource, int]] = {}

    def cur(name: str) -> dict[FlavorResource, int]:
        got = usage.get(name)
        if got is None:
            got = usage[name] = dict(shares.usage(name, 0))
        return got

    def share(name: str, u: Mapping[FlavorResource, int] | None = None) -> tuple[bool, ShareKey]:
        return share_units(tree, cq_id(name), cur(name) if u is None else u, req if name == mine else None)

    mine_path = tree.path(mine)
    base = shares.base
    seq: list[AdmittedWorkload] = []  # the victims in the order Kueue takes them

    def almost_lca(target: str) -> tuple[str, str]:
        """The children of the lowest common ancestor of ``mine`` and ``target`` on their paths."""
        path = tree.path(target)
        i = 0
        while i < min(len(path), len(mine_path)) and path[i] == mine_path[i]:
            i += 1
        return mine_path[i], path[i]

    def compare(target: str, c: AdmittedWorkload | None) -> tuple[ShareKey, ShareKey, ShareKey]:
        """Kueue's ``ComputeShares`` and ``ComputeTargetShareAfterRemoval``: the shares of the
        preemptor's and the target's side just below their lowest common ancestor (the preemptor's
        with its request added), the target's before and after ``c`` is gone."""
        pre, tgt = almost_lca(target)
        if pre == cq_id(mine) and tgt == cq_id(target):  # siblings: the ClusterQueues' own shares
            before = share(target)[1]
            after = share(target, _minus(cur(target), c))[1] if c is not None else before
            return share(mine)[1], before, after
        with ctx._without([*base, *seq]):  # in the tree: a cohort's share depends on its children
            tree.add_units(mine, req)
            try:
                mine_new = share_units(tree, pre)[1]
                before = share_units(tree, tgt)[1]
                after = before
                if c is not None:
                    with ctx._without([c]):
                        after = share_units(tree, tgt)[1]
            finally:
                tree.remove_units(mine, req)
        return mine_new, before, after

    within = _within_nominal(ctx, cur(mine), req)
    other_reason: Reason = "InCohortReclamation" if within else "InCohortFairSharing"
    first = strategies[0] if strategies else "LessThanOrEqualToFinalShare"

    queues: dict[str, list[AdmittedWorkload]] = {}
    for a in sorted([*others, *own], key=order):
        queues.setdefault(a.cluster_queue, []).append(a)
    reasons: dict[str, Reason] = {}
    retry: list[AdmittedWorkload] = []

    def take(a: AdmittedWorkload, reason: Reason) -> None:
        seq.append(a)
        reasons[a.key] = reason
        usage[a.cluster_queue] = _minus(cur(a.cluster_queue), a)

    def next_target(live: dict[str, list[AdmittedWorkload]]) -> str | None:
        best: str | None = None
        best_key: tuple[ShareKey, Any] | None = None
        for name in sorted(live):
            lst = live[name]
            borrowing, k = share(name)
            if not lst or (not borrowing and name != mine):
                del live[name]
                continue
            if best_key is None or k > best_key[0] or (k == best_key[0] and order(lst[0]) < best_key[1]):
                best, best_key = name, (k, order(lst[0]))
        return best

    live = {n: list(v) for n, v in queues.items()}
    while True:
        target = next_target(live)
        if target is None:
            break
        lst = live[target]
        if target == mine:
            take(lst.pop(0), "InClusterQueue")
            continue
        if within:
            take(lst.pop(0), "InCohortReclamation")
            continue
        mine_new, before, _ = compare(target, None)
        if mine_new[0] == 1 and before[0] != 1:  # infinite preemptor share: nothing passes
            retry.extend(lst)
            lst.clear()
            continue
        while lst:
            c = lst.pop(0)
            if _allows(first, *compare(target, c)):
                take(c, other_reason)
                break
            retry.append(c)
    if len(strategies) > 1 and retry:
        second: dict[str, list[AdmittedWorkload]] = {}
        for a in sorted(retry, key=order):
            second.setdefault(a.cluster_queue, []).append(a)
        while True:
            target = next_target(second)
            if target is None:
                break
            c = second.pop(target)[0]
            mine_new, before, _ = compare(target, None)
            if mine_new < before:
                take(c, other_reason)
    return seq, reasons


def _fair_search(
    ctx: _Ctx,
    shares: _Shares,
    base: Sequence[AdmittedWorkload],
    own: Sequence[AdmittedWorkload],
    others: Sequence[AdmittedWorkload],
    strategies: Sequence[str],
) -> tuple[list[AdmittedWorkload], dict[str, Reason]] | None:
    """Kueue's fair-sharing preemption (:func:`_fair_order`): the victims and their reasons."""
    # prune: a target queue whose share is below the preemptor's lowest possible share (all own
    # candidates gone, the expected charges of the preemptor added) can never satisfy either
    # strategy; the shares of other queues do not change by evicting from a third one
    # (not when the preemptor stays within its nominal quota: then no strategy is asked)
    floor = shares.floor()
    strict = all(st == "LessThanInitialShare" for st in strategies)
    req0 = extra_units(ctx.expected[0] if ctx.expected else {})
    free_pass = _within_nominal(ctx, shares.usage(ctx.cq.name, 0), req0)
    keep: set[str] = set()
    for qn in {a.cluster_queue for a in others}:
        k = shares.share(qn)[1]
        if free_pass or k > floor or (not strict and k == floor):
            keep.add(qn)
    if not keep and not own:
        return None
    others = sorted((a for a in others if a.cluster_queue in keep), key=_order(ctx.cq.name))
    everyone = [*base, *own, *others]
    # the preemptor's charges, for its share "with the workload admitted": known without placing
    # when the plan charges exactly the expected usage; else from a placement with every candidate
    # gone (which is also the necessary condition checked below)
    req: dict[FlavorResource, Fraction]
    if ctx.known_charges is not None:
        req = dict(ctx.known_charges)
    else:
        probe = ctx.fits(everyone, allow_borrow=True)
        if probe is None:
            return None
        req = dict(probe.usage)
    greedy, reasons = _fair_order(shares, own, others, extra_units(req), strategies)
    # quota first (cheap), then placements only where quota allows; every set tried below is a
    # prefix of Kueue's order: when quota does not allow all of it gone, it allows none
    if ctx.monotone([*base, *greedy]) and not ctx.quota_fits([*base, *greedy], allow_borrow=True):
        return None
    # the shortest prefix of the greedy order that quota allows: quota only gets better the more is
    # taken out, so a binary search finds it
    start: int | None = None
    if greedy and ctx.quota_fits([*base, *greedy], allow_borrow=True):
        lo, hi = 1, len(greedy)
        while lo < hi:
            mid = (lo + hi) // 2
            if ctx.quota_fits([*base, *greedy[:mid]], allow_borrow=True):
                hi = mid
            else:
                lo = mid + 1
        start = lo
    if start is None:
        return None
    # before several prefixes are tried, the necessary condition: with every candidate gone it fits
    if start < len(greedy) and ctx.fits(everyone, allow_borrow=True) is None:
        return None
    # the shortest prefix of the greedy order that makes room
    for i in range(start, len(greedy) + 1):
        if ctx.fits([*base, *greedy[:i]], allow_borrow=True) is not None:
            removed = greedy[:i]
            break
    else:
        return None
    # put back what is not needed (Kueue's fill-back)
    for c in list(reversed(removed[:-1])):
        trial = [x for x in removed if x.key != c.key]
        if ctx.fits([*base, *trial], allow_borrow=True) is not None:
            removed = trial
    return removed, reasons
