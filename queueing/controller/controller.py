"""The controller: informers -> snapshot -> scheduling cycle -> executor (see docs/concepts.md).

One asyncio task runs :meth:`Controller.sync` whenever something it watches changed (every informer
handler wakes it; writes that failed are retried by waking it again after a backoff). A sync:

1. brings the ledger's queues in step with the ClusterQueues and LocalQueues;
2. Jobs: suspends a labelled Job running without admission, creates the Job's Workload, and on the
   Job's end releases the quota (ledger first) and marks the Workload Finished;
3. forgets admissions whose Workload is gone (ledger release);
4. runs one scheduling cycle over the pending Workloads and executes its admissions: **ledger first**
   (quota and plan in one transaction), then the Workload's status (QuotaReserved, Admitted,
   ``status.admission`` with the plan; retried until it holds); pending Workloads get their reason;
5. plan binding for admitted Workloads: the Job gets the placement gate (when needed), the planned
   node (when all its pods share one) and is unsuspended in one write; each gated pod gets its planned
   node (nodeSelector ``kubernetes.io/hostname``), its ResourceClaims get the planned allocation
   (``planBindingMode: Full``), and the gate is removed;
6. ClusterQueue and LocalQueue status (pending, reserving, admitted, flavors usage).

Decisions about admission come from the controller's own record (``admitted``: loaded from the
ledger and the Workloads at start, changed only after the ledger committed), never from a possibly
stale informer cache, so watch drops, 410s and conflicts cannot make it admit twice or miss one.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from queueing.api.base import KubeObject
from queueing.api.core import Job, Namespace, Node, Pod, PriorityClass
from queueing.api.resource import (
    DeviceClass,
    ResourceClaim,
    ResourceClaimSpec,
    ResourceClaimTemplate,
    ResourceSlice,
)
from queueing.api.v1beta1 import (
    ADMITTED,
    FINISHED,
    QUOTA_RESERVED,
    Admission,
    ClusterQueue,
    Cohort,
    LocalQueue,
    ResourceFlavor,
    Workload,
    WorkloadPriorityClass,
)
from queueing.config import Config
from queueing.controller.plan import (
    GATE_ADMISSION,
    GATE_PLACEMENT,
    HOSTNAME_LABEL,
    PLACEMENT_INDEX_ANNOTATION,
    POD_GROUP_LABEL,
    POD_GROUP_TOTAL_ANNOTATION,
    POD_SET_LABEL,
    WORKLOAD_UID_LABEL,
    DeviceIndex,
    allocation_for,
    is_implicit_claim,
    job_finished,
    ledger_request,
    needs_gate,
    plan_summary,
    pod_claim_name,
    with_condition,
)
from queueing.controller.queues import queue_statuses
from queueing.kube.client import (
    DEVICE_CLASSES,
    JOBS,
    NAMESPACES,
    NODES,
    PODS,
    PRIORITY_CLASSES,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    KubeClient,
    Resource,
    queueing_resource,
)
from queueing.kube.events import EventRecorder
from queueing.kube.informer import Informer
from queueing.kube.writes import is_already_exists, is_not_found, retrying
from queueing.ledger.reconcile import (
    ApplyAdmission,
    EvictAdmission,
    ObservedCluster,
    ObservedWorkload,
    RecordWorkload,
    RevokeAdmission,
    reconcile,
)
from queueing.ledger.recovery import apply_ledger_actions
from queueing.ledger.repository import AlreadyAdmitted, Ledger, LedgerError, NotAdmitted
from queueing.ledger.state import ClusterQueueSpec as LedgerClusterQueue
from queueing.ledger.state import LocalQueueSpec as LedgerLocalQueue
from queueing.ledger.state import QuotaSpec
from queueing.ledger.state import WorkloadSpec as LedgerWorkload
from queueing.scheduling.cycle import Admission as CycleAdmission
from queueing.scheduling.cycle import PendingReason, run_cycle
from queueing.scheduling.dra_placer import DraPlacer
from queueing.scheduling.from_api import (
    ApiContext,
    FromApiError,
    admission_status,
    admitted_workload,
    queue_specs,
    workload_info,
)
from queueing.scheduling.jobs import QUEUE_NAME_LABEL, WorkloadError, workload_for_job, workload_for_pod_group
from queueing.scheduling.snapshot import AdmittedWorkload, ClusterSnapshot, WorkloadInfo

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

log = logging.getLogger("queueing.controller")

WORKLOADS = queueing_resource("workloads", "Workload", True)
CLUSTER_QUEUES = queueing_resource("clusterqueues", "ClusterQueue", False)
LOCAL_QUEUES = queueing_resource("localqueues", "LocalQueue", True)
COHORTS = queueing_resource("cohorts", "Cohort", False)
RESOURCE_FLAVORS = queueing_resource("resourceflavors", "ResourceFlavor", False)
WORKLOAD_PRIORITY_CLASSES = queueing_resource("workloadpriorityclasses", "WorkloadPriorityClass", False)

REASON_MAX = 316


def _epoch(ts: str | None) -> float:
    if not ts:
        return 0.0
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


@dataclass
class ControllerStats:
    syncs: int = 0
    cycles: int = 0
    admissions: int = 0
    finished: int = 0
    suspended: int = 0
    workloads_created: int = 0
    pods_ungated: int = 0
    claims_allocated: int = 0
    errors: int = 0


class Controller:
    """``await c.start()`` (informers synced, ledger recovered, loop running) ... ``await c.stop()``."""

    def __init__(
        self,
        kube: KubeClient,
        ledger: Ledger,
        config: Config | None = None,
        *,
        clock: Callable[[], float] = time.time,
        component: str = "queueing-controller",
        retry_backoff: float = 0.2,
        queue_status_period: float = 1.0,
    ) -> None:
        self.kube = kube
        self.ledger = ledger
        self.config = config or Config()
        self.clock = clock
        self.full = self.config.plan_binding_mode == "Full"
        self.events = EventRecorder(kube, component)
        self.retry_backoff = retry_backoff
        # ClusterQueue/LocalQueue status is written at most once per period (a burst of admissions
        # costs one write per queue); the last change is always written
        self.queue_status_period = queue_status_period
        self._queue_status_at = -1e18
        self._queue_status_handle: asyncio.TimerHandle | None = None
        self.stats = ControllerStats()

        def inf(res: Resource, model: type[Any], **kw: Any) -> Informer[Any]:
            i: Informer[Any] = Informer(kube, res, model, **kw)
            i.add_handler(self._on_change)
            return i

        self.flavors: Informer[ResourceFlavor] = inf(RESOURCE_FLAVORS, ResourceFlavor)
        self.cohorts: Informer[Cohort] = inf(COHORTS, Cohort)
        self.cluster_queues: Informer[ClusterQueue] = inf(CLUSTER_QUEUES, ClusterQueue)
        self.local_queues: Informer[LocalQueue] = inf(LOCAL_QUEUES, LocalQueue)
        self.workloads: Informer[Workload] = inf(WORKLOADS, Workload)
        self.workload_priority_classes: Informer[WorkloadPriorityClass] = inf(
            WORKLOAD_PRIORITY_CLASSES, WorkloadPriorityClass
        )
        self.jobs: Informer[Job] = inf(JOBS, Job, label_selector=QUEUE_NAME_LABEL)
        self.pods: Informer[Pod] = inf(PODS, Pod, label_selector=WORKLOAD_UID_LABEL)
        self.group_pods: Informer[Pod] = inf(PODS, Pod, label_selector=POD_GROUP_LABEL)
        self.nodes: Informer[Node] = inf(NODES, Node)
        self.slices: Informer[ResourceSlice] = inf(RESOURCE_SLICES, ResourceSlice)
        self.device_classes: Informer[DeviceClass] = inf(DEVICE_CLASSES, DeviceClass)
        self.claims: Informer[ResourceClaim] = inf(RESOURCE_CLAIMS, ResourceClaim)
        self.templates: Informer[ResourceClaimTemplate] = inf(RESOURCE_CLAIM_TEMPLATES, ResourceClaimTemplate)
        self.priority_classes: Informer[PriorityClass] = inf(PRIORITY_CLASSES, PriorityClass)
        self.namespaces: Informer[Namespace] = inf(NAMESPACES, Namespace)
        self.informers: list[Informer[Any]] = [
            self.flavors,
            self.cohorts,
            self.cluster_queues,
            self.local_queues,
            self.workloads,
            self.workload_priority_classes,
            self.jobs,
            self.pods,
            self.group_pods,
            self.nodes,
            self.slices,
            self.device_classes,
            self.claims,
            self.templates,
            self.priority_classes,
            self.namespaces,
        ]

        # the controller's own record (mirrors the ledger's active admissions): uid -> admitted workload
        self.admitted: dict[str, AdmittedWorkload] = {}
        self.admissions: dict[str, Admission] = {}  # uid -> status.admission (the plan)
        self.status_todo: set[str] = set()  # admitted in the ledger, status write not confirmed yet
        self.pending_reasons: dict[str, PendingReason] = {}  # workload key -> last reason
        self.inactive_cluster_queues: dict[str, str] = {}
        self._recorded: set[str] = set()  # workload UIDs the ledger knows
        self._ledger_cqs: dict[str, LedgerClusterQueue] = {}
        self._ledger_lqs: dict[tuple[str, str], LedgerLocalQueue] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._retry_handle: asyncio.TimerHandle | None = None
        self._started = False
        self.synced = asyncio.Event()  # set after every completed sync (tests wait on conditions)

    # ------------------------------------------------------------------ lifecycle
    def _on_change(self, old: KubeObject | None, new: KubeObject | None) -> None:
        self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    async def start(self, timeout: float = 60.0) -> None:
        for i in self.informers:
            i.start()
        await asyncio.gather(*(i.wait_synced(timeout) for i in self.informers))
        await self._sync_ledger_queues()
        await self.recover()
        self._started = True
        self._task = asyncio.create_task(self._loop(), name="queueing-controller")
        self._wake.set()

    async def stop(self) -> None:
        for h in (self._retry_handle, self._queue_status_handle):
            if h is not None:
                h.cancel()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for i in self.informers:
            await i.stop()

    async def _loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self.sync()
            except asyncio.CancelledError:
                raise
            except Exception:
                self.stats.errors += 1
                log.exception("sync failed; retrying")
                self._retry_later()
            self.synced.set()

    def _retry_later(self) -> None:
        if self._retry_handle is None or self._retry_handle.cancelled():
            loop = asyncio.get_running_loop()

            def fire() -> None:
                self._retry_handle = None
                self._wake.set()

            self._retry_handle = loop.call_later(self.retry_backoff, fire)

    # ------------------------------------------------------------------ recovery
    def _observe(self, wl: Workload) -> ObservedWorkload:
        st = wl.status
        uid = wl.metadata.uid or ""
        ns = wl.namespace or "default"
        if st.is_true(FINISHED):
            phase = "finished"
        elif st.is_true(QUOTA_RESERVED) and st.admission is not None:
            phase = "admitted"
        else:
            phase = "pending"
        cq = st.admission.cluster_queue if st.admission is not None else None
        return ObservedWorkload(uid, ns, wl.name, phase, cq)  # type: ignore[arg-type]

    async def recover(self) -> None:
        """Rebuild the admission record from the ledger and the Workloads; reconcile the two."""
        state = await self.ledger.load_state()
        now = self.clock()
        observed = {w.metadata.uid: self._observe(w) for w in self.workloads.list() if w.metadata.uid}
        actions = reconcile(
            state.admissions,
            state.pending,
            ObservedCluster(observed, frozenset(n.name for n in self.nodes.list())),
        )
        rest = await apply_ledger_actions(self.ledger, actions, at=now)
        by_uid = {w.metadata.uid: w for w in self.workloads.list() if w.metadata.uid}
        revoked: set[str] = set()
        for a in rest:
            if isinstance(a, ApplyAdmission):
                # the ledger committed but the Workload never showed it: give the quota back and let the
                # next cycle admit it again (with a fresh plan for the cluster as it is now)
                with contextlib.suppress(NotAdmitted):
                    await self.ledger.release(
                        a.workload_uid, at=now, reason="Recovered", final_state="pending"
                    )
            elif isinstance(a, RevokeAdmission | EvictAdmission):
                revoked.add(a.workload_uid)
                wl = by_uid.get(a.workload_uid)
                if wl is not None:
                    await self._revoke(wl, "the ledger holds no admission for it")
            elif isinstance(a, RecordWorkload):
                wl = by_uid.get(a.workload_uid)
                if wl is not None:
                    await self._record(wl)
        state = await self.ledger.load_state()
        self._recorded = set(state.admissions) | set(state.pending)
        ctx = self._context()
        for uid, _adm in state.admissions.items():
            wl = by_uid.get(uid)
            if wl is None or uid in revoked or wl.status.admission is None:
                continue
            try:
                self.admitted[uid] = admitted_workload(
                    wl,
                    ctx,
                    admission_time=_epoch(_cond_time(wl, QUOTA_RESERVED)),
                    creation_time=_epoch(wl.metadata.creation_timestamp),
                )
                self.admissions[uid] = wl.status.admission
            except FromApiError as e:
                log.warning("cannot rebuild the admission of %s: %s", wl.key, e)
        log.info("recovered %d admissions from the ledger", len(self.admitted))

    async def _revoke(self, wl: Workload, why: str) -> None:
        now = self.clock()
        conds = with_condition(wl.status.conditions, QUOTA_RESERVED, "False", "Revoked", why, now)
        conds = with_condition(conds, ADMITTED, "False", "Revoked", why, now)
        await self._patch_status(wl, {"conditions": _dump(conds), "admission": None, "reason": "Revoked"})
        job = self._job_of(wl)
        if job is not None and not job.spec.suspend:
            await self._suspend(job, f"admission revoked: {why}")

    # ------------------------------------------------------------------ one sync
    async def sync(self) -> None:
        self.stats.syncs += 1
        await self._sync_ledger_queues()
        await self._sync_jobs()
        await self._sync_pod_groups()
        await self._forget_deleted()
        await self._write_pending_status()
        await self._schedule()
        await self._bind()
        await self._queue_status()

    # ---- queues in the ledger
    async def _sync_ledger_queues(self) -> None:
        now = self.clock()
        for cq in self.cluster_queues.list():
            spec = LedgerClusterQueue(
                cq.name,
                tuple(
                    QuotaSpec(fq.name, r.name, r.nominal_quota, r.borrowing_limit, r.lending_limit)
                    for g in cq.spec.resource_groups or []
                    for fq in g.flavors
                    for r in fq.resources
                ),
                cohort=cq.spec.cohort_name or None,
                **(
                    {"fair_sharing_weight": cq.spec.fair_sharing.weight}
                    if cq.spec.fair_sharing is not None and cq.spec.fair_sharing.weight is not None
                    else {}
                ),
            )
            if self._ledger_cqs.get(cq.name) != spec:
                await self.ledger.upsert_cluster_queue(spec, at=now)
                self._ledger_cqs[cq.name] = spec
        for lq in self.local_queues.list():
            lspec = LedgerLocalQueue(lq.namespace or "default", lq.name, lq.spec.cluster_queue)
            key = (lspec.namespace, lspec.name)
            if self._ledger_lqs.get(key) != lspec:
                await self.ledger.upsert_local_queue(lspec, at=now)
                self._ledger_lqs[key] = lspec

    async def _record(self, wl: Workload) -> None:
        uid = wl.metadata.uid or ""
        if uid in self._recorded:
            return
        await self.ledger.add_workload(
            LedgerWorkload(
                uid,
                wl.namespace or "default",
                wl.name,
                wl.spec.queue_name or "",
                wl.spec.priority or 0,
                {
                    "podSets": [
                        {"name": p.name, "count": p.count, "minCount": p.min_count} for p in wl.spec.pod_sets
                    ]
                },
            ),
            at=self.clock(),
        )
        self._recorded.add(uid)

    # ---- Jobs
    def _workloads_by_owner(self) -> dict[str, Workload]:
        out: dict[str, Workload] = {}
        for wl in self.workloads.list():
            for o in wl.metadata.owner_references or []:
                if o.controller:
                    out[o.uid] = wl
        return out

    def _job_of(self, wl: Workload) -> Job | None:
        for o in wl.metadata.owner_references or []:
            if o.controller and o.kind == "Job":
                job = self.jobs.get(o.name, wl.namespace)
                if job is not None and job.metadata.uid == o.uid:
                    return job
        return None

    async def _sync_jobs(self) -> None:
        owned = self._workloads_by_owner()
        wpcs = {w.name: w.value for w in self.workload_priority_classes.list()}
        pcs = {p.name: p.value for p in self.priority_classes.list()}
        for job in self.jobs.list():
            if job.metadata.deletion_timestamp:
                continue
            wl = owned.get(job.metadata.uid or "")
            uid = wl.metadata.uid if wl is not None else None
            done, succeeded = job_finished(job)
            if done:
                if wl is not None and not wl.status.is_true(FINISHED):
                    await self._finish(wl, succeeded, job)
                continue
            if not job.spec.suspend and (uid is None or uid not in self.admitted):
                await self._suspend(job, "not admitted by queueing: suspended until its Workload is admitted")
            if wl is None:
                try:
                    want = workload_for_job(job, wpcs, pcs)
                except WorkloadError as e:
                    await self.events.emit(job, "Warning", "InvalidJob", str(e))
                    continue
                if want is None:
                    continue
                await self._create_workload(want)

    # ---- pod groups
    def _groups(self) -> dict[tuple[str, str], list[Pod]]:
        out: dict[tuple[str, str], list[Pod]] = {}
        for p in self.group_pods.list():
            if p.metadata.deletion_timestamp:
                continue
            out.setdefault((p.namespace or "default", p.labels.get(POD_GROUP_LABEL, "")), []).append(p)
        return out

    async def _sync_pod_groups(self) -> None:
        """A pod group becomes one Workload once all its pods exist; it finishes when they all ended."""
        wpcs = {w.name: w.value for w in self.workload_priority_classes.list()}
        pcs = {p.name: p.value for p in self.priority_classes.list()}
        for (ns, group), pods in sorted(self._groups().items()):
            wl = self.workloads.get(f"pod-group-{group}"[:253], ns)
            if wl is not None:
                if wl.status.is_true(FINISHED) or wl.metadata.uid not in self.admitted:
                    continue
                if len(pods) >= _total(pods[0]) and all(_ended(p) for p in pods):
                    await self._finish(wl, all(p.status.phase == "Succeeded" for p in pods), None)
                continue
            if len(pods) < _total(pods[0]):
                continue  # admitted only when all its pods exist
            try:
                await self._create_workload(workload_for_pod_group(pods, wpcs, pcs))
            except WorkloadError as e:
                await self.events.emit(pods[0], "Warning", "InvalidPodGroup", str(e))

    async def _suspend(self, job: Job, why: str) -> None:
        raw = await retrying(
            lambda: self.kube.patch(JOBS, job.name, {"spec": {"suspend": True}}, job.namespace),
            what=f"suspend Job {job.key}",
        )
        self.jobs.observe(raw)
        self.stats.suspended += 1
        log.info("suspended Job %s: %s", job.key, why)
        await self.events.emit(job, "Normal", "Suspended", why)

    async def _create_workload(self, wl: Workload) -> None:
        body = _without_nulls(wl.to_dict())
        try:
            raw = await retrying(
                lambda: self.kube.create(WORKLOADS, body, wl.namespace), what=f"create Workload {wl.key}"
            )
            self.stats.workloads_created += 1
        except Exception as e:
            if not is_already_exists(e):
                raise
            raw = await retrying(
                lambda: self.kube.get(WORKLOADS, wl.name, wl.namespace), what=f"get Workload {wl.key}"
            )
        self.workloads.observe(raw)

    async def _finish(self, wl: Workload, succeeded: bool, job: Job | None) -> None:
        uid = wl.metadata.uid or ""
        now = self.clock()
        with contextlib.suppress(NotAdmitted):
            await self.ledger.finish(uid, at=now, reason="Succeeded" if succeeded else "Failed")
        self.admitted.pop(uid, None)
        self.admissions.pop(uid, None)
        self.status_todo.discard(uid)
        reason = "Succeeded" if succeeded else "Failed"
        msg = "Job finished successfully" if succeeded else "Job failed"
        conds = with_condition(
            wl.status.conditions, FINISHED, "True", reason, msg, now, wl.metadata.generation
        )
        await self._patch_status(wl, {"conditions": _dump(conds), "reason": None})
        self.stats.finished += 1
        await self.events.emit(wl, "Normal", "Finished", f"{msg}; quota released")

    async def _forget_deleted(self) -> None:
        present = {w.metadata.uid for w in self.workloads.list()}
        for uid in [u for u in self.admitted if u not in present]:
            with contextlib.suppress(NotAdmitted):
                await self.ledger.release(
                    uid, at=self.clock(), reason="WorkloadDeleted", final_state="deleted"
                )
            self.admitted.pop(uid, None)
            self.admissions.pop(uid, None)
            self.status_todo.discard(uid)

    # ---- writes
    async def _patch(
        self,
        res: Resource,
        name: str,
        body: dict[str, Any],
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        patch_type: str = "merge",
        what: str,
    ) -> dict[str, Any]:
        async def call() -> dict[str, Any]:
            return await self.kube.patch(res, name, body, namespace, subresource, patch_type)

        return await retrying(call, what=what)

    async def _patch_status(self, wl: Workload, status: dict[str, Any]) -> Workload | None:
        try:
            raw = await retrying(
                lambda: self.kube.patch(
                    WORKLOADS, wl.name, {"status": status}, wl.namespace, subresource="status"
                ),
                what=f"status of Workload {wl.key}",
            )
        except Exception as e:
            if is_not_found(e):
                return None
            raise
        out: Workload | None = self.workloads.observe(raw)
        return out

    # ---- scheduling
    def _context(self) -> ApiContext:
        objs: list[KubeObject] = [
            *self.device_classes.list(),
            *self.templates.list(),
            *self.claims.list(),
            *self.workload_priority_classes.list(),
            *self.priority_classes.list(),
        ]
        return ApiContext.from_objects(objs)

    def _pending(self, ctx: ApiContext) -> tuple[list[WorkloadInfo], dict[str, Workload], dict[str, str]]:
        infos: list[WorkloadInfo] = []
        by_key: dict[str, Workload] = {}
        invalid: dict[str, str] = {}
        for wl in self.workloads.list():
            uid = wl.metadata.uid or ""
            if uid in self.admitted or wl.status.is_true(FINISHED) or wl.metadata.deletion_timestamp:
                continue
            if wl.status.is_true(QUOTA_RESERVED):
                continue  # admitted elsewhere (revoked at start if the ledger does not know it)
            by_key[wl.key] = wl
            try:
                infos.append(workload_info(wl, ctx, creation_time=_epoch(wl.metadata.creation_timestamp)))
            except FromApiError as e:
                invalid[wl.key] = str(e)
        return infos, by_key, invalid

    async def _schedule(self) -> None:
        ctx = self._context()
        pending, by_key, invalid = self._pending(ctx)
        specs = queue_specs(
            [
                *self.flavors.list(),
                *self.cluster_queues.list(),
                *self.cohorts.list(),
                *self.local_queues.list(),
                *self.namespaces.list(),
            ]
        )
        for key, msg in invalid.items():
            await self._set_pending(by_key[key], PendingReason(None, "Inadmissible", msg))
        if not pending:
            self.inactive_cluster_queues = {}
            return
        snapshot = ClusterSnapshot(
            cluster_queues=specs.cluster_queues,
            cohorts=specs.cohorts,
            local_queues=specs.local_queues,
            flavors=specs.flavors,
            pending=tuple(pending),
            admitted=tuple(self.admitted.values()),
            namespaces=specs.namespaces,
        )
        placer = DraPlacer(
            self.nodes.list(),
            self.slices.list(),
            self.device_classes.list(),
            claims=self.claims.list(),
            templates=self.templates.list(),
        )
        now = self.clock()
        result = run_cycle(snapshot, placer, now, self.config.scheduling())
        self.stats.cycles += 1
        self.inactive_cluster_queues = dict(result.inactive_cluster_queues)
        devices = DeviceIndex(self.slices.list())
        for adm in result.admissions:
            wl = by_key.get(adm.key)
            if wl is not None:
                await self._admit(wl, adm, now, devices)
        for plan in result.preemptions:  # executed by the eviction executor (issue 6)
            wl = by_key.get(plan.preemptor)
            if wl is not None:
                await self._set_pending(wl, PendingReason(plan.cluster_queue, "Preempting", plan.message))
        for key, reason in result.pending.items():
            wl = by_key.get(key)
            if wl is not None:
                await self._set_pending(wl, reason)

    def _claim_specs(self, wl: Workload) -> dict[str, ResourceClaimSpec]:
        ns = wl.namespace or "default"
        out: dict[str, ResourceClaimSpec] = {}
        for ps in wl.spec.pod_sets:
            for c in ps.claim_refs():
                if c.resource_claim_template_name:
                    t = self.templates.get(c.resource_claim_template_name, ns)
                    if t is not None:
                        out[f"{ps.name}/{c.name}"] = t.spec.spec
                elif c.resource_claim_name:
                    claim = self.claims.get(c.resource_claim_name, ns)
                    if claim is not None:
                        out[f"{ps.name}/{c.name}"] = claim.spec
        return out

    async def _admit(self, wl: Workload, adm: CycleAdmission, now: float, devices: DeviceIndex) -> None:
        uid = wl.metadata.uid or ""
        admission = admission_status(adm)
        req = ledger_request(uid, adm, admission, self._claim_specs(wl), devices)
        await self._record(wl)
        try:
            await self.ledger.admit(req, at=now)
        except AlreadyAdmitted:
            # the ledger holds an admission this process does not know (a write lost before a
            # restart): the ledger's record is replaced by this cycle's plan
            log.warning("Workload %s was already admitted in the ledger; re-admitting", wl.key)
            await self.ledger.release(uid, at=now, reason="Readmitted", final_state="pending")
            await self.ledger.admit(req, at=now)
        except LedgerError as e:
            log.warning("the ledger refused to admit %s: %s", wl.key, e)
            await self._set_pending(wl, PendingReason(adm.cluster_queue, "Pending", f"ledger: {e}"))
            return
        self.admitted[uid] = adm.admitted(now)
        self.admissions[uid] = admission
        self.pending_reasons.pop(wl.key, None)
        self.status_todo.add(uid)
        self.stats.admissions += 1
        await self._write_admission(wl, admission, now)

    async def _write_admission(self, wl: Workload, admission: Admission, now: float) -> None:
        uid = wl.metadata.uid or ""
        cq = admission.cluster_queue
        gen = wl.metadata.generation
        conds = with_condition(
            wl.status.conditions,
            QUOTA_RESERVED,
            "True",
            "QuotaReserved",
            f"Quota reserved in ClusterQueue {cq}",
            now,
            gen,
        )
        conds = with_condition(
            conds, ADMITTED, "True", "Admitted", f"The workload is admitted by ClusterQueue {cq}", now, gen
        )
        try:
            out = await self._patch_status(
                wl,
                {
                    "conditions": _dump(conds),
                    "admission": _without_nulls(admission.to_dict()),
                    "reason": None,
                },
            )
        except Exception as e:
            # the ledger holds the admission: keep trying (status_todo) without holding up the others
            log.warning("status of Workload %s not written yet: %s", wl.key, e)
            self.stats.errors += 1
            self._retry_later()
            return
        self.status_todo.discard(uid)
        if out is None:  # deleted meanwhile: _forget_deleted releases it
            return
        await self.events.emit(
            wl, "Normal", "Admitted", f"Admitted by ClusterQueue {cq}; plan: {plan_summary(admission)}"
        )

    async def _write_pending_status(self) -> None:
        """Admissions whose status write did not hold yet (the ledger has them): write again."""
        for uid in sorted(self.status_todo):
            wl = next((w for w in self.workloads.list() if w.metadata.uid == uid), None)
            adm = self.admissions.get(uid)
            if wl is None or adm is None:
                self.status_todo.discard(uid)
                continue
            await self._write_admission(wl, adm, self.clock())

    async def _set_pending(self, wl: Workload, reason: PendingReason) -> None:
        cur = wl.status.condition(QUOTA_RESERVED)
        text = reason.message or reason.reason
        if (
            cur is not None
            and cur.status == "False"
            and cur.reason == reason.reason
            and cur.message == text
            and wl.status.reason == text[:REASON_MAX]
        ):
            return
        conds = with_condition(
            wl.status.conditions,
            QUOTA_RESERVED,
            "False",
            reason.reason,
            text,
            self.clock(),
            wl.metadata.generation,
        )
        await self._patch_status(wl, {"conditions": _dump(conds), "reason": text[:REASON_MAX]})
        self.pending_reasons[wl.key] = reason
        await self.events.emit(wl, "Normal", reason.reason, text)

    # ---- plan binding
    async def _bind(self) -> None:
        by_uid = {w.metadata.uid: w for w in self.workloads.list()}
        pods_by_wl: dict[str, list[Pod]] = {}
        for p in self.pods.list():
            pods_by_wl.setdefault(p.labels.get(WORKLOAD_UID_LABEL, ""), []).append(p)
        groups = self._groups()
        for uid in sorted(self.admitted):
            if uid in self.status_todo:
                continue
            wl = by_uid.get(uid)
            admission = self.admissions.get(uid)
            if wl is None or admission is None:
                continue
            job = self._job_of(wl)
            if job is not None and job.spec.suspend and not job_finished(job)[0]:
                await self._start_job(wl, job, admission)
            pods = pods_by_wl.get(uid, [])
            if any(_gated(p) for p in pods):
                await self._bind_pods(wl, admission, pods)
            group = wl.labels.get(POD_GROUP_LABEL)
            if group and job is None:
                members = groups.get((wl.namespace or "default", group), [])
                if any(_gated(p, GATE_ADMISSION) for p in members):
                    await self._bind_pods(
                        wl, admission, members, GATE_ADMISSION, functools.partial(_pod_set_of, wl)
                    )

    def _template_claims(self, wl: Workload, pod_set: str) -> bool:
        ps = wl.pod_set(pod_set)
        return ps is not None and any(c.resource_claim_template_name for c in ps.claim_refs())

    async def _allocate(self, claim: ResourceClaim, placement: Any, node: str) -> bool:
        """Write the planned allocation into a claim (Full mode). False when the claim already holds a
        different allocation (someone else allocated it: the plan cannot be bound as made)."""
        if claim.status.allocation is not None:
            planned = {(d.driver, d.pool, d.device) for d in placement.devices}
            have = {
                (r.driver, r.pool, r.device)
                for r in (
                    claim.status.allocation.devices.results or [] if claim.status.allocation.devices else []
                )
            }
            return planned == have
        body = allocation_for(claim.spec, placement, node, {c.name: c for c in self.device_classes.list()})
        raw = await retrying(
            lambda: self.kube.patch(
                RESOURCE_CLAIMS,
                claim.name,
                {"status": {"allocation": body}},
                claim.namespace,
                subresource="status",
            ),
            what=f"allocation of ResourceClaim {claim.key}",
        )
        self.claims.observe(raw)
        self.stats.claims_allocated += 1
        return True

    async def _start_job(self, wl: Workload, job: Job, admission: Admission) -> None:
        """Unsuspend an admitted Job in one write: pod template label (our pods informer), the placement
        gate when needed, the planned node when every pod of the pod set has the same one, the admitted
        parallelism (partial admission). Shared claims get their allocation first (Full mode)."""
        ns = wl.namespace or "default"
        psa = admission.pod_set_assignments[0] if admission.pod_set_assignments else None
        if psa is None:
            return
        if self.full:
            for p in psa.placements or []:
                for c in p.claims or []:
                    if c.resource_claim_name and not is_implicit_claim(c):
                        claim = self.claims.get(c.resource_claim_name, ns)
                        if claim is None:
                            return  # wait for it (the claims informer wakes us)
                        await self._allocate(claim, c, p.node_name)
        template: dict[str, Any] = {
            "metadata": {"labels": {WORKLOAD_UID_LABEL: wl.metadata.uid, POD_SET_LABEL: psa.name}},
        }
        spec: dict[str, Any] = {}
        nodes = {p.node_name for p in psa.placements or []}
        if len(nodes) == 1:
            spec["nodeSelector"] = {HOSTNAME_LABEL: next(iter(nodes))}
        if needs_gate(admission, psa.name, self.full, self._template_claims(wl, psa.name)):
            spec["schedulingGates"] = [{"name": GATE_PLACEMENT}]
        if spec:
            template["spec"] = spec
        patch: dict[str, Any] = {"spec": {"suspend": False, "template": template}}
        if psa.count is not None and job.spec.parallelism is not None and psa.count < job.spec.parallelism:
            patch["spec"]["parallelism"] = psa.count
        raw = await retrying(
            lambda: self.kube.patch(JOBS, job.name, patch, job.namespace, patch_type="strategic"),
            what=f"start Job {job.key}",
        )
        self.jobs.observe(raw)
        await self.events.emit(
            job,
            "Normal",
            "Started",
            f"Admitted by ClusterQueue {admission.cluster_queue}; plan: {plan_summary(admission)}",
        )

    async def _bind_pods(
        self,
        wl: Workload,
        admission: Admission,
        pods: list[Pod],
        gate: str = GATE_PLACEMENT,
        pod_set_of: Callable[[Pod], str | None] | None = None,
    ) -> None:
        """Give each gated pod a planned pod of its pod set: allocate its claims (Full mode), then pin
        its node and remove ``gate`` in one write."""
        ns = wl.namespace or "default"
        default_ps = admission.pod_set_assignments[0].name if admission.pod_set_assignments else "main"

        def ps_of(p: Pod) -> str:
            return (pod_set_of(p) if pod_set_of else p.labels.get(POD_SET_LABEL)) or default_ps

        live = [
            p
            for p in pods
            if not p.metadata.deletion_timestamp and (p.status.phase or "") not in ("Succeeded", "Failed")
        ]
        used: dict[str, set[int]] = {}
        for p in live:
            idx = p.annotations.get(PLACEMENT_INDEX_ANNOTATION)
            if idx is not None and idx.isdigit():
                used.setdefault(ps_of(p), set()).add(int(idx))
        for pod in sorted(live, key=lambda p: p.name):
            if not _gated(pod, gate):
                continue
            ps_name = ps_of(pod)
            psa = next((a for a in admission.pod_set_assignments if a.name == ps_name), None)
            if psa is None or not psa.placements:
                continue
            taken = used.setdefault(ps_name, set())
            placement = None
            given = pod.annotations.get(PLACEMENT_INDEX_ANNOTATION)
            completion = pod.annotations.get("batch.kubernetes.io/job-completion-index")
            for want in (given, completion):
                if want is not None and want.isdigit():
                    placement = next((p for p in psa.placements if p.index == int(want)), None)
                    if placement is not None and (want == given or placement.index not in taken):
                        break
                    placement = None
            if placement is None:
                placement = next((p for p in psa.placements if p.index not in taken), None)
            if placement is None:
                log.warning("pod %s of %s has no free placement (more pods than planned)", pod.key, wl.key)
                continue
            taken.add(placement.index)
            if self.full:
                ready = True
                for c in placement.claims or []:
                    if is_implicit_claim(c):
                        continue
                    name = c.resource_claim_name or pod_claim_name(pod, c.name)
                    claim = self.claims.get(name, ns) if name else None
                    if claim is None:
                        ready = False  # the resourceclaim controller has not created it yet
                        break
                    if not await self._allocate(claim, c, placement.node_name):
                        await self.events.emit(
                            wl,
                            "Warning",
                            "PlanNotBound",
                            f"ResourceClaim {claim.key} is allocated to other devices than planned",
                        )
                if not ready:
                    continue
            meta: dict[str, Any] = {"annotations": {PLACEMENT_INDEX_ANNOTATION: str(placement.index)}}
            spec: dict[str, Any] = {"schedulingGates": [{"$patch": "delete", "name": gate}]}
            if (pod.spec.node_selector or {}).get(HOSTNAME_LABEL) != placement.node_name:
                spec["nodeSelector"] = {HOSTNAME_LABEL: placement.node_name}
            raw = await self._patch(
                PODS,
                pod.name,
                {"metadata": meta, "spec": spec},
                pod.namespace,
                patch_type="strategic",
                what=f"bind Pod {pod.key}",
            )
            self.pods.observe(raw)
            self.stats.pods_ungated += 1

    # ---- queue status
    async def _queue_status(self) -> None:
        wait = self._queue_status_at + self.queue_status_period - time.monotonic()
        if wait > 0:
            if self._queue_status_handle is None:

                def fire() -> None:
                    self._queue_status_handle = None
                    self._wake.set()

                self._queue_status_handle = asyncio.get_running_loop().call_later(wait, fire)
            return
        pending_by_lq: dict[str, int] = {}
        for wl in self.workloads.list():
            uid = wl.metadata.uid or ""
            if uid in self.admitted or wl.status.is_true(FINISHED) or wl.status.is_true(QUOTA_RESERVED):
                continue
            key = f"{wl.namespace or 'default'}/{wl.spec.queue_name}"
            pending_by_lq[key] = pending_by_lq.get(key, 0) + 1
        cq_status, lq_status = queue_statuses(
            self.cluster_queues.list(),
            self.local_queues.list(),
            list(self.admitted.values()),
            pending_by_lq,
            self.inactive_cluster_queues,
            self.clock(),
        )
        for cq in self.cluster_queues.list():
            want = cq_status.get(cq.name)
            if want is not None and want != _status_dict(cq):
                raw = await self._patch(
                    CLUSTER_QUEUES,
                    cq.name,
                    {"status": want},
                    subresource="status",
                    what=f"status of ClusterQueue {cq.name}",
                )
                self.cluster_queues.observe(raw)
                self._queue_status_at = time.monotonic()
        for lq in self.local_queues.list():
            want = lq_status.get(lq.key)
            if want is not None and want != _status_dict(lq):
                raw = await self._patch(
                    LOCAL_QUEUES,
                    lq.name,
                    {"status": want},
                    lq.namespace,
                    subresource="status",
                    what=f"status of LocalQueue {lq.key}",
                )
                self.local_queues.observe(raw)
                self._queue_status_at = time.monotonic()


def _total(pod: Pod) -> int:
    raw = pod.annotations.get(POD_GROUP_TOTAL_ANNOTATION, "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else 1


def _ended(pod: Pod) -> bool:
    return (pod.status.phase or "") in ("Succeeded", "Failed")


def _pod_set_of(wl: Workload, pod: Pod) -> str | None:
    """The pod set of a pod-group pod: the one whose template is the pod's spec (without node and gates)."""
    mine = _without_nulls(pod.spec.model_copy(update={"node_name": None, "scheduling_gates": None}).to_dict())
    for ps in wl.spec.pod_sets:
        if _without_nulls(ps.template.spec.to_dict()) == mine:
            return ps.name
    return None


def _without_nulls(v: Any) -> Any:
    """A body without explicit nulls (models built in code set optional fields to None; the CRD schema
    rejects null where it is not nullable)."""
    if isinstance(v, dict):
        return {k: _without_nulls(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [_without_nulls(x) for x in v]
    return v


def _gated(pod: Pod, gate: str = GATE_PLACEMENT) -> bool:
    return any(g.name == gate for g in pod.spec.scheduling_gates or [])


def _dump(conds: Iterable[Any]) -> list[dict[str, Any]]:
    return [c.to_dict() for c in conds]


def _status_dict(obj: ClusterQueue | LocalQueue) -> dict[str, Any]:
    return obj.status.to_dict()


def _cond_time(wl: Workload, type_: str) -> str | None:
    c = wl.status.condition(type_)
    return c.last_transition_time if c is not None else None
