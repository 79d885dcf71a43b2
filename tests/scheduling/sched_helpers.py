"""Builders for scheduling scenarios and a tiny virtual-time driver around run_cycle."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction

from queueing.scheduling import (
    AdmittedWorkload,
    ClusterQueueSpec,
    ClusterSnapshot,
    CohortSpec,
    CountingNode,
    CountingPlacer,
    CountingRequest,
    FlavorQuotas,
    FlavorSpec,
    LocalQueueSpec,
    PodSetInfo,
    PreemptionPolicy,
    ResourceGroup,
    ResourceQuota,
    SchedulingConfig,
    WorkloadInfo,
    run_cycle,
)
from queueing.scheduling.backlog import Backlog
from queueing.scheduling.cycle import CycleMemo, CycleResult
from queueing.scheduling.placer import CountingState, Placement

F = Fraction


def quota(nominal: int, borrowing: int | None = None, lending: int | None = None) -> ResourceQuota:
    return ResourceQuota(
        F(nominal),
        None if borrowing is None else F(borrowing),
        None if lending is None else F(lending),
    )


def gpu_cq(
    name: str,
    nominal: int,
    cohort: str | None = None,
    borrowing: int | None = None,
    lending: int | None = None,
    flavor: str = "default",
    resource: str = "gpu",
    **kw: object,
) -> ClusterQueueSpec:
    group = ResourceGroup(
        (resource,), (FlavorQuotas(flavor, {resource: quota(nominal, borrowing, lending)}),)
    )
    return ClusterQueueSpec(name=name, resource_groups=(group,), cohort=cohort, **kw)  # type: ignore[arg-type]


def lq(name: str, cq: str, ns: str = "default", **kw: object) -> LocalQueueSpec:
    return LocalQueueSpec(namespace=ns, name=name, cluster_queue=cq, **kw)  # type: ignore[arg-type]


def job(
    name: str,
    gpus: int,
    pods: int = 1,
    queue: str = "lq-a",
    priority: int = 0,
    t: float = 0.0,
    ns: str = "default",
    min_count: int | None = None,
    resource: str = "gpu",
) -> WorkloadInfo:
    ps = PodSetInfo(
        name="main", count=pods, device_requests={resource: F(gpus)} if gpus else {}, min_count=min_count
    )
    return WorkloadInfo(
        namespace=ns,
        name=name,
        queue_name=queue,
        pod_sets=(ps,),
        priority=priority,
        creation_time=t,
        placement_request=CountingRequest({"main": gpus}),
    )


def nodes(n: int, gpus: int = 8, prefix: str = "n", **kw: object) -> list[CountingNode]:
    return [CountingNode(f"{prefix}{i + 1}", gpus, **kw) for i in range(n)]  # type: ignore[arg-type]


def running(
    wl: WorkloadInfo, cq: str, node_gpus: Sequence[tuple[str, int]], t: float = 0.0, flavor: str = "default"
) -> AdmittedWorkload:
    """An admitted workload pinned to the given (node, gpus) per pod."""
    total = sum(g for _, g in node_gpus)
    pl = Placement(
        nodes=tuple(n for n, _ in node_gpus), device_charges={"gpu": F(total)}, detail=tuple(node_gpus)
    )
    counts = {ps.name: ps.count for ps in wl.pod_sets}
    return AdmittedWorkload(wl, cq, {(flavor, "gpu"): F(total)}, t, pl, counts)


def snapshot(
    cqs: Iterable[ClusterQueueSpec],
    lqs: Iterable[LocalQueueSpec],
    pending: Iterable[WorkloadInfo] = (),
    admitted: Iterable[AdmittedWorkload] = (),
    cohorts: Iterable[CohortSpec] = (),
    flavors: Iterable[FlavorSpec] = (FlavorSpec("default"),),
    **kw: object,
) -> ClusterSnapshot:
    return ClusterSnapshot(
        cluster_queues=tuple(cqs),
        local_queues=tuple(lqs),
        pending=tuple(pending),
        admitted=tuple(admitted),
        cohorts=tuple(cohorts),
        flavors=tuple(flavors),
        **kw,  # type: ignore[arg-type]
    )


LOWER = PreemptionPolicy(within_cluster_queue="LowerPriority")


def used_per_node(placer: CountingPlacer, admitted: Iterable[AdmittedWorkload]) -> dict[str, int]:
    st: CountingState = placer.initial_state(list(admitted))
    return dict(st.used)


@dataclass
class Driver:
    """Virtual time: arrivals, admissions, finishes, evictions (victims leave at once and requeue)."""

    base: ClusterSnapshot
    placer: CountingPlacer
    config: SchedulingConfig = field(default_factory=SchedulingConfig)
    step: float = 1.0
    now: float = 0.0
    pending: list[WorkloadInfo] = field(default_factory=list)
    future: list[tuple[WorkloadInfo, float]] = field(default_factory=list)  # (workload, duration)
    duration: dict[str, float] = field(default_factory=dict)
    admitted: dict[str, AdmittedWorkload] = field(default_factory=dict)
    ends: dict[str, float] = field(default_factory=dict)
    events: list[tuple[float, str, str, str]] = field(default_factory=list)  # (t, event, key, cq)
    device_seconds: dict[str, float] = field(default_factory=dict)
    results: list[CycleResult] = field(default_factory=list)
    # when set: kept in step with ``pending`` (changed, not rebuilt) and every cycle is run a second
    # time from it (with a memo kept across cycles, in verify mode: every memo and cache answer is
    # checked against the general computation), which must give the same result
    backlog: Backlog | None = None
    memo: CycleMemo = field(default_factory=CycleMemo)  # used by the second run

    def submit(self, wl: WorkloadInfo, duration: float) -> None:
        self.future.append((wl, duration))
        self.duration[wl.key] = duration

    def tick(self) -> CycleResult:
        # finishes
        for k in sorted(k for k, e in self.ends.items() if e <= self.now):
            a = self.admitted.pop(k)
            del self.ends[k]
            self.events.append((self.now, "Finished", k, a.cluster_queue))
        # arrivals
        arrived = [w for w, _ in self.future if w.creation_time <= self.now]
        self.future = [(w, d) for w, d in self.future if w.creation_time > self.now]
        self.pending.extend(arrived)
        snap = replace(self.base, pending=tuple(self.pending), admitted=tuple(self.admitted.values()))
        res = run_cycle(snap, self.placer, self.now, self.config)
        if self.backlog is not None:
            for w in arrived:
                self.backlog.add(w)
            self.backlog.release(self.now)
            again = run_cycle(
                replace(snap, pending=(), backlog=self.backlog),
                self.placer,
                self.now,
                self.config.model_copy(update={"verify": True}),
                memo=self.memo,
            )
            assert again.admissions == res.admissions
            assert again.preemptions == res.preemptions
            assert again.evictions == res.evictions
            assert dict(again.pending) == dict(res.pending)
        self.results.append(res)
        gone: set[str] = set()
        for adm in res.admissions:
            self.admitted[adm.key] = adm.admitted(self.now)
            self.ends[adm.key] = self.now + self.duration[adm.key]
            gone.add(adm.key)
            if self.backlog is not None:
                self.backlog.remove(adm.key)
            self.events.append((self.now, "Admitted", adm.key, adm.cluster_queue))
        if gone:
            self.pending = [w for w in self.pending if w.key not in gone]
        for plan in res.preemptions:
            for v in plan.victims:
                a = self.admitted.pop(v.key)
                del self.ends[v.key]
                self.requeue(replace(a.workload, requeue_time=self.now))
                self.events.append((self.now, "Evicted", v.key, v.cluster_queue))
        for ev in res.evictions:
            a = self.admitted.pop(ev.key)
            del self.ends[ev.key]
            self.requeue(replace(a.workload, requeue_time=self.now))
            self.events.append((self.now, "Evicted", ev.key, ev.cluster_queue))
        # device-seconds until the next tick
        for a in self.admitted.values():
            g = sum(float(v) for (_, r), v in a.usage.items() if r == "gpu")
            self.device_seconds[a.cluster_queue] = (
                self.device_seconds.get(a.cluster_queue, 0.0) + g * self.step
            )
        self.now += self.step
        return res

    def requeue(self, wl: WorkloadInfo) -> None:
        self.pending.append(wl)
        if self.backlog is not None:
            self.backlog.add(wl)

    def run_until(self, t: float) -> None:
        while self.now < t:
            self.tick()

    def when(self, event: str, key: str) -> float | None:
        return next((t for t, e, k, _ in self.events if e == event and k == key), None)
