"""Assign: quota, flavors and gang placement for one head, on the book's state (everything admitted
or reserved so far). Whole first; after a preemption was not possible, partial admission down to
each pod set's ``minCount`` (the largest count that fits, by bisection)."""

from __future__ import annotations

from queueing.scheduling.assign import Assigner, Assignment, Outcome
from queueing.scheduling.phases.commit import CycleBook
from queueing.scheduling.snapshot import ClusterQueueSpec, WorkloadInfo

__all__ = ["assign_partial", "assign_whole", "full_counts"]


def full_counts(wl: WorkloadInfo) -> dict[str, int]:
    return {ps.name: ps.count for ps in wl.pod_sets}


def assign_whole(assigner: Assigner, book: CycleBook, cq: ClusterQueueSpec, wl: WorkloadInfo) -> Outcome:
    """Every pod of ``wl`` in ``cq``: an assignment, or why not (and the flavor combinations a
    preemption could make fit)."""
    return assigner.try_assign(cq, wl, full_counts(wl), book.tree, book.state)


def _reduced_counts(wl: WorkloadInfo, k: int, steps: int) -> dict[str, int]:
    out = {}
    for ps in wl.pod_sets:
        if ps.min_count is not None and ps.min_count < ps.count:
            span = ps.count - ps.min_count
            out[ps.name] = ps.count - -(-span * k // steps)
        else:
            out[ps.name] = ps.count
    return out


def assign_partial(
    assigner: Assigner, book: CycleBook, cq: ClusterQueueSpec, wl: WorkloadInfo
) -> Assignment | None:
    """The largest partial admission of ``wl`` (pod sets with ``minCount``) that fits, or None."""
    steps = max(
        (
            ps.count - ps.min_count
            for ps in wl.pod_sets
            if ps.min_count is not None and ps.min_count < ps.count
        ),
        default=0,
    )
    if not steps:
        return None
    lo, hi = 1, steps
    got = assigner.try_assign(cq, wl, _reduced_counts(wl, hi, steps), book.tree, book.state)
    if got.assignment is None:
        return None
    best = got.assignment
    while lo < hi:
        mid = (lo + hi) // 2
        g = assigner.try_assign(cq, wl, _reduced_counts(wl, mid, steps), book.tree, book.state)
        if g.assignment is not None:
            best, hi = g.assignment, mid
        else:
            lo = mid + 1
    return best
