"""One scheduling cycle: ``run_cycle(snapshot, placer, now, config) -> CycleResult``.

The cycle is a short sequence of phases, each in its own module under ``queueing.scheduling.phases``
(``commit``, ``drain``, ``nominate``, ``assign``, ``preempt``); the result types are in ``decisions``.

Pure: the same snapshot, placer state and ``now`` always give the same result. The shell
executes the result (admissions, evictions) and builds the next snapshot.

What a cycle does:

1. Builds the quota tree (inactive ClusterQueues: cohort cycles, stopPolicy, missing flavors) and
   charges every admitted workload; asks the placer for the state with their placements.
2. ``stopPolicy: HoldAndDrain`` on a ClusterQueue or LocalQueue evicts its admitted workloads.
3. Puts eligible pending workloads in their ClusterQueue's queue (priority, then time; with
   admission fair sharing first the LocalQueue's decayed usage).
4. Repeatedly takes the best head over all ClusterQueues (fair sharing: lowest dominant resource
   share with the workload admitted, top-down through the cohort tree; otherwise non-borrowing
   first, then priority, then time) and tries to admit it: quota and gang placement on the state
   with everything admitted or planned so far. An admitted head is replaced by the next workload
   of its queue, so several workloads per ClusterQueue can be admitted in one cycle.
5. A head that does not fit gets, in this order: a preemption plan (if the policies allow one
   that makes it fit), partial admission down to ``minCount``, or a pending reason. BestEffortFIFO
   moves on to the next workload; StrictFIFO blocks the queue for the rest of the cycle.
   Resources of a preemptor are reserved for the rest of the cycle (its victims still hold
   theirs until they are gone). In later cycles the preemptor is *nominated*
   (``ClusterSnapshot.nominated``, the shell's record of whose last reason was Preempting): it
   goes before every other workload, so that what its victims free is not taken by another
   workload of the cohort (quota) or of any cohort (devices: all share the nodes) — otherwise
   the victims would have been evicted for nothing, and preemptions could chase each other.
"""

from __future__ import annotations

from typing import Any

from queueing.scheduling.assign import Assigner, ShapeCache
from queueing.scheduling.config import SchedulingConfig
from queueing.scheduling.decisions import Admission, CycleResult, Eviction, PendingReason, PendingReasons
from queueing.scheduling.phases.assign import assign_partial, assign_whole
from queueing.scheduling.phases.commit import CycleBook
from queueing.scheduling.phases.drain import drain
from queueing.scheduling.phases.nominate import Estimates, Nominator, inactive_cluster_queues
from queueing.scheduling.phases.preempt import Preemptor
from queueing.scheduling.placer import Placer
from queueing.scheduling.preemption import PlanMemo
from queueing.scheduling.snapshot import ClusterSnapshot, FlavorSpec

__all__ = [
    "Admission",
    "CycleMemo",
    "CycleResult",
    "Eviction",
    "PendingReason",
    "PendingReasons",
    "inactive_cluster_queues",
    "run_cycle",
]


class CycleMemo:
    """What a caller that runs cycle after cycle may keep between them so that a cycle can reuse
    what depends only on the queue objects (a cache: the result is the same without it). Entries
    are checked against the objects they were computed from (by identity)."""

    def __init__(self) -> None:
        # fit signature -> (ClusterQueue, flavors, the expected usage that orders heads)
        self.estimates: Estimates = {}
        # derived shapes of (ClusterQueue, fit signature) for the Assigner, with the flavors they
        # were derived for
        self.shapes: ShapeCache = {}
        self.shapes_flavors: tuple[FlavorSpec, ...] | None = None
        # preemption questions that failed without a placement (bound to the queue objects, the
        # flavors, the configuration and the placer of the cycle)
        self.plans = PlanMemo()


def run_cycle(
    snapshot: ClusterSnapshot,
    placer: Placer[Any],
    now: float,
    config: SchedulingConfig | None = None,
    *,
    memo: CycleMemo | None = None,
) -> CycleResult:
    config = config or SchedulingConfig()
    memo = memo or CycleMemo()
    if memo.shapes_flavors is not snapshot.flavors:
        memo.shapes = {}
        memo.shapes_flavors = snapshot.flavors
    cqs = {cq.name: cq for cq in snapshot.cluster_queues}
    lqs = {lq.key: lq for lq in snapshot.local_queues}
    assigner = Assigner({f.name: f for f in snapshot.flavors}, placer, memo.shapes, verify=config.verify)
    memo.plans.bind(snapshot.cluster_queues, snapshot.cohorts, snapshot.flavors, config, placer)

    book = CycleBook(snapshot, placer, config)
    inactive = inactive_cluster_queues(snapshot, book.tree)
    evictions, candidates = drain(snapshot, cqs, lqs)
    heads = Nominator(snapshot, now, book, assigner, placer, config, cqs, lqs, inactive, memo.estimates)
    preemptor = Preemptor(book, candidates, assigner, placer, config, cqs, memo.plans)

    while (head := heads.next()) is not None:
        cq, wl = head
        out = assign_whole(assigner, book, cq, wl)
        if out.assignment is not None:
            book.admit(cq.name, wl, out.assignment)
            heads.admitted(cq)
            continue
        if not out.hard and out.preemptible:
            plan = preemptor.plan(cq, wl, out.preemptible)
            if plan is not None:
                book.reserve(cq.name, wl, plan)
                heads.preempting(cq, wl)
                continue
        partial = assign_partial(assigner, book, cq, wl)
        if partial is not None:
            book.admit(cq.name, wl, partial)
            heads.admitted(cq)
            continue
        heads.failed(cq, wl, PendingReason(cq.name, "Pending", out.message, out.why))

    return book.result(evictions, inactive)
