"""The workload source: a labelled Job (or a complete pod group) gets its Workload, a Job running
without admission is suspended, and when the Job or the group ends its quota is released (ledger
first) and the Workload is marked Finished; an admission whose Workload is gone is released."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable

from queueing.api.apps import StatefulSet
from queueing.api.core import Job, Pod
from queueing.api.v1beta1 import (
    FINISHED,
    Workload,
)
from queueing.controller.base import (
    _dump,
)
from queueing.controller.binding import PlanBinding
from queueing.controller.plan import (
    POD_GROUP_LABEL,
    with_condition,
)
from queueing.faults import fault_point
from queueing.integrations import BatchJob, PodGroup
from queueing.integrations.pod_kinds import group_for, membership_of
from queueing.integrations.podgated import gated
from queueing.integrations.statefulset import KIND as STATEFULSET_KIND
from queueing.integrations.statefulset import StatefulSetGroup
from queueing.kube.client import PODS
from queueing.kube.writes import each, is_not_found
from queueing.ledger.models import FINISHED as FINISHED_STATE
from queueing.ledger.repository import LedgerError, NotAdmitted
from queueing.scheduling.jobs import WorkloadError


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
        for job in [j for k in keys if (j := self.jobs.get_key(k)) is not None]:
            if job.metadata.deletion_timestamp:
                continue
            done, succeeded = BatchJob(job).finished()
            if not done:
                wl = self._owned_workload(job.metadata.uid or "")
                if wl is None or (not job.spec.suspend and wl.metadata.uid not in self.admitted):
                    todo.append(job)
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
            if not job.spec.suspend and (uid is None or uid not in self.admitted):
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

    async def _group_gated_pods(self) -> None:
        """The gated pods of the pod-gated kinds (StatefulSet, Deployment, LeaderWorkerSet) join their
        group: labelled with its name, pod set and size (queueing/integrations/podgated.py), as
        Kueue's reconcilers label them. A pod whose object is not known yet waits for it; a pod with
        unreadable labels gets a Warning Event naming the field."""
        for pod in self.queued_pods.list():
            if pod.metadata.deletion_timestamp or not gated(pod) or POD_GROUP_LABEL in pod.labels:
                continue
            try:
                m = membership_of(pod, self._statefulset)
            except WorkloadError as e:
                await self.events.emit(pod, "Warning", "InvalidPodGroup", str(e))
                continue
            if m is None:
                continue
            try:
                raw = await self._patch(
                    PODS, pod.name, m.patch(), pod.namespace, what=f"group of Pod {pod.key}"
                )
            except Exception as e:
                if is_not_found(e):
                    continue
                raise
            self.group_pods.observe(raw)

    def _statefulset(self, namespace: str, name: str) -> StatefulSet | None:
        return self.statefulsets.get(name, namespace)

    def _group(self, ns: str, name: str, pods: list[Pod]) -> PodGroup:
        return group_for(ns, name, pods, self._statefulset)

    async def _sync_pod_groups(self) -> None:
        """A pod group becomes one Workload once all its pods exist; it finishes when its adapter says
        so (a plain pod group: all its pods ended; a StatefulSet: scaled down to 0; ...)."""
        wpcs = {w.name: w.value for w in self.workload_priority_classes.list()}
        pcs = {p.name: p.value for p in self.priority_classes.list()}
        groups = self._groups()
        for (ns, name), pods in sorted(groups.items()):
            group = self._group(ns, name, pods)
            wl = self.workloads.get(group.workload_name, ns)
            if wl is not None:
                if wl.status.is_true(FINISHED) or wl.metadata.uid not in self.admitted:
                    continue
                done, succeeded = group.finished()
                if done and wl.metadata.uid not in self.evicting:
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
        # a serving kind's admitted group whose pods are all gone: done when its object says so
        for uid in sorted(self.admitted):
            gone = self._workload_by_uid(uid)
            group_name = gone.labels.get(POD_GROUP_LABEL) if gone is not None else None
            if gone is None or not group_name or uid in self.evicting or gone.status.is_true(FINISHED):
                continue
            wl, name = gone, group_name
            if (wl.namespace or "default", name) in groups:
                continue
            owner = next((o for o in wl.metadata.owner_references or [] if o.controller), None)
            if owner is None or owner.kind != STATEFULSET_KIND:
                continue
            sts = self._statefulset(wl.namespace or "default", owner.name)
            done, succeeded = StatefulSetGroup(
                wl.namespace or "default",
                name,
                [],
                sts if sts is not None and sts.metadata.uid == owner.uid else None,
            ).finished()
            if done:
                await self._finish(wl, succeeded, None)

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
        present = self._wl_uids
        for uid in [u for u in self.admitted if u not in present]:
            with contextlib.suppress(NotAdmitted):
                await self.ledger.release(
                    uid, at=self.clock(), reason="WorkloadDeleted", final_state="deleted"
                )
            self._hold_released(uid)
            self.records.release(uid)  # all but the devices held
