"""The workload source: a labelled object of an integrated kind held by suspend (a batch/v1 Job,
RayJob, RayCluster, JobSet: queueing/integrations/registry.py), or a complete pod group, gets its
Workload; one running without admission is suspended; when it or the group ends its quota is released
(ledger first) and the Workload is marked Finished; an admission whose Workload is gone is released.
A Job owned by another integrated kind (a JobSet's child Jobs) is that object's, not queued itself."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Awaitable, Callable

from queueing.api.apps import LeaderWorkerSet, StatefulSet
from queueing.api.base import KubeObject
from queueing.api.core import Pod
from queueing.api.v1beta1 import (
    FINISHED,
    POD_GROUP_LABEL,
    Workload,
)
from queueing.controller.base import (
    KindSource,
    WantedWorkload,
    _dump,
    log,
)
from queueing.controller.binding import PlanBinding
from queueing.controller.plan import (
    with_condition,
)
from queueing.dra.verify import VerifyError
from queueing.faults import fault_point
from queueing.integrations import BatchJob, PodGroup, SuspendableJob
from queueing.integrations.pod_kinds import finished_without_pods, group_for, membership_of
from queueing.integrations.podgated import gated
from queueing.kube.client import PODS
from queueing.kube.writes import each, is_not_found
from queueing.ledger.models import FINISHED as FINISHED_STATE
from queueing.ledger.repository import LedgerError, NotAdmitted
from queueing.scheduling.from_api import FromApiError
from queueing.scheduling.jobs import WorkloadError, job_counts


class WorkloadSource(PlanBinding):
    async def _sync_jobs(self, *, new: bool = True) -> None:
        """Per integrated kind held by suspend whose informer is running: the objects whose delta
        arrived (or whose Workload's, or whose admission changed) since the last sync; every object
        after a start or a resync. One kind's failure does not keep the others from their sync.

        ``new=False`` (the sync's first pass, before the cycle): only the objects that ended, whose
        quota is released now; those that need a Workload or a suspension keep their place for the
        pass after the cycle (``new=True``)."""
        failed: list[Exception] = []
        for src in self.sources.values():
            if not src.ready:
                continue
            try:
                await self._sync_source(src, new=new)
            except Exception as e:
                failed.append(e)
        if failed:
            raise failed[0]

    async def _sync_source(self, src: KindSource, *, new: bool = True) -> None:
        if src.all_dirty:
            src.all_dirty = False
            src.dirty.clear()
            keys = src.informer.keys()
        else:
            keys = list(src.dirty)
            src.dirty.clear()
        try:
            later = await self._sync_these(src, keys, new=new)
        except BaseException:
            _requeue_first(src.dirty, keys)  # looked at again at the next sync
            raise
        _requeue_first(src.dirty, later)

    def _owned_workload(self, owner_uid: str) -> Workload | None:
        key = self._owned.get(owner_uid)
        return self.workloads.get_key(key) if key is not None else None

    def _has_integrated_owner(self, obj: KubeObject) -> bool:
        """Its controller is an object of an integrated kind (a JobSet's Job): queued through it."""
        return any(
            o.controller and self._source_for(o.api_version, o.kind) is not None
            for o in obj.metadata.owner_references or []
        )

    async def _sync_these(self, src: KindSource, keys: list[str], *, new: bool = True) -> list[str]:
        """The objects ``keys`` synced; returns the keys left for a later pass (not ``new``: those
        that need a write other than their finish; beyond ``jobs_per_sync``: the rest)."""
        wpcs = {w.name: w.value for w in self.workload_priority_classes.list()}
        pcs = {p.name: p.value for p in self.priority_classes.list()}
        accept = self.config.accept_kueue_labels
        kind = src.kind

        finished: list[tuple[Workload, bool, KubeObject | None]] = []
        todo: list[KubeObject] = []  # objects not finished that need a write (see ``sync``)
        # objects whose deleted Workload's admission waits for the Workload they get next: they run on
        held = {o.owner_uid for o in self._orphans.values()}
        for obj in [o for k in keys if (o := src.informer.get_key(k)) is not None]:
            if obj.metadata.deletion_timestamp or self._has_integrated_owner(obj):
                continue
            adapter = src.integration.adapt(obj, accept)
            done, succeeded = adapter.finished()
            if not done:
                wl = self._owned_workload(obj.metadata.uid or "")
                if wl is None or (
                    not adapter.is_suspended()
                    and wl.metadata.uid not in self.admitted
                    and obj.metadata.uid not in held
                ):
                    todo.append(obj)
                if wl is not None and (why := self._mismatch(adapter, wl)):
                    self._to_replace[wl.key] = why  # replaced (evicted first if admitted): _replace
            elif (wl := self._owned_workload(obj.metadata.uid or "")) is not None and not wl.status.is_true(
                FINISHED
            ):
                finished.append((wl, succeeded, obj))
        later: list[str] = []
        if not new:  # the finishes now; the rest after the cycle
            later, todo = [o.key for o in todo], []
        elif len(todo) > self.jobs_per_sync:  # the rest in the next sync (finishes are never held back)
            # the highest priority first, arrival order among equals: a burst of new low-priority
            # objects must not hold a high-priority one's Workload back for several syncs (it would
            # miss the turns its queue's quota comes free in)
            prio = self._wanted_workloads(src, todo, wpcs, pcs)
            todo.sort(key=lambda o: -prio[o.metadata.uid or ""])
            later = [o.key for o in todo[self.jobs_per_sync :]]
            todo = todo[: self.jobs_per_sync]
            self._wake.set()

        async def sync(obj: KubeObject) -> None:
            now = src.informer.get_key(obj.key)
            if now is None or now.metadata.uid != obj.metadata.uid or now.metadata.deletion_timestamp:
                # its deletion came in since the list above (the writes before this one waited): no
                # Workload for an object that is gone (it would outlive it: its owner no longer exists)
                return
            adapter = src.integration.adapt(obj, accept)
            wl = self._owned_workload(obj.metadata.uid or "")
            uid = wl.metadata.uid if wl is not None else None
            if (
                not adapter.is_suspended()
                and (uid is None or uid not in self.admitted)
                and obj.metadata.uid not in held
            ):
                await self._suspend(
                    adapter, "not admitted by queueing: suspended until its Workload is admitted"
                )
            if wl is None:
                try:
                    want = self._wanted_workload(adapter, obj, wpcs, pcs)
                except WorkloadError as e:
                    await self.events.emit(adapter.object, "Warning", f"Invalid{kind}", str(e))
                    return
                if want is not None:
                    await self._create_workload(want)

        # each object on its own (the writes of one never wait for another's); the finished ones'
        # ledger release is tried even when a write for another failed (and the other way round: a
        # ledger outage does not keep new objects from getting their Workloads); the first error is
        # raised after both
        failed: list[Exception] = []
        steps: tuple[Callable[[], Awaitable[None]], ...] = (
            lambda: self._finish_all(finished),  # first: quota released before anything else waits
            lambda: each(todo, sync, limit=self.write_concurrency),
        )
        for step in steps:
            try:
                await step()
            except Exception as e:
                failed.append(e)
        if failed:
            raise failed[0]
        return later

    def _wanted_workloads(
        self, src: KindSource, objs: list[KubeObject], wpcs: dict[str, int], pcs: dict[str, int]
    ) -> dict[str, int]:
        """The priority of each object's Workload (UID -> priority; 0 when it has none or its spec is
        invalid): the one it has, else the one it would get, built once per object version (kept in
        ``_wanted`` for its creation, see :meth:`_wanted_workload`)."""
        accept = self.config.accept_kueue_labels
        kept: dict[str, WantedWorkload] = {}
        out: dict[str, int] = {}
        for obj in objs:
            uid = obj.metadata.uid or ""
            have = self._owned_workload(uid)
            if have is not None:
                out[uid] = have.spec.priority or 0
                continue
            hit = self._wanted.get(uid)
            if hit is None or not hit.holds_for(obj, (wpcs, pcs)):
                hit = WantedWorkload.build(src.integration.adapt(obj, accept), obj, (wpcs, pcs))
            kept[uid] = hit
            out[uid] = hit.priority()
        self._wanted = kept  # only the objects still waiting for their Workload
        return out

    def _wanted_workload(
        self, adapter: SuspendableJob, obj: KubeObject, wpcs: dict[str, int], pcs: dict[str, int]
    ) -> Workload | None:
        """The Workload to create for ``obj``: the one :meth:`_wanted_workloads` built for this version
        of it with these priority classes, else built now (verify mode builds it again and compares);
        raises ``WorkloadError`` for an invalid object."""
        hit = self._wanted.pop(obj.metadata.uid or "", None)
        if hit is None or not hit.holds_for(obj, (wpcs, pcs)):
            return adapter.workload(wpcs, pcs)
        if self.verify:
            fresh = WantedWorkload.build(adapter, obj, (wpcs, pcs)).workload
            kept = hit.workload
            errors = isinstance(fresh, WorkloadError) or isinstance(kept, WorkloadError)
            if (str(fresh) != str(kept)) if errors else fresh != kept:
                raise VerifyError(f"the Workload built before for {obj.key}", kept, fresh)
        if isinstance(hit.workload, WorkloadError):
            raise hit.workload
        return hit.workload

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
        out: StatefulSet | None = self._gated_object("StatefulSet", namespace, name)
        return out

    def _leaderworkerset(self, namespace: str, name: str) -> LeaderWorkerSet | None:
        out: LeaderWorkerSet | None = self._gated_object("LeaderWorkerSet", namespace, name)
        return out

    def _group(self, ns: str, name: str, pods: list[Pod]) -> PodGroup:
        return group_for(ns, name, pods, self._statefulset, self._leaderworkerset)

    def _mismatch(self, job: SuspendableJob, wl: Workload) -> str | None:
        """Why an object's Workload no longer matches it (its pod sets' names and counts, as Kueue's
        jobframework compares them), or None. One that makes no valid Workload is left to ``sync``."""
        if wl.metadata.deletion_timestamp or wl.status.is_true(FINISHED):
            return None
        try:
            if isinstance(job, BatchJob):  # cheap: no Workload is built for the comparison
                count, min_count = job_counts(job.job)
                should = [("main", count, min_count)]
            else:
                should = [(p.name, p.count, p.min_count) for p in job.pod_sets()]
        except WorkloadError:
            return None

        have = [(p.name, p.count, p.min_count) for p in wl.spec.pod_sets]
        if have == should:
            return None

        def text(shape: list[tuple[str, int, int | None]]) -> str:
            return ", ".join(
                f"{n}: count {c}" + (f" minCount {m}" if m is not None else "") for n, c, m in shape
            )

        what = job.object.kind or "Job"
        return (
            f"Workload {wl.key} no longer matches {what} {job.key} "
            f"(podSets {text(have)}; the {what}: {text(should)})"
        )

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
            wl = self._workload_by_uid(uid)
            if wl is None or uid in self.evicting or wl.status.is_true(FINISHED):
                continue
            if (wl.namespace or "default", wl.labels.get(POD_GROUP_LABEL, "")) in groups:
                continue
            owner = next((o for o in wl.metadata.owner_references or [] if o.controller), None)
            if (
                owner is None
                or (obj := self._gated_object(owner.kind, wl.namespace or "", owner.name)) is None
            ):
                continue
            ended = finished_without_pods(wl, obj if obj.metadata.uid == owner.uid else None)
            if ended is not None and ended[0]:
                await self._finish(wl, ended[1], None)

    async def _finish_all(self, finished: list[tuple[Workload, bool, KubeObject | None]]) -> None:
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
        self, wl: Workload, succeeded: bool, job: KubeObject | None, *, released: bool = False
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
        what = job.kind if job is not None and job.kind else "Job"
        msg = f"{what} finished successfully" if succeeded else f"{what} failed"
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


def _requeue_first(dirty: dict[str, None], keys: list[str]) -> None:
    """``keys`` back into an ordered set of keys to look at, ahead of those that came meanwhile (in
    place: the informers' deltas add to the same dict)."""
    if not keys:
        return
    rest = list(dirty)
    dirty.clear()
    dirty.update(dict.fromkeys(keys))
    dirty.update(dict.fromkeys(rest))
