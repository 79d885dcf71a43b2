"""Drain: ``stopPolicy: HoldAndDrain`` on a ClusterQueue or LocalQueue evicts its admitted workloads.

Runs first, before any head is nominated. The drained workloads stay candidates for preemption only
as already evicting (nobody preempts them a second time).
"""

from __future__ import annotations

from collections.abc import Mapping

from queueing.scheduling.decisions import Eviction
from queueing.scheduling.snapshot import AdmittedWorkload, ClusterQueueSpec, ClusterSnapshot, LocalQueueSpec

__all__ = ["drain"]


def drain(
    snapshot: ClusterSnapshot,
    cqs: Mapping[str, ClusterQueueSpec],
    lqs: Mapping[str, LocalQueueSpec],
) -> tuple[list[Eviction], list[AdmittedWorkload]]:
    """The evictions of stopped queues, and the admitted workloads as preemption candidates (the
    drained ones marked evicting)."""
    evictions: list[Eviction] = []
    draining: set[str] = set()
    for a in snapshot.admitted:
        if a.evicting:
            continue
        cq = cqs.get(a.cluster_queue)
        lq = lqs.get(a.workload.queue_key)
        if cq is not None and cq.stop_policy == "HoldAndDrain":
            evictions.append(
                Eviction(
                    a.key,
                    a.cluster_queue,
                    "ClusterQueueStopped",
                    f"ClusterQueue {cq.name} is stopped (HoldAndDrain)",
                )
            )
            draining.add(a.key)
        elif lq is not None and lq.stop_policy == "HoldAndDrain":
            evictions.append(
                Eviction(
                    a.key,
                    a.cluster_queue,
                    "LocalQueueStopped",
                    f"LocalQueue {lq.key} is stopped (HoldAndDrain)",
                )
            )
            draining.add(a.key)
    candidates = [
        AdmittedWorkload(a.workload, a.cluster_queue, a.usage, a.admission_time, a.placement, a.counts, True)
        if a.key in draining
        else a
        for a in snapshot.admitted
    ]
    return evictions, candidates
