"""Eviction bookkeeping for the controller (see docs/concepts.md, "Eviction").

An eviction goes through these steps, each one durable before the next starts, so that a restart in
the middle resumes it:

1. **started** — the victim's Workload gets ``Evicted=True`` (reason ``Preempted``, ``PodsReadyTimeout``,
   ``NodeLost``, ``DeviceTaintNoExecute``, ``ClusterQueueStopped``, ``InactiveWorkload`` (``spec.active``
   set to false), ...; for a preemption also
   ``Preempted=True`` with reason ``InClusterQueue`` / ``InCohort...`` and a message naming the
   preemptor) while ``QuotaReserved`` stays True: the ledger still holds the admission, because the
   victim's pods still hold the devices. The controller keeps the victim in its snapshot flagged
   ``evicting`` so the scheduling core counts it as going away and never picks it again.
2. **draining** — its Job is suspended, a partial admission's parallelism restored (pod groups: the
   Workload gets :data:`EVICTION_FINALIZER`, then the pods are deleted); the controller waits until
   no pod of it is left and none of its planned devices is allocated in a ResourceClaim (per-pod
   claims are deleted with their pods; a shared claim's allocation, written by the controller, is
   cleared by the controller once no running pod reserves it).
3. **released** — ``Ledger.evict`` releases the quota and records the eviction (who, why, planned and
   freed devices) in one transaction.
4. **requeued** — the Workload gets ``QuotaReserved=False``, ``Admitted=False``, ``Requeued=True``:
   pending again at once (as in Kueue, a preemption does not back off), except after a
   ``PodsReadyTimeout``: then ``status.requeueState`` (count, requeueAt: exponential backoff), or
   ``spec.active=false`` when the backoff limit is reached; a deactivated workload (``InactiveWorkload``)
   gets ``Requeued=False`` and waits until ``spec.active`` is true again (``Requeued=True Reactivated``).
   A pod group's Workload, deleted with its pods, only loses its finalizer. Only then can the preemptor be admitted, in a later cycle, onto the
   freed devices.

On restart: an admission in the ledger whose Workload says ``Evicted=True`` is resumed at step 2; a
Workload that says ``Evicted=True`` and ``QuotaReserved=True`` while the ledger has already released it
is resumed at step 4.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from queueing.api.v1beta1 import Admission, Workload
from queueing.scheduling.config import parse_duration

__all__ = [
    "EVICTION_FINALIZER",
    "PODS_READY_TIMEOUT_ANNOTATION",
    "Evicting",
    "planned_devices",
    "pods_ready_timeout",
    "preemption_message",
    "preemptor_uid_of",
    "shared_claims",
]

PODS_READY_TIMEOUT_ANNOTATION = "queueing.dra.io/pods-ready-timeout"
# on a pod group's Workload while it is evicted: deleting the group's pods would otherwise let the
# garbage collector delete the Workload (its pods own it) before the eviction is recorded
EVICTION_FINALIZER = "queueing.dra.io/eviction"

# reasons of Evicted=True
PREEMPTED = "Preempted"
PODS_READY_TIMEOUT = "PodsReadyTimeout"
NODE_LOST = "NodeLost"
DEVICE_TAINTED = "DeviceTaintNoExecute"
# Kueue's WorkloadEvictedByDeactivation: ``spec.active`` set to false on an admitted workload; it is then
# not requeued (Requeued=False with this reason) until ``spec.active`` is true again (``Reactivated``)
INACTIVE_WORKLOAD = "InactiveWorkload"
REACTIVATED = "Reactivated"
# the Workload no longer matches its Job (its pod sets changed): evicted, then replaced by a new one
JOB_CHANGED = "JobChanged"
DEACTIVATED_MESSAGE = "The workload is deactivated"

_UID = re.compile(r"\(UID: ([^)]+)\)")


@dataclass
class Evicting:
    """An eviction in progress (step 2): the victim's pods or claims are not gone yet."""

    uid: str
    key: str  # namespace/name of the victim
    reason: str  # the Evicted condition's reason
    message: str
    started: float  # controller clock
    preemptor_uid: str | None = None
    # the victim did not go away within the eviction timeout: the preemptor's plan no longer counts on it
    stuck: bool = False


def preemption_message(preemptor_key: str, preemptor_uid: str, cluster_queue: str, reason: str) -> str:
    where = "in ClusterQueue" if reason == "InClusterQueue" else "in the cohort of ClusterQueue"
    return (
        f"Preempted to accommodate workload {preemptor_key} (UID: {preemptor_uid}) {where} "
        f"{cluster_queue} ({reason})"
    )


def preemptor_uid_of(message: str) -> str | None:
    m = _UID.search(message)
    return m.group(1) if m else None


def planned_devices(admission: Admission) -> set[tuple[str, str, str]]:
    """(driver, pool, device) of every device in the plan."""
    out: set[tuple[str, str, str]] = set()
    for psa in admission.pod_set_assignments:
        for p in psa.placements or []:
            for c in p.claims or []:
                for d in c.devices:
                    out.add((d.driver, d.pool, d.device))
    return out


def planned_nodes(admission: Admission) -> set[str]:
    return {p.node_name for psa in admission.pod_set_assignments for p in psa.placements or []}


def shared_claims(admission: Admission) -> set[str]:
    """Names of the (shared, named) ResourceClaims the plan allocated."""
    out: set[str] = set()
    for psa in admission.pod_set_assignments:
        for p in psa.placements or []:
            for c in p.claims or []:
                if c.resource_claim_name:
                    out.add(c.resource_claim_name)
    return out


def pods_ready_timeout(wl: Workload, default: float, job_annotations: dict[str, str] | None = None) -> float:
    """The waitForPodsReady timeout of a Workload: its annotation (or its Job's), else ``default``.
    A malformed value falls back to the default (and the caller reports it)."""
    for source in (wl.annotations, job_annotations or {}):
        raw = source.get(PODS_READY_TIMEOUT_ANNOTATION)
        if raw:
            try:
                v = parse_duration(raw)
            except (ValueError, TypeError):
                continue
            if v > 0:
                return v
    return default
