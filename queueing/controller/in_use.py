"""Queue objects in use (no I/O): which admitted workloads hold each ClusterQueue, LocalQueue,
ResourceFlavor and Cohort, and what a terminating one says.

A queue object gets :data:`~queueing.api.v1beta1.RESOURCE_IN_USE_FINALIZER` (Kueue's
``kueue.x-k8s.io/resource-in-use``) before the ledger commits the first admission that uses it, so a
deletion that comes after waits: the object is ``Terminating`` (``deletionTimestamp`` set) until no
admitted workload uses it, then the controller removes the finalizer and the API server deletes it.
While it terminates nothing new is admitted through it (:func:`terminating_cluster_queues`; a
terminating LocalQueue is routed nowhere by the core), and its status names the workloads that hold it
(:func:`holders_message`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from queueing.api.v1beta1 import ClusterQueue, Cohort, ResourceFlavor
from queueing.scheduling.snapshot import AdmittedWorkload

__all__ = ["ObjectKey", "holders_message", "terminating_cluster_queues", "used_by", "uses"]

# (kind, name) — a LocalQueue's name is ``namespace/name``
ObjectKey = tuple[str, str]


def _cohort_chain(cohort: str | None, parent: Mapping[str, str | None]) -> list[str]:
    out: list[str] = []
    while cohort and cohort not in out:
        out.append(cohort)
        cohort = parent.get(cohort)
    return out


def uses(
    a: AdmittedWorkload, cohort_of: Mapping[str, str | None], parent: Mapping[str, str | None]
) -> list[ObjectKey]:
    """The queue objects one admitted workload uses: its ClusterQueue, LocalQueue, the flavors it
    is charged in, and the Cohorts above its ClusterQueue."""
    out: list[ObjectKey] = [("ClusterQueue", a.cluster_queue), ("LocalQueue", a.workload.queue_key)]
    out += [("ResourceFlavor", f) for f in sorted({flavor for flavor, _ in a.usage})]
    out += [("Cohort", c) for c in _cohort_chain(cohort_of.get(a.cluster_queue), parent)]
    return out


def used_by(
    admitted: Iterable[AdmittedWorkload],
    cluster_queues: Iterable[ClusterQueue],
    cohorts: Iterable[Cohort],
) -> dict[ObjectKey, list[str]]:
    """Queue object -> the keys of the admitted workloads that use it (sorted)."""
    cohort_of = {cq.name: cq.spec.cohort_name or None for cq in cluster_queues}
    parent = {c.name: c.spec.parent_name or None for c in cohorts}
    out: dict[ObjectKey, set[str]] = {}
    for a in admitted:
        for k in uses(a, cohort_of, parent):
            out.setdefault(k, set()).add(a.key)
    return {k: sorted(v) for k, v in out.items()}


def holders_message(kind: str, name: str, holders: list[str], limit: int = 10) -> str:
    """What a terminating object says: which workloads keep it."""
    shown = ", ".join(holders[:limit]) + (f" and {len(holders) - limit} more" if len(holders) > limit else "")
    return f"{kind} {name} is being deleted; it waits for {len(holders)} admitted workload(s) that use it: {shown}"


def terminating_cluster_queues(
    cluster_queues: Iterable[ClusterQueue],
    cohorts: Iterable[Cohort],
    flavors: Iterable[ResourceFlavor],
) -> dict[str, str]:
    """ClusterQueue name -> ``Terminating: <why>`` for each ClusterQueue that admits nothing new because
    it, a flavor it names or a Cohort above it is being deleted."""
    gone_flavors = {f.name for f in flavors if f.metadata.deletion_timestamp}
    cohort_list = list(cohorts)
    gone_cohorts = {c.name for c in cohort_list if c.metadata.deletion_timestamp}
    parent = {c.name: c.spec.parent_name or None for c in cohort_list}
    out: dict[str, str] = {}
    for cq in cluster_queues:
        if cq.metadata.deletion_timestamp:
            out[cq.name] = f"Terminating: ClusterQueue {cq.name} is being deleted"
            continue
        named = sorted({fq.name for g in cq.spec.resource_groups or [] for fq in g.flavors} & gone_flavors)
        if named:
            out[cq.name] = f"Terminating: ResourceFlavor {named[0]} is being deleted"
            continue
        above = [c for c in _cohort_chain(cq.spec.cohort_name or None, parent) if c in gone_cohorts]
        if above:
            out[cq.name] = f"Terminating: Cohort {above[0]} is being deleted"
    return out
