"""Where the dashboard's data comes from: the :class:`DashboardSource` protocol and its two sources.

A source answers with plain data (:class:`~queueing.dashboard.model.DashboardInput`, JSON-ready
history); the server never reaches into the controller or the simulator itself:

* :class:`ControllerSource` — the running controller's own record (admitted workloads and plans,
  evictions in progress, pending reasons) and its informers' caches (queues, Workloads, slices,
  claims); history from the ledger (the ``queueing report`` queries plus the latest admissions and
  evictions). Everything it reads of the controller is in :meth:`ControllerSource.snapshot` (the
  narrow interface: public attributes only).
* :class:`ReplaySource` — a finished simulation (``queueing simulate --serve``): the state at any
  virtual time, rebuilt from the run's events (a time slider picks the time).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence
from typing import Any, Protocol

from queueing.api.v1beta1 import QUOTA_RESERVED, Admission
from queueing.dashboard.model import DashboardInput, DeviceKey, PlannedPod
from queueing.scheduling.cycle import PendingReason
from queueing.scheduling.from_api import admission_status, queue_specs
from queueing.scheduling.snapshot import AdmittedWorkload

__all__ = ["ControllerSource", "DashboardSource", "ReplaySource", "planned_pods"]

HISTORY_EVENTS = 200  # latest admissions and evictions on the History page
STARTING = "The controller is starting: its caches of the cluster are not synced yet."
STANDBY = (
    "This replica is a standby, not the leader: it admits nothing and its record of admissions is empty. "
    "Open the dashboard of the leader (the holder of the Lease)."
)
HISTORY_REPORTS = ("device-hours", "wait-times", "evictions-by-reason", "evictions-by-queue")


class DashboardSource(Protocol):
    def revision(self) -> Hashable:
        """Changes whenever what :meth:`snapshot` returns may have changed (cheap to call)."""
        ...

    def snapshot(self, at: float | None = None) -> DashboardInput:
        """The state now (live), or at virtual time ``at`` (replay)."""
        ...

    def timeline(self) -> tuple[float, float] | None:
        """A replay's time range (the slider); None for a live source."""
        ...

    async def history(self, at: float | None = None) -> dict[str, Any]:
        """``{"events": [...], "utilisation": [[t, busy, total], ...], "reports": [...]}``."""
        ...


def planned_pods(admission: Admission) -> tuple[PlannedPod, ...]:
    """The plan of ``status.admission``: node and devices (per claim) of every pod."""
    out: list[PlannedPod] = []
    for psa in admission.pod_set_assignments:
        for p in psa.placements or []:
            devices: list[tuple[str, DeviceKey]] = []
            for c in p.claims or []:
                for d in c.devices:
                    devices.append((c.resource_claim_name or c.name, (d.driver, d.pool, d.device)))
            out.append(PlannedPod(psa.name, p.index, p.node_name, tuple(devices)))
    return tuple(out)


# ---------------------------------------------------------------- the controller
class ControllerSource:
    """The live state of a :class:`~queueing.controller.controller.Controller` (duck-typed: only the
    attributes read in :meth:`snapshot`), history from its ledger."""

    def __init__(self, controller: Any, ledger: Any | None = None) -> None:
        self.c = controller
        self.ledger = ledger if ledger is not None else getattr(controller, "ledger", None)

    def revision(self) -> Hashable:
        c = self.c
        # begun and finished syncs: a state taken during a sync is taken again after it
        return (c.stats.syncs, c.stats.synced, len(c.admitted), len(c.evicting), len(c.pending_reasons))

    def timeline(self) -> tuple[float, float] | None:
        return None

    def snapshot(self, at: float | None = None) -> DashboardInput:
        c = self.c
        specs = queue_specs(
            [
                *c.flavors.list(),
                *c.cluster_queues.list(),
                *c.cohorts.list(),
                *c.local_queues.list(),
                *c.namespaces.list(),
            ]
        )
        admitted: dict[str, AdmittedWorkload] = dict(c.admitted)  # uid -> record
        by_key = {a.key: a for a in admitted.values()}
        plans = {
            a.key: planned_pods(adm) for uid, adm in dict(c.admissions).items() if (a := admitted.get(uid))
        }
        evicting = {e.key: e.reason for e in dict(c.evicting).values()}
        pending, invalid = c.pending_infos()  # the last cycle's own view of what is pending
        pending = [w for w in pending if w.key not in by_key]  # admitted since
        reasons: dict[str, PendingReason] = dict(c.pending_reasons)
        for wl in c.workloads.list():  # a reason the controller wrote before this run (a restart)
            qr = wl.status.condition(QUOTA_RESERVED)
            if wl.key not in reasons and wl.key not in by_key and qr is not None and qr.status != "True":
                reasons[wl.key] = PendingReason(None, qr.reason or "", qr.message or "")
        claims: dict[DeviceKey, str] = {}
        for claim in c.claims.list():
            alloc = claim.status.allocation if claim.status is not None else None
            if alloc is None or alloc.devices is None:
                continue
            for r in alloc.devices.results or []:
                claims[(r.driver, r.pool, r.device)] = claim.key
        return DashboardInput(
            now=c.clock(),
            cluster_queues=specs.cluster_queues,
            cohorts=specs.cohorts,
            local_queues=specs.local_queues,
            admitted=tuple(admitted.values()),
            plans=plans,
            evicting=evicting,
            pending=pending,
            reasons=reasons,
            invalid=invalid,
            inactive=dict(c.inactive_cluster_queues),
            slices=c.slices.list(),
            claims=claims,
            note=STARTING if not c.informers_synced else (None if c.leading else STANDBY),
        )

    async def history(self, at: float | None = None) -> dict[str, Any]:
        if self.ledger is None:
            return {"events": [], "utilisation": [], "reports": [], "error": "no ledger"}
        from queueing.dashboard.history import ledger_history

        return await ledger_history(self.ledger.engine, HISTORY_REPORTS, HISTORY_EVENTS)


# ---------------------------------------------------------------- a simulation replay
class ReplaySource:
    """A finished simulation, replayed: :meth:`snapshot` at virtual time ``at`` applies the run's
    events up to ``at`` to the scenario (arrivals, admissions with their plans, evictions, finishes,
    pending reasons)."""

    def __init__(self, scenario: Any, result: Any) -> None:
        self.sc, self.result = scenario, result
        self.events = sorted(result.events, key=lambda e: e.time)  # stable: the run's order per time
        self.end = float(result.summary.time)
        self._cache: tuple[float, DashboardInput] | None = None
        self.total_devices = int(result.summary.devices)

    def revision(self) -> Hashable:
        return len(self.events)

    def timeline(self) -> tuple[float, float] | None:
        return (0.0, self.end)

    def times(self) -> list[float]:
        return sorted({e.time for e in self.events})

    def snapshot(self, at: float | None = None) -> DashboardInput:
        t = self.end if at is None else max(0.0, float(at))
        if self._cache is not None and self._cache[0] == t:
            return self._cache[1]
        jobs = {j.key: j for j in self.sc.jobs}
        running: dict[str, AdmittedWorkload] = {}
        plans: dict[str, tuple[PlannedPod, ...]] = {}
        finished: set[str] = set()
        requeued: dict[str, float] = {}
        reasons: dict[str, PendingReason] = {}
        for ev in self.events:
            if ev.time > t:
                break
            if ev.event == "Admitted" and ev.admission is not None:
                running[ev.job] = ev.admission.admitted(ev.time)
                plans[ev.job] = planned_pods(admission_status(ev.admission))
                reasons.pop(ev.job, None)
            elif ev.event == "Evicted":
                running.pop(ev.job, None)
                plans.pop(ev.job, None)
                requeued[ev.job] = ev.time
                reasons.pop(ev.job, None)
            elif ev.event == "Finished":
                running.pop(ev.job, None)
                plans.pop(ev.job, None)
                finished.add(ev.job)
            elif ev.event == "Inadmissible":
                reason, _, message = ev.reason.partition(": ")
                reasons[ev.job] = PendingReason(ev.cluster_queue, reason, message)
        pending = []
        for key, j in jobs.items():
            if j.arrival > t or key in running or key in finished:
                continue
            info = j.info
            if key in requeued:
                info = dataclasses.replace(info, requeue_time=requeued[key])
            pending.append(info)
        q = self.sc.queues
        inp = DashboardInput(
            now=t,
            cluster_queues=q.cluster_queues,
            cohorts=q.cohorts,
            local_queues=q.local_queues,
            admitted=tuple(running.values()),
            plans=plans,
            pending=pending,
            reasons=reasons,
            slices=self.sc.slices,
        )
        self._cache = (t, inp)
        return inp

    async def history(self, at: float | None = None) -> dict[str, Any]:
        t = self.end if at is None else float(at)
        events = [
            {
                "time": e.time,
                "event": e.event,
                "workload": e.job,
                "clusterQueue": e.cluster_queue,
                "detail": e.reason + (f" (by {e.preemptor})" if e.preemptor else ""),
            }
            for e in self.events
            if e.time <= t and e.event != "Inadmissible"
        ][-HISTORY_EVENTS:]
        events.reverse()
        util = [[s.time, s.busy, self.total_devices] for s in self.result.samples if s.time <= t]
        summary = self.result.summary.to_json()
        cols = (
            "cluster_queue",
            "admitted",
            "admissions",
            "evicted",
            "finished",
            "pending",
            "meanWait",
            "p90Wait",
        )
        rows = [[name, *(v.get(k) for k in cols[1:])] for name, v in summary["clusterQueues"].items()]
        return {
            "events": events,
            "utilisation": _thin(util),
            "reports": [
                {
                    "name": "summary",
                    "title": "Simulation summary per ClusterQueue (whole run)",
                    "columns": list(cols),
                    "rows": rows,
                }
            ],
        }


def _thin(points: Sequence[Sequence[float]], most: int = 2000) -> list[list[float]]:
    """At most ``most`` points of a step series (every n-th, and the last)."""
    pts = [list(p) for p in points]
    if len(pts) <= most:
        return pts
    step = len(pts) / most
    out = [pts[int(i * step)] for i in range(most)]
    out.append(pts[-1])
    return out
