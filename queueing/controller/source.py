"""The workload source: a labelled Job (or a complete pod group) gets its Workload, a Job running
without admission is suspended, and when the Job or the group ends its quota is released (ledger
first) and the Workload is marked Finished; an admission whose Workload is gone is released."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Awaitable, Callable

from queueing.api.core import Job
from queueing.api.v1beta1 import (
    FINISHED,
    Workload,
)
from queueing.controller.base import (
    _dump,
    log,
)
from queueing.controller.binding import PlanBinding
from queueing.controller.plan import (
    with_condition,
)
from queueing.faults import fault_point
from queueing.integrations import BatchJob, PodGroup
from queueing.kube.writes import each
from queueing.ledger.models import FINISHED as FINISHED_STATE
from queueing.ledger.repository import LedgerError, NotAdmitted
from queueing.scheduling.from_api import FromApiError
from queueing.scheduling.jobs import WorkloadError, job_counts


class WorkloadSource(PlanBinding):
    async def _sync_jobs(self) -> None:
        """The Jobs whose delta arrived (or whose Workload's, or whose admission changed) since the
        last sync; every Job after a start or a resync."""
        if self._all_jobs_dirty:
            self._all_jobs_dirty = False
            self._dirty_jobs.clear()
            keys = self.jobs.keys()
        else:
            keys = list(self._dirty_jobs)
            self._dirty_jobs.clear()
        try:
            await self._sync_these_jobs(keys)
        except BaseException:
            self._dirty_jobs.update(dict.fromkeys(keys))  # looked at again at the next sync
            raise

    def _owned_workload(self, owner_uid: str) -> Workload | None:
        key = self._owned.get(owner_uid)
        return self.workloads.get_key(key) if key is not None else None

    async def _sync_these_jobs(self, keys: list[str]) -> None:
        wpcs = {w.name: w.value for w in self.workload_priority_classes.list()}
        pcs = {p.name: p.value for p in self.priority_classes.list()}

        finished: list[tuple[Workload, bool, Job | None]] = []
        todo: list[Job] = []  # Jobs not finished that need a write (see ``sync``)
        # Jobs whose deleted Workload's admission waits for the Workload they get next: they run on
        held = {o.owner_uid for o in self._orphans.values()}
        for job in [j for k in keys if (j := self.jobs.get_key(k)) is not None]:
            if job.metadata.deletion_timestamp:
                continue
            done, succeeded = BatchJob(job).finished()
            if not done:
                wl = self._owned_workload(job.metadata.uid or "")
                if wl is None or (
                    not job.spec.suspend
                    and wl.metadata.uid not in self.admitted
                    and job.metadata.uid not in held
                ):
                    todo.append(job)
                if wl is not None and (why := self._mismatch(job, wl)):
                    self._to_replace[wl.key] = why  # replaced (evicted first if admitted): _replace
            elif (wl := self._owned_workload(job.metadata.uid or "")) is not None and not wl.status.is_true(
                FINISHED
            ):
                finished.append((wl, succeeded, job))
        if len(todo) > self.jobs_per_sync:  # the rest in the next sync (finishes are never held back)
            self._dirty_jobs.update(dict.fromkeys(j.key for j in todo[self.jobs_per_sync :]))
            todo = todo[: self.jobs_per_sync]
            self._wake.set()

        async def sync(job: Job) -> None:
            wl = self._owned_workload(job.metadata.uid or "")
            uid = wl.metadata.uid if wl is not None else None
            if (
                not job.spec.suspend
                and (uid is None or uid not in self.admitted)
                and job.metadata.uid not in held
            ):
                await self._suspend(job, "not admitted by queueing: suspended until its Workload is admitted")
            if wl is None:
                try:
                    want = BatchJob(job, self.config.accept_kueue_labels).workload(wpcs, pcs)
                except WorkloadError as e:
                    await self.events.emit(job, "Warning", "InvalidJob", str(e))
                    return
                if want is not None:
                    await self._create_workload(want)

        # each Job on its own (the writes of one never wait for another's); the finished ones' ledger
        # release is tried even when a write for another Job failed (and the other way round: a
        # ledger outage does not keep new Jobs from getting their Workloads); the first error is
        # raised after both
        failed: list[Exception] = []
        steps: tuple[Callable[[], Awaitable[None]], ...] = (
            lambda: each(todo, sync, limit=self.write_concurrency),
            lambda: self._finish_all(finished),
        )
        for step in steps:
            try:
                await step()
            except Exception as e:
                failed.append(e)
        if failed:
            raise failed[0]

    def _mismatch(self, job: Job, wl: Workload) -> str | None:
        """Why a Job's Workload no longer matches it (its pod sets' names and counts, as Kueue's
        jobframework compares them), or None. A Job that makes no valid Workload is left to ``sync``."""
        if wl.metadata.deletion_timestamp or wl.status.is_true(FINISHED):
            return None
        try:
            count, min_count = job_counts(job)  # cheap: no Workload is built for the comparison
        except WorkloadError:
            return None

        have = [(p.name, p.count, p.min_count) for p in wl.spec.pod_sets]
        should = [("main", count, min_count)]
        if have == should:
            return None

        def text(shape: list[tuple[str, int, int | None]]) -> str:
            return ", ".join(
                f"{n}: count {c}" + (f" minCount {m}" if m is not None else "") for n, c, m in shape
            )

        return f"Workload {wl.key} no longer matches Job {job.key} (podSets {text(have)}; the Job: {text(should)})"

    async def _sync_pod_groups(self) -> None:
        """A pod group becomes one Workload once all its pods exist; it finishes when they all ended."""
        wpcs = {w.name: w.value for w in self.workload_priority_classes.list()}
        pcs = {p.name: p.value for p in self.priority_classes.list()}
        for (ns, name), pods in sorted(self._groups().items()):
            group = PodGroup(ns, name, pods)
            wl = self.workloads.get(group.workload_name, ns)
            if wl is not None:
                if wl.status.is_true(FINISHED) or wl.metadata.uid not in self.admitted:
                    continue
                done, succeeded = group.finished()
                if done:
                    await self._finish(wl, succeeded, None)
                continue
            if not group.complete():
                continue  # admitted only when all its pods exist
            try:
                want = group.workload(wpcs, pcs)
            except WorkloadError as e:
                await self.events.emit(group.object, "Warning", "InvalidPodGroup", str(e))
                continue
            if want is not None:
                await self._create_workload(want)

    async def _finish_all(self, finished: list[tuple[Workload, bool, Job | None]]) -> None:
        """Finished workloads: their quota released in the ledger in one transaction (one by one
        when the batch is refused, e.g. one of them holds no admission), then their statuses side by
        side."""
        if len(finished) < 2:
            for wl, succeeded, job in finished:
                await self._finish(wl, succeeded, job)
            return
        now = self.clock()
        items = [
            (wl.metadata.uid or "", "Succeeded" if ok else "Failed", FINISHED_STATE) for wl, ok, _ in finished
        ]
        try:
            await self.ledger.release_many(items, at=now)
        except LedgerError:
            for wl, succeeded, job in finished:
                await self._finish(wl, succeeded, job)
            return
        for _ in finished:
            fault_point("finish.after_ledger")
        await each(finished, lambda f: self._finish(*f, released=True), limit=self.write_concurrency)

    async def _finish(
        self, wl: Workload, succeeded: bool, job: Job | None, *, released: bool = False
    ) -> None:
        uid = wl.metadata.uid or ""
        now = self.clock()
        if not released:
            with contextlib.suppress(NotAdmitted):
                await self.ledger.finish(uid, at=now, reason="Succeeded" if succeeded else "Failed")
                fault_point("finish.after_ledger")
        self._hold_released(uid)
        self.records.release(uid)  # all but the devices held
        reason = "Succeeded" if succeeded else "Failed"
        msg = "Job finished successfully" if succeeded else "Job failed"
        conds = with_condition(
            wl.status.conditions, FINISHED, "True", reason, msg, now, wl.metadata.generation
        )
        await self._patch_status(wl, {"conditions": _dump(conds), "reason": None})
        self.stats.finished += 1
        fault_point("finish.after_status")
        await self.events.emit(wl, "Normal", "Finished", f"{msg}; quota released")

    async def _forget_deleted(self) -> None:
        """Admissions whose Workload is gone are released (ledger first), except while the Workload's
        Job runs on: the Workload it gets next takes the admission over (:meth:`_adopt_orphans`)."""
        present = self._wl_uids
        for uid in [u for u in self.admitted if u not in present] + [
            u for u in self._orphans if u not in self.admitted
        ]:
            o = self._orphans.get(uid)
            if o is not None and self._job_alive(o.owner_key, o.owner_uid) is not None:
                continue
            self._orphans.pop(uid, None)
            with contextlib.suppress(NotAdmitted):
                await self.ledger.release(
                    uid, at=self.clock(), reason="WorkloadDeleted", final_state="deleted"
                )
            self._hold_released(uid)
            self.records.release(uid)  # all but the devices held

    async def _adopt_orphans(self) -> None:
        """A Workload recreated for the Job of a deleted admitted one is the same admission (the ledger
        still holds it open for that Job): the ledger hands it over, the controller's record moves to
        the new UID and the new Workload's status is written from the ledger's plan. The Job is
        neither suspended nor restarted."""
        for uid, o in sorted(self._orphans.items()):
            wl = self._owned_workload(o.owner_uid)
            if (
                wl is None
                or wl.metadata.uid in (None, "", uid)
                or wl.status.is_true(FINISHED)
                or wl.metadata.deletion_timestamp
            ):
                continue
            new_uid = wl.metadata.uid or ""
            now = self.clock()
            try:
                await self.ledger.transfer_admission(uid, self._ledger_workload(wl), at=now)
            except NotAdmitted:
                self._orphans.pop(uid, None)  # released meanwhile: the new Workload queues as any other
                continue
            del self._orphans[uid]
            old = self.records.by_uid.pop(uid, None)
            self._recorded.pop(uid, None)
            self._recorded[new_uid] = now
            try:
                self.admitted[new_uid] = self._admitted_from(
                    wl, o.admission, old.admitted.admission_time if old and old.admitted else now
                )
            except FromApiError as e:
                log.warning("cannot rebuild the admission of %s: %s", wl.key, e)
            self.admissions[new_uid] = o.admission
            if old is not None and old.pods_ready_seen:
                self.pods_ready_seen.add(new_uid)
            if old is not None and old.evicting is not None:
                self.evicting[new_uid] = dataclasses.replace(old.evicting, uid=new_uid, key=wl.key)
            self.status_todo.add(new_uid)  # written by _write_pending_status
            msg = (
                f"takes over the admission of the deleted Workload {o.key} (UID: {uid}) of Job "
                f"{o.owner_key}: its Job runs on"
            )
            log.info("Workload %s %s", wl.key, msg)
            await self.events.emit(wl, "Normal", "AdmissionTakenOver", msg)
