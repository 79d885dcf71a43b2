"""The controller: informers -> snapshot -> scheduling cycle -> executor (see docs/concepts.md).

The reconcilers are one per module, each a class the next builds on: ``base`` (state, indexes kept
by deltas, API writes) <- ``binding`` (plan binding) <- ``source`` (Jobs and pod groups) <-
``eviction`` <- ``admission`` (the cycle and the admission executor) <- ``queue_sync`` (queue
objects) <- :class:`Controller` here (lifecycle, recovery, and the sync that runs them in order).

One asyncio task runs :meth:`Controller.sync` whenever something it watches changed (every informer
handler wakes it; writes that failed are retried by waking it again after a backoff). A sync runs the
critical path of a turn (a Job ends -> its quota is released -> the next Workload is admitted -> its
Job starts) first and the bulk after it, bounded per sync (the next sync follows at once):

1. brings the ledger's queues in step with the ClusterQueues and LocalQueues;
2. the integrated kinds held by suspend (Jobs, RayJobs, RayClusters, JobSets) that ended: their
   quota is released (ledger first) and their Workloads marked Finished; the pod-gated kinds' gated
   pods join their groups, and pod groups become Workloads or finish;
3. records the Workloads it sees for the first time in the ledger (one transaction; waiting since
   their object's creation); a Workload recreated for an object that runs on takes over the admission
   of the deleted one; forgets admissions whose Workload is gone (ledger release) unless its object
   runs on; rewrites the status of an admitted Workload that no longer shows the ledger's admission;
4. runs one scheduling cycle over the pending Workloads and executes its admissions: **ledger first**
   (quota and plan in one transaction), then the Workload's status (QuotaReserved, Admitted,
   ``status.admission`` with the plan; retried until it holds) and right after it, per admission,
   the start of its Job (as in 5.); preemptions start their evictions;
5. plan binding for admitted Workloads: the Job gets the placement gate (when needed), the planned
   node (when all its pods share one) and is unsuspended in one write; each gated pod gets its planned
   node (nodeSelector ``kubernetes.io/hostname``), its ResourceClaims get the planned allocation
   (``planBindingMode: Full``), and the gate is removed;
6. the pending Workloads' reasons that changed (at most ``reasons_per_sync``, oldest first);
7. the objects of the integrated kinds that need a write: one running without admission is
   suspended, one without a Workload gets it (at most ``jobs_per_sync``, the highest priority first
   when more wait); a new Workload joins the next sync's cycle;
8. ClusterQueue and LocalQueue status (pending, reserving, admitted, flavors usage).

Decisions about admission come from the controller's own record (``admitted``: loaded from the
ledger and the Workloads at start, changed only after the ledger committed), never from a possibly
stale informer cache, so watch drops, 410s and conflicts cannot make it admit twice or miss one.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Awaitable, Callable

from queueing.api.v1beta1 import (
    ADMITTED,
    EVICTED,
    FINISHED,
    QUOTA_RESERVED,
    Admission,
    Workload,
)
from queueing.controller.base import (
    ControllerStats,
    _cond_time,
    _epoch,
    _owner_uid,
    log,
)
from queueing.controller.evict import Evicting
from queueing.controller.plan import admission_json
from queueing.controller.queue_sync import QueueSync
from queueing.controller.records import Orphan
from queueing.dra.verify import VerifyError
from queueing.gcpolicy import LongLived
from queueing.kube.client import (
    CLUSTER_QUEUES,
    COHORTS,
    LOCAL_QUEUES,
    RESOURCE_FLAVORS,
    WORKLOAD_PRIORITY_CLASSES,
    WORKLOADS,
)
from queueing.ledger.reconcile import (
    ApplyAdmission,
    EvictAdmission,
    ObservedCluster,
    ObservedWorkload,
    RecordWorkload,
    RevokeAdmission,
    TransferAdmission,
    reconcile,
)
from queueing.ledger.recovery import apply_ledger_actions
from queueing.ledger.repository import NotAdmitted
from queueing.scheduling.from_api import FromApiError
from queueing.scheduling.ordering import decay_usage, usage_by_resource

__all__ = [
    "CLUSTER_QUEUES",
    "COHORTS",
    "LOCAL_QUEUES",
    "RESOURCE_FLAVORS",
    "WORKLOADS",
    "WORKLOAD_PRIORITY_CLASSES",
    "Controller",
    "ControllerStats",
]


class Controller(QueueSync):
    """``await c.start()`` (informers synced, ledger recovered, loop running) ... ``await c.stop()``."""

    _completed_syncs = 0  # syncs that ran to the end
    #: after the first completed sync, and every few seconds of syncs after it, the state alive is kept
    #: out of later garbage collections (``queueing/gcpolicy.py``): the state grows with arrivals
    _long_lived: LongLived | None = None

    async def start(self, timeout: float = 60.0, *, lead: bool = True) -> None:
        """Start the informers and wait for them; with ``lead`` also start admitting and evicting
        (without: a standby, :meth:`begin_leading` when it gets the Lease)."""
        self._informers_running = True
        for i in self.informers:
            i.start()
        waited: set[int] = set()
        # the informers of integrated kinds whose CRD the CRD informer found join while we wait
        while todo := [i for i in self.informers if id(i) not in waited]:
            await asyncio.gather(*(i.wait_synced(timeout) for i in todo))
            waited.update(id(i) for i in todo)
        self.log_disabled_sources()
        self._started = True
        if lead:
            await self.begin_leading()

    async def begin_leading(self) -> None:
        """Become the acting controller: rebuild the record from the ledger and the Workloads (another
        replica may have admitted and evicted meanwhile), then run the sync loop."""
        if self.leading:
            return
        self.admitted.clear()
        self.admissions.clear()
        self._bindings.clear()
        self._verified.clear()
        self.status_todo.clear()
        self.evicting.clear()
        self._ledger_cqs.clear()
        self._ledger_lqs.clear()
        self._admitted_seen.clear()
        self._orphans.clear()
        self._status_check.clear()
        for key in self._reasons_todo:  # not written: compared again by the next cycle
            self.reasons.forget(key)
        self._reasons_todo.clear()
        self.pending.mark_all()
        self._mark_all_sources()
        await self._sync_ledger_queues()
        await self.recover()
        await self._hold_all_in_use()
        self.leading = True
        self._task = asyncio.create_task(self._loop(), name="queueing-controller")
        self._wake.set()

    async def end_leading(self, graceful: bool = True) -> None:
        """Stop admitting and evicting. ``graceful``: the step in progress finishes first."""
        self.leading = False
        task, self._task = self._task, None
        if task is None:
            return
        if graceful:
            async with self._step:
                task.cancel()
        else:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        for h in (self._retry_handle, self._queue_status_handle, *self._timer_handles.values()):
            if h is not None:
                h.cancel()
        self._retry_handle = self._queue_status_handle = None
        self._timer_handles.clear()

    async def stop(self, graceful: bool = False) -> None:
        await self.end_leading(graceful)
        await self.events.stop()  # the Events queued so far are written
        self._informers_running = False
        for i in self.informers:
            await i.stop()
        for task in list(self._background):
            with contextlib.suppress(Exception):
                await task
        if self._completed_syncs:
            gc.unfreeze()  # what keep_long_lived kept is collectable again (this state is let go)

    async def _loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            async with self._step:
                if not self.leading:
                    return
                try:
                    await self.sync()
                except (asyncio.CancelledError, VerifyError):  # verify mode: a difference is a bug
                    raise
                except Exception as e:
                    self.stats.errors += 1
                    # isolation: an outage is logged on entry and on recovery, not per try
                    outage = self.outage.failed(e)
                    self._retry_later(self._outage_backoff() if outage else None)
                else:
                    self.outage.succeeded()
                    self.last_sync_completed = time.monotonic()
                    self._completed_syncs += 1
                    if self._long_lived is None:
                        self._long_lived = LongLived()
                    # the state built so far lives on: later collections skip it (gcpolicy)
                    self._long_lived.sync_completed()
            self.stats.synced += 1  # dashboard: a state taken mid-sync is retaken after it
            self.synced.set()

    def _outage_backoff(self) -> float:
        """During a ledger outage the retries back off, up to 2 s (one line is logged, not one a try)."""
        return float(min(self.retry_backoff * 2 ** min(self.outage.retries, 6), max(self.retry_backoff, 2.0)))

    def _observe(self, wl: Workload) -> ObservedWorkload:
        st = wl.status
        uid = wl.metadata.uid or ""
        ns = wl.namespace or "default"
        if st.is_true(FINISHED):
            phase = "finished"
        elif st.is_true(QUOTA_RESERVED):
            phase = "admitted"
        else:
            phase = "pending"
        cq = st.admission.cluster_queue if st.admission is not None else None
        return ObservedWorkload(
            uid,
            ns,
            wl.name,
            phase,  # type: ignore[arg-type]
            cq,
            admission=admission_json(st.admission),
            reserved=st.is_true(QUOTA_RESERVED),
            admitted=st.is_true(ADMITTED),
            owner_uid=_owner_uid(wl),
        )

    async def recover(self) -> None:
        """Rebuild the admission record from the ledger and the Workloads; reconcile the two. A
        Workload whose status diverged from the ledger's open admission gets its status rewritten
        from the ledger (repaired, not revoked); only what the ledger does not know is revoked."""
        state = await self.ledger.load_state()
        now = self.clock()
        wls = [w for w in self.workloads.list() if w.metadata.uid]
        by_uid = {w.metadata.uid or "": w for w in wls}
        observed = {uid: self._observe(w) for uid, w in by_uid.items()}
        jobs = {
            j.metadata.uid: j
            for j in self.jobs.list()
            if j.metadata.uid and self._job_alive(j.key, j.metadata.uid) is not None
        }
        actions = reconcile(
            state.admissions,
            state.pending,
            ObservedCluster(observed, frozenset(n.name for n in self.nodes.list()), frozenset(jobs)),
        )
        rest = await apply_ledger_actions(self.ledger, actions, at=now)
        revoked: set[str] = set()
        repair: dict[str, str] = {}  # uid -> how its status diverged from the ledger
        for a in rest:
            if isinstance(a, ApplyAdmission):
                if state.admissions[a.workload_uid].status is not None:
                    repair[a.workload_uid] = a.why
                    continue
                # recorded before the ledger kept the status it wrote: give the quota back and let the
                # next cycle admit it again (with a fresh plan for the cluster as it is now)
                with contextlib.suppress(NotAdmitted):
                    await self.ledger.release(
                        a.workload_uid, at=now, reason="Recovered", final_state="pending"
                    )
            elif isinstance(a, TransferAdmission):
                heir = by_uid[a.new_uid]
                with contextlib.suppress(NotAdmitted):
                    await self.ledger.transfer_admission(a.workload_uid, self._ledger_workload(heir), at=now)
                    repair[a.new_uid] = (
                        f"recreated for the same Job: takes over the admission of Workload {heir.key} "
                        f"(UID: {a.workload_uid})"
                    )
            elif isinstance(a, RevokeAdmission | EvictAdmission):
                revoked.add(a.workload_uid)
                wl = by_uid.get(a.workload_uid)
                if wl is not None and wl.status.is_true(EVICTED):
                    # the ledger released the eviction; the requeue status write was lost: redo it
                    await self._requeue(wl, self._evicting_from(wl))
                elif wl is not None:
                    await self._revoke(wl, "the ledger holds no admission for it")
            elif isinstance(a, RecordWorkload):
                wl = by_uid.get(a.workload_uid)
                if wl is not None:
                    await self._record(wl)
        state = await self.ledger.load_state()
        self._recorded = {
            uid: p.queued_at_ms / 1000 for uid, p in state.pending.items() if uid in self._wl_uids
        }
        self._recorded.update(
            (uid, a.admitted_at_ms / 1000) for uid, a in state.admissions.items() if uid in self._wl_uids
        )
        self._to_record = set(self._wl_uids) - set(self._recorded)
        for uid, adm in state.admissions.items():
            wl = by_uid.get(uid)
            ledger_admission = Admission.model_validate(adm.status) if adm.status is not None else None
            if wl is None:
                job = jobs.get(adm.owner_uid or "")
                if job is not None and ledger_admission is not None:
                    # its Job runs on: held for the Workload the Job gets next (_adopt_orphans)
                    self._orphans[uid] = Orphan(
                        uid, f"{adm.namespace}/{adm.name}", job.metadata.uid or "", job.key, ledger_admission
                    )
                continue
            admission = ledger_admission or wl.status.admission
            if uid in revoked or admission is None:
                continue
            try:
                self.admitted[uid] = self._admitted_from(
                    wl, admission, _epoch(_cond_time(wl, QUOTA_RESERVED)) or adm.admitted_at_ms / 1000
                )
                self.admissions[uid] = admission
                if uid in repair:
                    await self._repair_admission(wl, admission, repair[uid])
                    wl = self._workload_by_uid(uid) or wl
                if wl.status.is_true(EVICTED):
                    self.evicting[uid] = self._evicting_from(wl)  # resume the eviction
                elif adm.eviction is not None:  # started in the ledger; the status write was lost
                    started = adm.eviction
                    await self._mark_evicted(wl, started.reason, started.message)
                    self.evicting[uid] = Evicting(
                        uid,
                        wl.key,
                        started.reason,
                        started.message,
                        started.started_at_ms / 1000,
                        started.preemptor_uid,
                    )
            except FromApiError as e:
                log.warning("cannot rebuild the admission of %s: %s", wl.key, e)
        log.info(
            "recovered %d admissions from the ledger (%d being evicted, %d statuses repaired)",
            len(self.admitted),
            len(self.evicting),
            len(repair),
        )

    async def sync(self) -> None:
        """One pass of the steps below, in order, each timed (``queueing_sync_step_seconds_total``).

        What a turn waits for comes first: a Job's end releases its quota (``finish``), the cycle
        admits the next Workloads (ledger first, then their status) and their Jobs start (``bind``).
        The bulk comes after, each bounded per sync: the pending reasons of Workloads that did not
        fit (``reasons``), Workloads for new Jobs (``new_objects``), the queue status. New Workloads
        join the next sync's cycle, which follows at once. When a step fails, Workloads for new Jobs
        are still created before the sync is retried (they need no ledger)."""
        if not self.may_act():
            return
        self.stats.syncs += 1
        self._note_admitted()
        done: set[str] = set()
        try:
            for step, run in self._steps():
                await self._timed(step, run)
                done.add(step)
        except Exception:
            # a step failed (e.g. the ledger is down): Workloads for new Jobs need no ledger, so they are
            # still created (users see their Jobs queued during an outage); then the sync is retried
            if "new_objects" not in done:
                with contextlib.suppress(Exception):
                    await self._timed("new_objects", self._sync_jobs)
            raise

    async def _timed(self, step: str, run: Callable[[], Awaitable[None]]) -> None:
        t0 = time.perf_counter()
        try:
            await run()
        finally:
            self.metrics.sync_step(step, time.perf_counter() - t0)

    def _steps(self) -> tuple[tuple[str, Callable[[], Awaitable[None]]], ...]:
        """The sync's steps: (name for the metric, what it runs)."""
        return (
            ("queues", self._sync_ledger_queues),
            ("finish", self._sync_finished),
            ("replace", self._replace),
            ("pod_groups", self._sync_all_pod_groups),
            ("record", self._record_seen),
            ("orphans", self._sync_orphans),
            ("repair", self._sync_repairs),
            ("evictions", self._sync_evictions),
            ("cycle", self._schedule),
            ("bind", self._bind),
            ("reasons", self._write_reasons),
            ("new_objects", self._sync_jobs),
            ("queue_status", self._sync_queue_objects),
        )

    async def _sync_finished(self) -> None:
        await self._sync_jobs(new=False)

    async def _sync_all_pod_groups(self) -> None:
        await self._group_gated_pods()
        await self._sync_pod_groups()

    async def _sync_orphans(self) -> None:
        await self._adopt_orphans()
        await self._forget_deleted()

    async def _sync_repairs(self) -> None:
        await self._write_pending_status()
        await self._repair_statuses()

    async def _sync_evictions(self) -> None:
        await self._drive_evictions()
        await self._check_admitted()

    async def _sync_queue_objects(self) -> None:
        await self._release_in_use()
        await self._queue_status()
        await self._report_invalid_queues()

    def sample_usage(self) -> None:
        """Admission fair sharing: decay the LocalQueue/ClusterQueue usage toward what is admitted now."""
        afs = self.config.admission_fair_sharing
        if afs is None:
            return
        now = self.clock()
        elapsed = (
            afs.usage_sampling_interval if self._usage_sampled_at is None else now - self._usage_sampled_at
        )
        self._usage_sampled_at = now
        cur_lq: dict[str, dict[str, float]] = {}
        cur_cq: dict[str, dict[str, float]] = {}
        for a in self.admitted.values():
            for key, store in ((a.workload.queue_key, cur_lq), (a.cluster_queue, cur_cq)):
                u = store.setdefault(key, {})
                for r, v in usage_by_resource(a.usage).items():
                    u[r] = u.get(r, 0.0) + v
        for old, cur in ((self.lq_usage, cur_lq), (self.cq_usage, cur_cq)):
            for key in sorted(set(old) | set(cur)):
                d = decay_usage(old.get(key, {}), cur.get(key, {}), elapsed, afs.usage_half_life_time)
                if d:
                    old[key] = d
                else:
                    old.pop(key, None)
        self.wake()

    def resync(self) -> None:
        """Full re-sync: the ledger's queues are written again if they differ and every Workload and
        Job is looked at again (the informers keep their caches current by watch; this catches anything
        a write in between missed)."""
        self._ledger_cqs.clear()
        self._ledger_lqs.clear()
        self.pending.mark_all()
        self._mark_all_sources()
        self.wake()

    def recheck_inadmissible(self) -> None:
        """Inadmissible workloads are tried again (periodically, and when slices change)."""
        self.pending_reasons.clear()
        self.wake()
