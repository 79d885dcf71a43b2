"""What a scheduling cycle decides: admissions, evictions, pending reasons, as ``CycleResult``.

The phases of the cycle (``queueing.scheduling.phases``) produce these; the shell executes them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from queueing.scheduling.assign import Assignment
from queueing.scheduling.preemption import PreemptionPlan
from queueing.scheduling.reasons import Why
from queueing.scheduling.snapshot import AdmittedWorkload, WorkloadInfo

__all__ = ["Admission", "CycleResult", "Eviction", "PendingReason", "PendingReasons"]


@dataclass(frozen=True)
class Admission:
    workload: WorkloadInfo
    cluster_queue: str
    assignment: Assignment

    @property
    def key(self) -> str:
        return self.workload.key

    @property
    def partial(self) -> bool:
        return any(self.assignment.counts.get(p.name, p.count) < p.count for p in self.workload.pod_sets)

    def admitted(self, now: float) -> AdmittedWorkload:
        """The record to put in the next snapshot once the shell has executed the admission."""
        return AdmittedWorkload(
            workload=self.workload,
            cluster_queue=self.cluster_queue,
            usage=self.assignment.usage,
            admission_time=now,
            placement=self.assignment.placement,
            counts=self.assignment.counts,
        )


@dataclass(frozen=True)
class Eviction:
    key: str
    cluster_queue: str
    reason: str  # ClusterQueueStopped / LocalQueueStopped
    message: str


@dataclass(frozen=True)
class PendingReason:
    """Kueue-style QuotaReserved=False condition: reason and a message that says what blocks.
    One object may stand for every workload of a run (``PendingReasons.groups``): when the message
    names a workload's own pods or claims, ``why`` has it as data and ``message`` is its text for no
    workload in particular; :meth:`for_workload` gives the reason as written to one workload.
    Compared by value."""

    cluster_queue: str | None
    reason: str  # Pending | Inadmissible | Preempting | Backoff | Deactivated
    message: str
    why: Why | None = None

    def text_for(self, key: str) -> str:
        """The message for the workload ``key`` (``namespace/name``)."""
        return self.message if self.why is None else self.why.render(key)

    def for_workload(self, key: str) -> PendingReason:
        """This reason as written to the workload ``key``: its message names that workload's pods."""
        if self.why is None:
            return self
        return PendingReason(self.cluster_queue, self.reason, self.why.render(key), self.why)


class PendingReasons(Mapping[str, PendingReason]):
    """Workload key -> its pending reason, as written to that workload (``for_workload``). A reason
    often applies to a whole run of workloads (the rest of a run whose head did not fit): those are
    kept as one group and only indexed by key when looked up by key; ``groups()`` gives them as
    they are (one reason object per group, the same for every workload of it: render it with
    ``PendingReason.for_workload``), which is what a caller comparing with the previous cycle's
    reasons needs."""

    def __init__(self) -> None:
        self._one: dict[str, PendingReason] = {}
        self._groups: list[tuple[list[WorkloadInfo], PendingReason]] = []
        self._index: dict[str, PendingReason] | None = None

    def set(self, key: str, reason: PendingReason) -> None:
        self._one[key] = reason
        self._index = None

    def set_all(self, workloads: list[WorkloadInfo], reason: PendingReason) -> None:
        """The same reason for every workload of ``workloads`` (the list is kept: do not change it)."""
        if workloads:
            self._groups.append((workloads, reason))
            self._index = None

    def discard(self, key: str) -> None:
        if self._one.pop(key, None) is not None:
            self._index = None

    def groups(self) -> Iterator[tuple[Sequence[WorkloadInfo] | None, str | None, PendingReason]]:
        """``(workloads, None, reason)`` per group, ``(None, key, reason)`` per single entry."""
        for key, r in self._one.items():
            yield None, key, r
        for ws, r in self._groups:
            yield ws, None, r

    def _all(self) -> dict[str, PendingReason]:
        if self._index is None:
            idx: dict[str, PendingReason] = {}
            for ws, r in self._groups:
                idx.update(dict.fromkeys([w.key for w in ws], r))
            idx.update(self._one)
            self._index = idx
        return self._index

    def __getitem__(self, key: str) -> PendingReason:
        got = self._one.get(key)
        return (got if got is not None else self._all()[key]).for_workload(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


@dataclass(frozen=True)
class CycleResult:
    admissions: tuple[Admission, ...] = ()
    preemptions: tuple[PreemptionPlan, ...] = ()
    evictions: tuple[Eviction, ...] = ()
    pending: Mapping[str, PendingReason] = field(default_factory=dict)
    inactive_cluster_queues: Mapping[str, str] = field(default_factory=dict)
    # admission fair sharing entry penalties added this cycle (LocalQueue key -> resource -> amount)
    local_queue_penalties: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    cluster_queue_penalties: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
