"""The simulation's event loop: a virtual clock driving the pure scheduling cycle.

Time only moves to the next thing that happens: an arrival, a finish, the end of a requeue backoff.
At each such time the loop finishes what ends, queues what arrives, runs one scheduling cycle
(:func:`queueing.scheduling.run_cycle` with the real DRA placer) and executes its result at once:
admissions start running (for the job's full duration), preemption victims and drained workloads
leave at once and are requeued at once, as Kueue requeues every eviction but a waitForPodsReady
timeout (which the simulator does not have). After an eviction another cycle runs at the same
time, so the preemptor is admitted as soon as its victims are gone. The run takes as long as the
computation, not the durations.

Events: ``Admitted`` (nodes), ``Evicted`` (reason, preemptor), ``Finished``, and ``Inadmissible``
whenever a pending job's reason (Kueue-style reason and message) changes. The summary has, per
ClusterQueue, the admitted jobs, mean and p90 wait (first admission − arrival), evictions,
finished and still pending jobs and device-seconds; and the device utilisation over the run.
"""

from __future__ import annotations

import gc
import heapq
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from operator import attrgetter

from queueing.cache import ClusterCache
from queueing.cache.reasons import ReasonChanges as _Reasons
from queueing.scheduling import SchedulingConfig, run_cycle
from queueing.scheduling.backlog import Backlog
from queueing.scheduling.cycle import Admission, CycleMemo, CycleResult
from queueing.scheduling.dra_placer import DraPlacer, DraState
from queueing.scheduling.ordering import decay_usage, usage_by_resource
from queueing.scheduling.snapshot import AdmittedWorkload, ClusterSnapshot, WorkloadInfo
from queueing.simulate.scenario import Scenario, SimJob
from queueing.verify import verify_from_env

__all__ = ["QueueSummary", "Sample", "SimEvent", "SimResult", "Simulation", "Summary"]


def _num(t: float) -> float | int:
    r = round(t, 3)
    return int(r) if r == int(r) else r


@dataclass(frozen=True)
class SimEvent:
    time: float
    event: str  # Admitted | Evicted | Finished | Inadmissible
    job: str
    cluster_queue: str | None
    reason: str
    preemptor: str | None = None
    nodes: tuple[str, ...] | None = None
    # for the ledger (not printed)
    admission: Admission | None = field(default=None, compare=False, repr=False)
    kind: str = ""  # the simulated job's kind (Job, Workload, PodGroup, StatefulSet, Deployment, ...)

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "time": _num(self.time),
            "event": self.event,
            "job": self.job,
            "kind": self.kind,
            "clusterQueue": self.cluster_queue,
            "reason": self.reason,
        }
        if self.event == "Evicted":
            out["preemptor"] = self.preemptor
        if self.event == "Admitted":
            out["nodes"] = list(self.nodes or ())
        return out


@dataclass
class QueueSummary:
    admitted: int = 0  # distinct jobs admitted at least once
    admissions: int = 0
    evicted: int = 0
    finished: int = 0
    pending: int = 0  # not finished at the end (pending or never admitted)
    waits: list[float] = field(default_factory=list)
    device_seconds: float = 0.0

    @property
    def mean_wait(self) -> float | None:
        return sum(self.waits) / len(self.waits) if self.waits else None

    @property
    def p90_wait(self) -> float | None:
        if not self.waits:
            return None
        w = sorted(self.waits)
        return w[max(0, math.ceil(0.9 * len(w)) - 1)]

    def to_json(self) -> dict[str, object]:
        mean, p90 = self.mean_wait, self.p90_wait
        return {
            "admitted": self.admitted,
            "admissions": self.admissions,
            "evicted": self.evicted,
            "finished": self.finished,
            "pending": self.pending,
            "meanWait": None if mean is None else _num(mean),
            "p90Wait": None if p90 is None else _num(p90),
            "deviceSeconds": _num(self.device_seconds),
        }


@dataclass
class Summary:
    time: float
    jobs: int
    finished: int
    devices: int
    device_utilisation: float  # busy device-time / (devices × run time)
    cycles: int
    cluster_queues: dict[str, QueueSummary]
    wall_seconds: float = 0.0

    def to_json(self) -> dict[str, object]:
        return {
            "event": "Summary",
            "time": _num(self.time),
            "jobs": self.jobs,
            "finished": self.finished,
            "devices": self.devices,
            "deviceUtilisation": round(self.device_utilisation, 4),
            "cycles": self.cycles,
            "clusterQueues": {k: v.to_json() for k, v in sorted(self.cluster_queues.items())},
        }


@dataclass(frozen=True)
class Sample:
    time: float
    pending: dict[str, int]  # ClusterQueue -> pending jobs
    busy: float  # devices in use


@dataclass
class SimResult:
    events: list[SimEvent]
    summary: Summary
    samples: list[Sample]


ProgressFn = Callable[[int, int, float], None]  # (jobs done, jobs, virtual time)
_key = attrgetter("key")
# objects allocated (net) since the last collection after which a run collects (see Simulation.run)
_COLLECT_AFTER = 10_000_000


class Simulation:
    def __init__(
        self,
        scenario: Scenario,
        config: SchedulingConfig | None = None,
        *,
        placer: DraPlacer | None = None,
        progress: ProgressFn | None = None,
        max_cycles_at_same_time: int = 50,
        verify: bool | None = None,
    ) -> None:
        """``verify``: verify mode (see ``queueing.verify``; None: from ``QUEUEING_VERIFY``)."""
        self.sc = scenario
        self.verify = verify_from_env(os.environ) if verify is None else verify
        self.config = config or SchedulingConfig()
        if self.verify and not self.config.verify:
            self.config = self.config.model_copy(update={"verify": True})
        # the cluster cache the controller keeps, fed from the scenario's objects (its cluster is
        # static: one placer for the whole run)
        self.cache = ClusterCache(verify=self.verify)
        self.cache.add_all(
            [
                *scenario.nodes,
                *scenario.slices,
                *scenario.classes,
                *scenario.claims,
                *scenario.templates,
                *scenario.running_pods,
            ]
        )
        self.placer = placer or self.cache.placer()
        self.progress = progress
        self.max_same = max_cycles_at_same_time
        self.device_classes = {c.name for c in scenario.classes}

    def run(self) -> SimResult:
        # a run allocates many objects that live long (plans, records, cached pods and claims):
        # the garbage collector would walk them again and again (on the full baseline benchmark
        # 97 young and 4 middle collections took a tenth of the run even with thresholds raised
        # 50-fold), while the cyclic garbage a run leaves is small (+5 % peak memory without any
        # collection). So automatic collection is off during the run; ``_collect_now`` collects
        # explicitly after a cycle once many objects have piled up, which bounds the memory of
        # very long runs. What exists before the run is kept out of the passes. All restored
        # afterwards.
        enabled = gc.isenabled()
        gc.freeze()
        gc.disable()
        try:
            return self._run()
        finally:
            # what the run allocated is still in the young generation (no automatic pass ran):
            # freezing it with the rest before the unfreeze moves it to the oldest generation, so
            # the first young pass after the run does not walk millions of objects (0.6 s after
            # the baseline benchmark's run); its cyclic garbage goes at the next full collection
            gc.freeze()
            gc.unfreeze()
            if enabled:
                gc.enable()

    @staticmethod
    def _collect_now() -> None:
        if gc.get_count()[0] > _COLLECT_AFTER:
            gc.collect()

    def _run(self) -> SimResult:
        wall0 = time.perf_counter()
        sc, cfg, placer = self.sc, self.config, self.placer
        q = sc.queues
        jobs: dict[str, SimJob] = {j.key: j for j in sc.jobs}
        kind_of = {k: j.kind for k, j in jobs.items()}.get  # each event carries its job's kind
        lq_of = {lq.key: lq.cluster_queue for lq in q.local_queues}
        arrivals = sorted(sc.jobs, key=lambda j: (j.arrival, j.key))
        ai = 0
        pending = Backlog(verify=cfg.verify)  # kept sorted between cycles (see scheduling.backlog)
        memo = CycleMemo()
        running: dict[str, AdmittedWorkload] = {}
        started: dict[str, int] = {}  # key -> admission serial (to ignore stale finish entries)
        ends: list[tuple[float, int, str]] = []
        serial = 0
        reasons = _Reasons(cfg.verify)
        events: list[SimEvent] = []
        samples: list[Sample] = []
        stats: dict[str, QueueSummary] = {cq.name: QueueSummary() for cq in q.cluster_queues}
        admitted_once: set[str] = set()
        done = 0
        state = DraState()
        busy = 0.0
        devs_running: dict[str, float] = {}  # cq -> device count running
        total_units = placer.total_units()
        busy_time = 0.0
        now = 0.0
        cycles = 0
        same = 0
        again = True  # run a cycle at time 0
        afs = cfg.admission_fair_sharing
        lq_usage: dict[str, dict[str, float]] = {}
        cq_usage: dict[str, dict[str, float]] = {}
        last_decay = 0.0
        # (backoff end, key) of pending workloads in backoff; stale entries are skipped when met
        backoffs: list[tuple[float, str]] = []
        # ClusterQueue -> pending workloads (for the samples), kept in step with ``pending``
        pending_per_cq: dict[str, int] = {}

        def add_pending(key: str, w: WorkloadInfo) -> None:
            if key not in pending:
                cq = lq_of.get(w.queue_key, "")
                pending_per_cq[cq] = pending_per_cq.get(cq, 0) + 1
            pending.add(w)
            if w.backoff_until is not None:
                heapq.heappush(backoffs, (w.backoff_until, key))

        def drop_pending(key: str) -> None:
            w = pending.remove(key)
            if w is not None:
                pending_per_cq[lq_of.get(w.queue_key, "")] -= 1

        def stat(cq: str | None) -> QueueSummary | None:
            if cq is None:
                return None
            return stats.setdefault(cq, QueueSummary())

        def devices_of(a: AdmittedWorkload) -> float:
            return float(sum(v for (_, r), v in a.usage.items() if r in self.device_classes))

        def take_out(key: str) -> AdmittedWorkload:
            nonlocal state
            a = running.pop(key)
            started.pop(key, None)
            state = placer.remove(state, key)
            devs_running[a.cluster_queue] = devs_running.get(a.cluster_queue, 0.0) - devices_of(a)
            return a

        def requeue(a: AdmittedWorkload) -> None:
            # pending again at once, ordered by its requeue time (Kueue: only a PodsReadyTimeout
            # eviction backs off)
            add_pending(a.key, replace(a.workload, requeue_time=now, backoff_until=None))
            reasons.forget(a.key)

        while True:
            # ---- the next time something happens
            cands: list[float] = []
            if again:
                cands.append(now)
            if ai < len(arrivals):
                cands.append(arrivals[ai].arrival)
            while ends and started.get(ends[0][2]) != ends[0][1]:
                heapq.heappop(ends)
            if ends:
                cands.append(ends[0][0])
            # the earliest backoff end still ahead among pending workloads
            while backoffs:
                bt, bkey = backoffs[0]
                bw = pending.get(bkey)
                if bt <= now or bw is None or bw.backoff_until != bt:
                    heapq.heappop(backoffs)
                    continue
                cands.append(bt)
                break
            if not cands:
                break
            t = max(now, min(cands))
            if t > now:
                busy_time += busy * (t - now)
                for cq_name, n_dev in devs_running.items():
                    if n_dev:
                        st = stat(cq_name)
                        assert st is not None
                        st.device_seconds += n_dev * (t - now)
                now = t
                same = 0
            else:
                same += 1
            again = False
            # ---- finishes
            while ends and ends[0][0] <= now:
                _, ser, key = heapq.heappop(ends)
                if started.get(key) != ser:
                    continue
                a = take_out(key)
                done += 1
                s = stat(a.cluster_queue)
                if s is not None:
                    s.finished += 1
                events.append(
                    SimEvent(now, "Finished", key, a.cluster_queue, "Succeeded", kind=kind_of(key, ""))
                )
            # ---- arrivals
            while ai < len(arrivals) and arrivals[ai].arrival <= now:
                j = arrivals[ai]
                ai += 1
                add_pending(j.key, j.info)
            # ---- admission fair sharing: decayed usage
            if afs is not None:
                cur_lq: dict[str, dict[str, float]] = {}
                cur_cq: dict[str, dict[str, float]] = {}
                for a in running.values():
                    u = usage_by_resource(a.usage)
                    for cur_map, k in ((cur_lq, a.workload.queue_key), (cur_cq, a.cluster_queue)):
                        acc = cur_map.setdefault(k, {})
                        for r, amount in u.items():
                            acc[r] = acc.get(r, 0.0) + amount
                el = now - last_decay
                for store, cur in ((lq_usage, cur_lq), (cq_usage, cur_cq)):
                    for k in set(store) | set(cur):
                        store[k] = decay_usage(store.get(k, {}), cur.get(k, {}), el, afs.usage_half_life_time)
                last_decay = now
            # ---- one cycle
            pending.release(now)
            snap = ClusterSnapshot(
                cluster_queues=q.cluster_queues,
                cohorts=q.cohorts,
                local_queues=q.local_queues,
                flavors=q.flavors,
                backlog=pending,
                nominated=frozenset(reasons.nominated),
                admitted=tuple(running.values()),
                namespaces=q.namespaces,
                local_queue_usage=lq_usage,
                cluster_queue_usage=cq_usage,
            )
            res: CycleResult = run_cycle(snap, placer, now, cfg, memo=memo)
            cycles += 1
            evicted_any = False
            # evictions first (the preemptors of this cycle are admitted in the next one)
            for plan in res.preemptions:
                for victim in plan.victims:
                    if victim.key not in running:
                        continue
                    a = take_out(victim.key)
                    s = stat(a.cluster_queue)
                    if s is not None:
                        s.evicted += 1
                    events.append(
                        SimEvent(
                            now,
                            "Evicted",
                            victim.key,
                            a.cluster_queue,
                            victim.reason,
                            plan.preemptor,
                            kind=kind_of(victim.key, ""),
                        )
                    )
                    requeue(a)
                    evicted_any = True
            for ev in res.evictions:
                if ev.key not in running:
                    continue
                a = take_out(ev.key)
                s = stat(a.cluster_queue)
                if s is not None:
                    s.evicted += 1
                events.append(
                    SimEvent(
                        now, "Evicted", ev.key, a.cluster_queue, ev.reason, None, kind=kind_of(ev.key, "")
                    )
                )
                requeue(a)
                evicted_any = True
            for adm in res.admissions:
                key = adm.key
                rec = adm.admitted(now)
                running[key] = rec
                drop_pending(key)
                reasons.forget(key)
                serial += 1
                started[key] = serial
                if jobs[key].duration != math.inf:  # a serving kind without a duration runs to the end
                    heapq.heappush(ends, (now + jobs[key].duration, serial, key))
                state = placer.add(state, key, adm.assignment.placement)
                devs_running[adm.cluster_queue] = devs_running.get(adm.cluster_queue, 0.0) + devices_of(rec)
                s = stat(adm.cluster_queue)
                if s is not None:
                    s.admissions += 1
                    if key not in admitted_once:
                        s.admitted += 1
                        s.waits.append(now - jobs[key].arrival)
                admitted_once.add(key)
                if adm.partial:
                    got = sum(adm.assignment.counts.get(p.name, p.count) for p in adm.workload.pod_sets)
                    want = sum(p.count for p in adm.workload.pod_sets)
                    reason = f"partial admission: {got} of {want} pods"
                elif adm.assignment.borrows:
                    reason = "admitted by borrowing"
                else:
                    reason = "admitted"
                events.append(
                    SimEvent(
                        now,
                        "Admitted",
                        key,
                        adm.cluster_queue,
                        reason,
                        None,
                        adm.assignment.placement.nodes,
                        adm,
                        kind_of(key, ""),
                    )
                )
            if afs is not None:
                for store, pen in (
                    (lq_usage, res.local_queue_penalties),
                    (cq_usage, res.cluster_queue_penalties),
                ):
                    for k, m in pen.items():
                        d = store.setdefault(k, {})
                        for r, v in m.items():
                            d[r] = d.get(r, 0.0) + v
            changed = reasons.changes(res.pending, pending)  # in key order
            for key, pr in changed:
                pw = pending.get(key)
                assert pw is not None
                pcq = pr.cluster_queue or lq_of.get(pw.queue_key)
                events.append(
                    SimEvent(
                        now,
                        "Inadmissible",
                        key,
                        pcq,
                        f"{pr.reason}: {pr.text_for(key)}",
                        kind=kind_of(key, ""),
                    )
                )
            busy = placer.busy_units(state)
            per_cq = {cq: n for cq, n in pending_per_cq.items() if n}
            if samples and samples[-1].time == now:
                samples[-1] = Sample(now, per_cq, busy)  # one sample per instant: the last state
            else:
                samples.append(Sample(now, per_cq, busy))
            if evicted_any and same < self.max_same:
                again = True
            self._collect_now()
            if self.progress is not None:
                self.progress(done, len(jobs), now)
        # ---- summary
        end = now
        for key, j in jobs.items():
            if key in pending or key in running or (j.arrival > end):
                s = stat(lq_of.get(j.info.queue_key))
                if s is not None:
                    s.pending += 1
        util = busy_time / (total_units * end) if total_units and end > 0 else 0.0
        summary = Summary(
            time=end,
            jobs=len(jobs),
            finished=done,
            devices=total_units,
            device_utilisation=util,
            cycles=cycles,
            cluster_queues=stats,
            wall_seconds=time.perf_counter() - wall0,
        )
        return SimResult(events, summary, samples)
