"""The controller's Prometheus metrics: Kueue's names and meanings with the prefix ``queueing_``.

The controller owns one :class:`ControllerMetrics` (its own ``CollectorRegistry``, never the
process-global default, so two controllers in one test process do not collide) and calls the typed
facade::

    metrics = ControllerMetrics()
    metrics.admission_attempt("success", seconds=0.012)
    metrics.admitted("team-a", wait_seconds=31.0)
    metrics.evicted("team-a", "Preempted")
    metrics.preempted("team-b", "InCohortReclamation")
    metrics.set_pending("team-a", active=3, inadmissible=1)
    metrics.set_usage("team-a", "h200", "nvidia.com/gpu", 8)
    with metrics.time_allocator():
        ...
    metrics.exposition()   # the text /metrics serves

``docs/operations-metrics.md`` is the reference (a test keeps it in step with :data:`METRICS`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from queueing.api.quantity import Quantity

__all__ = [
    "CONTENT_TYPE_LATEST",
    "METRICS",
    "PREFIX",
    "ControllerMetrics",
    "MetricSpec",
]

PREFIX = "queueing_"

AdmissionResult = Literal["success", "inadmissible"]
PendingStatus = Literal["active", "inadmissible"]


@dataclass(frozen=True)
class MetricSpec:
    """One metric: name without prefix, type, labels, meaning, and Kueue's name if it has one."""

    name: str
    type: Literal["counter", "gauge", "histogram"]
    labels: tuple[str, ...]
    help: str
    kueue: str | None = None
    buckets: tuple[float, ...] = ()


def _exp(start: float, factor: float, count: int) -> tuple[float, ...]:
    return tuple(start * factor**i for i in range(count))


# seconds: 1 ms .. ~33 s; 1 s .. ~9 h; 100 µs .. ~3.3 s
_ATTEMPT_BUCKETS = _exp(0.001, 2, 16)
_WAIT_BUCKETS = _exp(1, 2, 16)
_ALLOCATOR_BUCKETS = _exp(0.0001, 2, 16)

METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "pending_workloads",
        "gauge",
        ("cluster_queue", "status"),
        "Workloads waiting in a ClusterQueue: status `active` (will be tried in the next cycles; a "
        "preemptor waiting for its victims; in a StrictFIFO queue also one that did not fit) or "
        "`inadmissible` (tried and did not fit, in requeue backoff, or refused by a missing, stopped "
        "or inactive queue; waiting for a change that could make them fit), as Kueue counts them.",
        "kueue_pending_workloads",
    ),
    MetricSpec(
        "admission_attempts_total",
        "counter",
        ("result",),
        "Scheduling cycles that tried to admit at least one workload, by result: `success` (at least "
        "one was admitted) or `inadmissible` (none was).",
        "kueue_admission_attempts_total",
    ),
    MetricSpec(
        "admission_attempt_duration_seconds",
        "histogram",
        ("result",),
        "Latency of one scheduling cycle (quota, fair sharing, device placement, preemption planning).",
        "kueue_admission_attempt_duration_seconds",
        _ATTEMPT_BUCKETS,
    ),
    MetricSpec(
        "quota_reserved_workloads_total",
        "counter",
        ("cluster_queue",),
        "Workloads whose quota was reserved in the ledger.",
        "kueue_quota_reserved_workloads_total",
    ),
    MetricSpec(
        "quota_reserved_wait_time_seconds",
        "histogram",
        ("cluster_queue",),
        "Time from a workload being queued (or requeued) to its quota reservation.",
        "kueue_quota_reserved_wait_time_seconds",
        _WAIT_BUCKETS,
    ),
    MetricSpec(
        "admitted_workloads_total",
        "counter",
        ("cluster_queue",),
        "Workloads admitted (quota reserved and devices planned; their pods may start).",
        "kueue_admitted_workloads_total",
    ),
    MetricSpec(
        "admission_wait_time_seconds",
        "histogram",
        ("cluster_queue",),
        "Time from a workload being queued (or requeued) to its admission.",
        "kueue_admission_wait_time_seconds",
        _WAIT_BUCKETS,
    ),
    MetricSpec(
        "admitted_active_workloads",
        "gauge",
        ("cluster_queue",),
        "Workloads admitted and not yet finished or evicted.",
        "kueue_admitted_active_workloads",
    ),
    MetricSpec(
        "evicted_workloads_total",
        "counter",
        ("cluster_queue", "reason"),
        "Workloads evicted, by reason: `Preempted`, `PodsReadyTimeout`, `NodeFailure`, `DeviceTaint`, "
        "`Deactivated`, `ClusterQueueStopped`, ...",
        "kueue_evicted_workloads_total",
    ),
    MetricSpec(
        "preempted_workloads_total",
        "counter",
        ("preempting_cluster_queue", "reason"),
        "Workloads preempted, by the ClusterQueue of the preemptor and the reason: `InClusterQueue`, "
        "`InCohortReclamation`, `InCohortFairSharing`, `InCohortReclaimWhileBorrowing`.",
        "kueue_preempted_workloads_total",
    ),
    MetricSpec(
        "cluster_queue_resource_usage",
        "gauge",
        ("cluster_queue", "flavor", "resource"),
        "Quota in use by admitted workloads, per flavor and resource (devices as counts, memory in "
        "bytes, CPU in cores).",
        "kueue_cluster_queue_resource_usage",
    ),
    MetricSpec(
        "cluster_queue_nominal_quota",
        "gauge",
        ("cluster_queue", "flavor", "resource"),
        "Nominal quota per flavor and resource.",
        "kueue_cluster_queue_nominal_quota",
    ),
    MetricSpec(
        "cluster_queue_weighted_share",
        "gauge",
        ("cluster_queue",),
        "Fair-sharing weighted share: the largest ratio of borrowed quota to lendable cohort quota "
        "over the resources, divided by the queue's weight (0: not borrowing).",
        "kueue_cluster_queue_weighted_share",
    ),
    MetricSpec(
        "allocator_duration_seconds",
        "histogram",
        ("result",),
        "Latency of one DRA device allocation (a gang placement) by result: `allocated` or `unsatisfiable`.",
        None,
        _ALLOCATOR_BUCKETS,
    ),
    MetricSpec(
        "leader_election_master_status",
        "gauge",
        ("name",),
        "1 while this replica holds the leader Lease `name` (its name, without the namespace, as "
        "controller-runtime labels it), else 0.",
        "leader_election_master_status (controller-runtime)",
    ),
    MetricSpec(
        "scheduling_stall_seconds",
        "gauge",
        (),
        "Seconds since the leader last completed a sync (a scheduling cycle) while work is pending (Workloads "
        "neither admitted nor finished). 0 when nothing waits or on a standby.",
        None,
    ),
    MetricSpec(
        "scheduling_stalled",
        "gauge",
        (),
        "1 while `scheduling_stall_seconds` is over `health.schedulingStallTimeout` (the controller is "
        "wedged: `/readyz` fails too), else 0.",
        None,
    ),
    MetricSpec(
        "sync_step_seconds_total",
        "counter",
        ("step",),
        "Seconds the leader spent in each step of its sync (`finish`, `cycle`, `bind`, `reasons`, "
        "`new_objects`, `queue_status`, ...; see docs/concepts.md), waiting for the API and the ledger "
        "included: which step a slow turn from a Job's end to the next Job's start waits for.",
        None,
    ),
    MetricSpec(
        "periodic_job_runs_total",
        "counter",
        ("job", "result"),
        "Runs of the periodic jobs (`usage-sampling`, `resync`, `ledger-compaction`, "
        "`inadmissible-recheck`, `heartbeat`), by result `success` or `error`.",
        None,
    ),
)

Number = float | int | Quantity


def _num(v: Number) -> float:
    return float(v.value) if isinstance(v, Quantity) else float(v)


class ControllerMetrics:
    """The metrics registry the controller owns, with one method per thing that happens."""

    def __init__(self, registry: CollectorRegistry | None = None, prefix: str = PREFIX) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.prefix = prefix
        self._m: dict[str, Counter | Gauge | Histogram] = {}
        for spec in METRICS:
            name = prefix + spec.name
            if spec.type == "counter":
                self._m[spec.name] = Counter(
                    name.removesuffix("_total"), spec.help, spec.labels, registry=self.registry
                )
            elif spec.type == "gauge":
                self._m[spec.name] = Gauge(name, spec.help, spec.labels, registry=self.registry)
            else:
                self._m[spec.name] = Histogram(
                    name, spec.help, spec.labels, registry=self.registry, buckets=spec.buckets
                )
        # label values per ClusterQueue, so a deleted queue's series can be removed
        self._series: dict[str, set[tuple[str, tuple[str, ...]]]] = {}

    # ------------------------------------------------------------------ plumbing
    def _counter(self, name: str, *labels: str, cq: str | None = None) -> Counter:
        self._track(name, labels, cq)
        m = self._m[name]
        assert isinstance(m, Counter)
        return m.labels(*labels)

    def _gauge(self, name: str, *labels: str, cq: str | None = None) -> Gauge:
        self._track(name, labels, cq)
        m = self._m[name]
        assert isinstance(m, Gauge)
        return m.labels(*labels)

    def _histogram(self, name: str, *labels: str, cq: str | None = None) -> Histogram:
        self._track(name, labels, cq)
        m = self._m[name]
        assert isinstance(m, Histogram)
        return m.labels(*labels)

    def _track(self, name: str, labels: tuple[str, ...], cq: str | None) -> None:
        if cq is not None:
            self._series.setdefault(cq, set()).add((name, labels))

    def exposition(self) -> bytes:
        """The Prometheus text format of everything in the registry."""
        return generate_latest(self.registry)

    def value(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        """A sample's current value by its full name (e.g. ``queueing_admitted_workloads_total``)."""
        return self.registry.get_sample_value(name, labels or {})

    # ------------------------------------------------------------------ admission
    def admission_attempt(self, result: AdmissionResult, seconds: float) -> None:
        """One scheduling cycle that tried to admit something, and how long it took."""
        self._counter("admission_attempts_total", result).inc()
        self._histogram("admission_attempt_duration_seconds", result).observe(seconds)

    def quota_reserved(self, cluster_queue: str, wait_seconds: float | None = None) -> None:
        self._counter("quota_reserved_workloads_total", cluster_queue, cq=cluster_queue).inc()
        if wait_seconds is not None:
            self._histogram("quota_reserved_wait_time_seconds", cluster_queue, cq=cluster_queue).observe(
                max(0.0, wait_seconds)
            )

    def admitted(self, cluster_queue: str, wait_seconds: float | None = None) -> None:
        self._counter("admitted_workloads_total", cluster_queue, cq=cluster_queue).inc()
        if wait_seconds is not None:
            self._histogram("admission_wait_time_seconds", cluster_queue, cq=cluster_queue).observe(
                max(0.0, wait_seconds)
            )

    def evicted(self, cluster_queue: str, reason: str) -> None:
        self._counter("evicted_workloads_total", cluster_queue, reason, cq=cluster_queue).inc()

    def preempted(self, preempting_cluster_queue: str, reason: str) -> None:
        self._counter(
            "preempted_workloads_total", preempting_cluster_queue, reason, cq=preempting_cluster_queue
        ).inc()

    # ------------------------------------------------------------------ state gauges
    def set_pending(self, cluster_queue: str, *, active: int, inadmissible: int) -> None:
        self._gauge("pending_workloads", cluster_queue, "active", cq=cluster_queue).set(active)
        self._gauge("pending_workloads", cluster_queue, "inadmissible", cq=cluster_queue).set(inadmissible)

    def set_admitted_active(self, cluster_queue: str, count: int) -> None:
        self._gauge("admitted_active_workloads", cluster_queue, cq=cluster_queue).set(count)

    def set_usage(self, cluster_queue: str, flavor: str, resource: str, value: Number) -> None:
        self._gauge("cluster_queue_resource_usage", cluster_queue, flavor, resource, cq=cluster_queue).set(
            _num(value)
        )

    def set_nominal_quota(self, cluster_queue: str, flavor: str, resource: str, value: Number) -> None:
        self._gauge("cluster_queue_nominal_quota", cluster_queue, flavor, resource, cq=cluster_queue).set(
            _num(value)
        )

    def set_weighted_share(self, cluster_queue: str, share: float) -> None:
        self._gauge("cluster_queue_weighted_share", cluster_queue, cq=cluster_queue).set(share)

    def clear_cluster_queue(self, cluster_queue: str) -> None:
        """Remove every series of a deleted ClusterQueue (as Kueue does)."""
        for name, labels in self._series.pop(cluster_queue, set()):
            self._m[name].remove(*labels)

    # ------------------------------------------------------------------ allocator, leader, jobs
    def allocator(self, seconds: float, *, allocated: bool) -> None:
        self._histogram("allocator_duration_seconds", "allocated" if allocated else "unsatisfiable").observe(
            seconds
        )

    @contextmanager
    def time_allocator(self) -> Iterator[_AllocatorTimer]:
        """``with metrics.time_allocator() as t: ...; t.allocated = bool(result)``."""
        timer = _AllocatorTimer()
        start = time.perf_counter()
        try:
            yield timer
        finally:
            self.allocator(time.perf_counter() - start, allocated=timer.allocated)

    def set_leader(self, lease: str, leading: bool) -> None:
        self._gauge("leader_election_master_status", lease).set(1 if leading else 0)

    def periodic_job_run(self, job: str, ok: bool) -> None:
        self._counter("periodic_job_runs_total", job, "success" if ok else "error").inc()

    def sync_step(self, step: str, seconds: float) -> None:
        """Time spent in one step of a sync (controller.py ``Controller.sync``)."""
        self._counter("sync_step_seconds_total", step).inc(seconds)

    def set_stall(self, seconds: float, stalled: bool) -> None:
        """How long work has waited for a completed sync (see controller/health.py)."""
        for name, value in (
            ("scheduling_stall_seconds", seconds),
            ("scheduling_stalled", 1 if stalled else 0),
        ):
            m = self._m[name]
            assert isinstance(m, Gauge)
            m.set(value)


@dataclass
class _AllocatorTimer:
    allocated: bool = True
