"""Commit: the cycle's book of decisions, and the state they leave for the next head.

Every decision of a cycle is committed here, at once: the quota tree is charged, the placer's state
takes the placement (so the next head is placed around it), the admission fair sharing usage grows
by the entry penalty. Later phases read only this book: ``nominate`` orders heads by the usage it
holds (``changed`` says which ClusterQueues' usage moved), ``preempt`` keeps its per-cohort state while
the cohort tree's ``version`` stays the same. ``result`` turns the book into the ``CycleResult``.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from queueing.scheduling.assign import Assignment
from queueing.scheduling.config import SchedulingConfig
from queueing.scheduling.decisions import Admission, CycleResult, Eviction, PendingReason, PendingReasons
from queueing.scheduling.ordering import entry_penalty, usage_by_resource
from queueing.scheduling.placer import Placer
from queueing.scheduling.preemption import PreemptionPlan
from queueing.scheduling.quota import QuotaTree
from queueing.scheduling.snapshot import ClusterSnapshot, FlavorResource, WorkloadInfo

__all__ = ["CycleBook"]


class CycleBook:
    """The decisions of one cycle so far, and the quota tree and placer state with them."""

    def __init__(self, snapshot: ClusterSnapshot, placer: Placer[Any], config: SchedulingConfig) -> None:
        self.placer = placer
        self.afs = config.admission_fair_sharing
        # the quota tree and the placer state with every admitted workload charged
        self.tree = QuotaTree(snapshot.cluster_queues, snapshot.cohorts)
        admitted = list(snapshot.admitted)
        for a in admitted:
            if self.tree.has_cq(a.cluster_queue):
                self.tree.add_usage(a.cluster_queue, a.usage)
        self.state: Any = placer.initial_state(admitted)
        self.admissions: list[Admission] = []
        self.plans: list[PreemptionPlan] = []
        self.taken: set[str] = set()  # victims planned this cycle
        self.pending = PendingReasons()
        # ClusterQueues whose quota-tree usage changed since ``nominate`` last looked (it clears it)
        self.changed: set[str] = set()
        # cohort tree (root node) -> how many times its usage or its victims changed this cycle
        self.version: dict[str, int] = {}
        # admission fair sharing: local copies of decayed usage, growing by entry penalties
        self.lq_usage: dict[str, dict[str, float]] = {
            k: dict(v) for k, v in snapshot.local_queue_usage.items()
        }
        self.cq_usage: dict[str, dict[str, float]] = {
            k: dict(v) for k, v in snapshot.cluster_queue_usage.items()
        }
        self.lq_pen: dict[str, dict[str, float]] = {}
        self.cq_pen: dict[str, dict[str, float]] = {}

    def _charge(self, cq: str, wl: WorkloadInfo, a: Assignment) -> None:
        self.tree.add_usage(cq, a.usage)
        root = self.tree.root_of(cq)
        self.version[root] = self.version.get(root, 0) + 1
        self.state = self.placer.add(self.state, wl.key, a.placement)
        self.changed.add(cq)

    def admit(self, cq: str, wl: WorkloadInfo, a: Assignment) -> None:
        """``wl`` is admitted to ``cq`` with ``a`` (whole or partial)."""
        self._charge(cq, wl, a)
        self.admissions.append(Admission(wl, cq, a))
        self._charge_afs(wl, cq, a.usage)
        self.pending.discard(wl.key)

    def reserve(self, cq: str, wl: WorkloadInfo, plan: PreemptionPlan) -> None:
        """``wl`` preempts ``plan.victims``: its resources are reserved for the rest of the cycle
        (the victims still hold theirs until they are gone)."""
        self.plans.append(plan)
        self.taken.update(v.key for v in plan.victims)
        self._charge(cq, wl, plan.assignment)
        self.pending.set(wl.key, PendingReason(cq, "Preempting", plan.message))

    def _charge_afs(self, wl: WorkloadInfo, cq: str, usage: Mapping[FlavorResource, Fraction]) -> None:
        if self.afs is None:
            return
        pen = entry_penalty(usage_by_resource(usage), self.afs)
        for store, pens, k in ((self.lq_usage, self.lq_pen, wl.queue_key), (self.cq_usage, self.cq_pen, cq)):
            u = store.setdefault(k, {})
            p = pens.setdefault(k, {})
            for r, v in pen.items():
                u[r] = u.get(r, 0.0) + v
                p[r] = p.get(r, 0.0) + v

    def result(self, evictions: list[Eviction], inactive: Mapping[str, str]) -> CycleResult:
        return CycleResult(
            admissions=tuple(self.admissions),
            preemptions=tuple(self.plans),
            evictions=tuple(evictions),
            pending=self.pending,
            inactive_cluster_queues=inactive,
            local_queue_penalties=self.lq_pen,
            cluster_queue_penalties=self.cq_pen,
        )
