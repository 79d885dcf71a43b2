"""Recovery: reconcile what the ledger recorded with what the cluster shows. Pure: no I/O, no clock.

On start the controller loads :class:`LedgerState` (``Ledger.load_state()``), builds an
:class:`ObservedCluster` from its informers, calls :func:`reconcile` and carries out the returned actions
(ledger writes first, then cluster writes: invariant 4).

Rules, per workload UID (ledger = active admission in the ledger; cluster = the Workload object):

====================================  ==================================================================
ledger admitted, object gone          ``ReleaseAdmission(reason="WorkloadDeleted", final_state="deleted")``
ledger admitted, object finished      ``ReleaseAdmission(reason="Finished", final_state="finished")``
ledger admitted, object evicted /     ``ReleaseAdmission(reason=<observed reason>, final_state="pending")``
suspended by someone else
ledger admitted, object pending       ``ApplyAdmission`` (the ledger committed, the cluster write was lost)
ledger admitted, a planned node gone  ``EvictAdmission(reason="NodeLost")`` unless its pods all run
ledger admitted to CQ A, object       ``ReleaseAdmission`` + ``RevokeAdmission`` (cluster and ledger
admitted to CQ B                      disagree; the ledger wins, the workload is requeued)
object admitted, no ledger admission  ``RevokeAdmission`` (admitted without a ledger record: undo)
object pending, unknown to ledger     ``RecordWorkload``
ledger pending, object gone           ``ForgetWorkload``
====================================  ==================================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from queueing.ledger.state import ActiveAdmission, PendingWorkload

Phase = Literal["pending", "admitted", "running", "finished", "evicted"]


@dataclass(frozen=True)
class ObservedWorkload:
    uid: str
    namespace: str
    name: str
    phase: Phase
    cluster_queue: str | None = None  # the ClusterQueue in the object's admission, if admitted
    reason: str = ""  # for "evicted": the condition's reason (e.g. "Suspended", "PodsReadyTimeout")
    pods_running: bool = False  # every pod of the workload is running


@dataclass(frozen=True)
class ObservedCluster:
    workloads: Mapping[str, ObservedWorkload]  # by UID
    nodes: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True)
class ReleaseAdmission:
    workload_uid: str
    reason: str
    final_state: Literal["pending", "finished", "deleted"]


@dataclass(frozen=True)
class EvictAdmission:
    workload_uid: str
    reason: str
    message: str


@dataclass(frozen=True)
class ApplyAdmission:
    """Write the ledger's admission to the cluster again (status, gates, claims)."""

    workload_uid: str
    admission_id: int


@dataclass(frozen=True)
class RevokeAdmission:
    """The cluster shows an admission the ledger does not have: suspend/clear it and requeue."""

    workload_uid: str
    namespace: str
    name: str


@dataclass(frozen=True)
class RecordWorkload:
    workload_uid: str
    namespace: str
    name: str


@dataclass(frozen=True)
class ForgetWorkload:
    workload_uid: str


Action = (
    ReleaseAdmission | EvictAdmission | ApplyAdmission | RevokeAdmission | RecordWorkload | ForgetWorkload
)


def reconcile(
    admissions: Mapping[str, ActiveAdmission],
    pending: Mapping[str, PendingWorkload],
    cluster: ObservedCluster,
) -> list[Action]:
    """The actions bringing ledger and cluster into agreement, in a deterministic order (by UID)."""
    actions: list[Action] = []
    uids = sorted(set(admissions) | set(pending) | set(cluster.workloads))
    for uid in uids:
        adm = admissions.get(uid)
        obs = cluster.workloads.get(uid)
        if adm is not None:
            actions.extend(_admitted_in_ledger(adm, obs, cluster))
        elif obs is not None and obs.phase in ("admitted", "running"):
            actions.append(RevokeAdmission(uid, obs.namespace, obs.name))
        elif obs is None and uid in pending:
            actions.append(ForgetWorkload(uid))
        elif obs is not None and obs.phase == "pending" and uid not in pending:
            actions.append(RecordWorkload(uid, obs.namespace, obs.name))
    return actions


def _admitted_in_ledger(
    adm: ActiveAdmission, obs: ObservedWorkload | None, cluster: ObservedCluster
) -> list[Action]:
    uid = adm.workload_uid
    if obs is None:
        return [ReleaseAdmission(uid, "WorkloadDeleted", "deleted")]
    if obs.phase == "finished":
        return [ReleaseAdmission(uid, "Finished", "finished")]
    if obs.phase == "evicted":
        return [ReleaseAdmission(uid, obs.reason or "Evicted", "pending")]
    if obs.phase in ("admitted", "running") and obs.cluster_queue not in (None, adm.cluster_queue):
        return [
            ReleaseAdmission(uid, "AdmissionMismatch", "pending"),
            RevokeAdmission(uid, obs.namespace, obs.name),
        ]
    lost = sorted(adm.nodes - cluster.nodes)
    if lost and not obs.pods_running:
        return [EvictAdmission(uid, "NodeLost", f"planned node(s) {', '.join(lost)} no longer exist")]
    if obs.phase == "pending":
        return [ApplyAdmission(uid, adm.admission_id)]
    return []
