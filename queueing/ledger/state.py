"""Plain, immutable value types the ledger's repository takes and returns (no I/O here).

Times are epoch milliseconds (``int``); the repository also accepts ``datetime`` where it says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from queueing.api.quantity import Quantity

UsageKey = tuple[str, str, str]  # (cluster queue, flavor, resource)


@dataclass(frozen=True)
class QuotaSpec:
    flavor: str
    resource: str
    nominal: Quantity
    borrowing_limit: Quantity | None = None
    lending_limit: Quantity | None = None


@dataclass(frozen=True)
class ClusterQueueSpec:
    name: str
    quotas: tuple[QuotaSpec, ...]
    cohort: str | None = None
    fair_sharing_weight: Quantity = field(default_factory=lambda: Quantity.parse("1"))


@dataclass(frozen=True)
class CohortSpec:
    """A Cohort: its parent (hierarchical cohorts) and its own quota, added to its subtree's pool.
    A cohort named only by a ClusterQueue or as a parent has no parent and no quota of its own."""

    name: str
    parent: str | None = None
    quotas: tuple[QuotaSpec, ...] = ()


@dataclass(frozen=True)
class LocalQueueSpec:
    namespace: str
    name: str
    cluster_queue: str


@dataclass(frozen=True)
class WorkloadSpec:
    uid: str
    namespace: str
    name: str
    local_queue: str
    priority: int = 0
    requests: Mapping[str, Any] = field(default_factory=dict)  # JSON-compatible (pod sets, counts, ...)
    owner_uid: str | None = None  # the object that owns it (its Job)
    # since when it waits (epoch ms): its Job's creation; None = the time it is recorded
    queued_at_ms: int | None = None


@dataclass(frozen=True)
class Charge:
    """Quota charged to the ClusterQueue for one (flavor, resource)."""

    flavor: str
    resource: str
    amount: Quantity


@dataclass(frozen=True)
class PlannedDevice:
    device: str  # "driver/pool/device"
    device_class: str = ""
    memory: Quantity | None = None  # the device's memory (bytes), for GPU-memory-hours


@dataclass(frozen=True)
class PodPlan:
    pod_index: int
    node: str
    devices: tuple[PlannedDevice, ...] = ()
    pod_set: str = "main"
    pod_name: str | None = None


@dataclass(frozen=True)
class AdmissionRequest:
    workload_uid: str
    cluster_queue: str
    charges: tuple[Charge, ...]
    pods: tuple[PodPlan, ...] = ()
    flavors: Mapping[str, str] = field(default_factory=dict)  # resource -> flavor (as in Workload status)
    status: Mapping[str, Any] | None = None  # the Workload's status.admission as written (JSON)


@dataclass(frozen=True)
class EvictionStarted:
    """An eviction recorded as started (``Ledger.begin_eviction``) whose release has not happened yet."""

    reason: str
    preemptor_uid: str | None
    message: str
    started_at_ms: int


@dataclass(frozen=True)
class ActiveAdmission:
    admission_id: int
    workload_uid: str
    namespace: str
    name: str
    local_queue: str
    cluster_queue: str
    admitted_at_ms: int
    charges: tuple[Charge, ...]
    pods: tuple[PodPlan, ...]
    eviction: EvictionStarted | None = None  # being evicted: started, not yet released
    # the Workload's status.admission as the admission wrote it (None: recorded before revision 0005)
    status: Mapping[str, Any] | None = None
    owner_uid: str | None = None  # the object owning the workload (its Job)

    @property
    def nodes(self) -> frozenset[str]:
        return frozenset(p.node for p in self.pods)

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(d.device for p in self.pods for d in p.devices)


@dataclass(frozen=True)
class PendingWorkload:
    uid: str
    namespace: str
    name: str
    local_queue: str
    priority: int
    queued_at_ms: int


@dataclass(frozen=True)
class LedgerState:
    """What the ledger knows at controller start: enough to rebuild the in-memory state."""

    cluster_queues: Mapping[str, ClusterQueueSpec]
    local_queues: Mapping[tuple[str, str], LocalQueueSpec]
    admissions: Mapping[str, ActiveAdmission]  # by workload UID
    pending: Mapping[str, PendingWorkload]  # by workload UID
    usage: Mapping[UsageKey, Quantity]
    cohorts: Mapping[str, CohortSpec] = field(default_factory=dict)


@dataclass(frozen=True)
class ReleaseResult:
    admission_id: int
    workload_uid: str
    cluster_queue: str
    released: tuple[Charge, ...]
    devices: tuple[str, ...]
