"""Recovery: reconcile what the ledger recorded with what the cluster shows. Pure: no I/O, no clock.

On start the controller loads :class:`LedgerState` (``Ledger.load_state()``), builds an
:class:`ObservedCluster` from its informers, calls :func:`reconcile` and carries out the returned actions
(ledger writes first, then cluster writes: invariant 4).

Rules, per workload UID (ledger = active admission in the ledger; cluster = the Workload object):

====================================  ==================================================================
ledger admitted, object gone, another ``TransferAdmission`` (the Workload was deleted and recreated
Workload of the same owner (Job)      for the same Job: the new one is the same admission)
ledger admitted, object gone, its     nothing (its Job still runs: the Workload it gets next takes the
owner (Job) still there               admission over)
ledger admitted, object gone          ``ReleaseAdmission(reason="WorkloadDeleted", final_state="deleted")``
ledger admitted, object finished      ``ReleaseAdmission(reason="Finished", final_state="finished")``
ledger admitted, object evicted /     ``ReleaseAdmission(reason=<observed reason>, final_state="pending")``
suspended by someone else
ledger admitted, a planned node gone  ``EvictAdmission(reason="NodeLost")`` unless its pods all run
ledger admitted, the object's status  ``ApplyAdmission``: the status is rewritten from the ledger (its
diverged (no ``status.admission``,    ``status.admission`` as written, QuotaReserved and Admitted True):
conditions not True, another plan or  recovery repairs, it does not revoke
ClusterQueue, or pending)
object admitted, no ledger admission  ``RevokeAdmission`` (admitted without a ledger record: undo)
object pending, unknown to ledger     ``RecordWorkload``
ledger pending, object gone           ``ForgetWorkload``
====================================  ==================================================================

An admission recorded before the ledger kept the status it wrote (revision 0005) cannot be rewritten:
for those a pending object gets ``ApplyAdmission`` with ``status=None`` (the controller gives the quota
back and admits again) and an object admitted to another ClusterQueue ``ReleaseAdmission`` +
``RevokeAdmission``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

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
    # status.admission as JSON (without nulls, as the ledger keeps it) and whether the QuotaReserved
    # and Admitted conditions are True
    admission: Mapping[str, Any] | None = None
    reserved: bool = False
    admitted: bool = False
    owner_uid: str | None = None  # its controller owner (the Job)


@dataclass(frozen=True)
class ObservedCluster:
    workloads: Mapping[str, ObservedWorkload]  # by UID
    nodes: frozenset[str] = field(default_factory=frozenset)
    owners: frozenset[str] = field(default_factory=frozenset)  # UIDs of owners (Jobs) still running


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
    """Write the ledger's admission to the cluster again (status, gates, claims); ``why`` says how
    the status diverged."""

    workload_uid: str
    admission_id: int
    why: str = ""


@dataclass(frozen=True)
class TransferAdmission:
    """The admission of a deleted Workload goes to the Workload recreated for the same owner (Job)."""

    workload_uid: str  # the deleted one
    new_uid: str


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
    ReleaseAdmission
    | EvictAdmission
    | ApplyAdmission
    | TransferAdmission
    | RevokeAdmission
    | RecordWorkload
    | ForgetWorkload
)


def status_diverges(
    observed: Mapping[str, Any] | None, reserved: bool, admitted: bool, ledger: Mapping[str, Any]
) -> str | None:
    """How a Workload's status disagrees with the ledger's open admission (None: it agrees).
    ``observed`` and ``ledger`` are ``status.admission`` as JSON without nulls."""
    if observed is None:
        return "status.admission is missing"
    if observed.get("clusterQueue") != ledger.get("clusterQueue"):
        return (
            f"status.admission names ClusterQueue {observed.get('clusterQueue')}, "
            f"the ledger {ledger.get('clusterQueue')}"
        )
    if observed != ledger:
        return "status.admission is not the plan the ledger holds"
    if not reserved:
        return "the QuotaReserved condition is not True"
    if not admitted:
        return "the Admitted condition is not True"
    return None


def reconcile(
    admissions: Mapping[str, ActiveAdmission],
    pending: Mapping[str, PendingWorkload],
    cluster: ObservedCluster,
) -> list[Action]:
    """The actions bringing ledger and cluster into agreement, in a deterministic order (by UID)."""
    actions: list[Action] = []
    # a Workload recreated for the owner (Job) of a deleted admitted one: it takes the admission over
    by_owner = {
        o.owner_uid: o
        for o in cluster.workloads.values()
        if o.owner_uid and o.uid not in admissions and o.phase != "finished"
    }
    heirs: dict[str, str] = {}
    for uid, a in admissions.items():
        heir = by_owner.get(a.owner_uid) if a.owner_uid else None
        if uid not in cluster.workloads and heir is not None and heir.uid not in heirs.values():
            heirs[uid] = heir.uid
    uids = sorted(set(admissions) | set(pending) | set(cluster.workloads))
    for uid in uids:
        adm = admissions.get(uid)
        obs = cluster.workloads.get(uid)
        if adm is not None:
            if uid in heirs:
                actions.append(TransferAdmission(uid, heirs[uid]))
            else:
                actions.extend(_admitted_in_ledger(adm, obs, cluster))
        elif uid in heirs.values():
            continue
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
        if adm.owner_uid and adm.owner_uid in cluster.owners:
            return []  # its Job runs on: the Workload it gets next takes the admission over
        return [ReleaseAdmission(uid, "WorkloadDeleted", "deleted")]
    if obs.phase == "finished":
        return [ReleaseAdmission(uid, "Finished", "finished")]
    if obs.phase == "evicted":
        return [ReleaseAdmission(uid, obs.reason or "Evicted", "pending")]
    if (
        adm.status is None
        and obs.phase in ("admitted", "running")
        and obs.cluster_queue
        not in (
            None,
            adm.cluster_queue,
        )
    ):
        return [
            ReleaseAdmission(uid, "AdmissionMismatch", "pending"),
            RevokeAdmission(uid, obs.namespace, obs.name),
        ]
    lost = sorted(adm.nodes - cluster.nodes)
    if lost and not obs.pods_running:
        return [EvictAdmission(uid, "NodeLost", f"planned node(s) {', '.join(lost)} no longer exist")]
    if adm.status is not None:
        why = status_diverges(obs.admission, obs.reserved, obs.admitted, adm.status)
        return [ApplyAdmission(uid, adm.admission_id, why)] if why else []
    if obs.phase == "pending":
        return [ApplyAdmission(uid, adm.admission_id)]
    return []
