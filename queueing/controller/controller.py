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
import dataclasses
import functools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from queueing.api.base import KubeObject
from queueing.api.core import Job, Namespace, Node, Pod, PriorityClass
from queueing.api.resource import (
    DeviceClass,
    DeviceRequestAllocationResult,
    ResourceClaim,
    ResourceClaimSpec,
    ResourceClaimTemplate,
    ResourceSlice,
)
from queueing.api.v1beta1 import (
    ADMITTED,
    EVICTED,
    FINISHED,
    PREEMPTED,
    QUOTA_RESERVED,
    REQUEUED,
    Admission,
    ClusterQueue,
    Cohort,
    LocalQueue,
    PodPlacement,
    ResourceFlavor,
    Workload,
    WorkloadPriorityClass,
)
from queueing.cache import ClusterCache, light_pod
from queueing.config import Config
from queueing.controller import evict as ev
from queueing.controller.evict import Evicting
from queueing.controller.isolation import (
    LEDGER_REJECTED,
    OutageLog,
    Quarantine,
    invalid_cluster_queues,
    invalid_status,
    isolate_cycle,
    refusal_message,
    with_placeholders,
)
from queueing.controller.metrics import ControllerMetrics
from queueing.controller.plan import (
    GATE_ADMISSION,
    GATE_PLACEMENT,
    HOSTNAME_LABEL,
    ORIGINAL_PARALLELISM_ANNOTATION,
    PLACEMENT_INDEX_ANNOTATION,
    POD_GROUP_LABEL,
    POD_GROUP_TOTAL_ANNOTATION,
    POD_SET_LABEL,
    WORKLOAD_UID_LABEL,
    DeviceIndex,
    allocation_for,
    fmt_time,
    is_implicit_claim,
    job_finished,
    ledger_pods,
    ledger_request,
    needs_gate,
    plan_summary,
    pod_claim_name,
    with_condition,
)
from queueing.controller.queues import queue_statuses
from queueing.dra.allocator import SelectorCache
from queueing.dra.binding import (
    BindingDecision,
    UpstreamView,
    choose_binding,
    describe_devices,
    device_results,
)
from queueing.dra.verify import VerifyError
from queueing.faults import fault_point
from queueing.kube.client import (
    CLUSTER_QUEUES,
    COHORTS,
    DEVICE_CLASSES,
    JOBS,
    LOCAL_QUEUES,
    NAMESPACES,
    NODES,
    PODS,
    PRIORITY_CLASSES,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_FLAVORS,
    RESOURCE_SLICES,
    WORKLOAD_PRIORITY_CLASSES,
    WORKLOADS,
    KubeClient,
    Resource,
)
from queueing.kube.events import EventRecorder
from queueing.kube.informer import Informer
from queueing.kube.writes import describe_error, each, is_already_exists, is_not_found, retrying
from queueing.ledger.errors import is_data_error
from queueing.ledger.models import FINISHED as FINISHED_STATE
from queueing.ledger.quota import quota_specs
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
from queueing.ledger.state import CohortSpec as LedgerCohort
from queueing.ledger.state import LocalQueueSpec as LedgerLocalQueue
from queueing.ledger.state import QuotaSpec
from queueing.ledger.state import WorkloadSpec as LedgerWorkload
from queueing.scheduling.cycle import Admission as CycleAdmission
from queueing.scheduling.cycle import PendingReason, inactive_cluster_queues, run_cycle
from queueing.scheduling.dra_placer import DraPlacer
from queueing.scheduling.fairshare import weighted_shares
from queueing.scheduling.from_api import (
    ApiContext,
    FromApiError,
    admission_status,
    admitted_workload,
    queue_specs,
    recorded_plan,
    workload_info,
)
from queueing.scheduling.from_api import _device as allocated_device  # one conversion
from queueing.scheduling.jobs import QUEUE_NAME_LABEL, WorkloadError, workload_for_job, workload_for_pod_group
from queueing.scheduling.ordering import decay_usage, usage_by_resource
from queueing.scheduling.placer import Placement
from queueing.scheduling.quota import cohort_cycles
from queueing.scheduling.requeue import next_requeue
from queueing.scheduling.snapshot import AdmittedWorkload, ClusterSnapshot, WorkloadInfo
from queueing.verify import verify_from_env

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
        metrics: ControllerMetrics | None = None,
        eviction_timeout: float | None = None,
        verify: bool | None = None,
    ) -> None:
        self.kube = kube
        # verify mode of the cores (see ``queueing.verify``; None: from ``QUEUEING_VERIFY``)
        self.verify = verify_from_env(os.environ) if verify is None else verify
        self.ledger = ledger
        self.config = config or Config()
        self.clock = clock
        self.metrics = metrics or ControllerMetrics()
        # a victim whose pods/claims are not gone after this long no longer counts as going away:
        # the preemptor's plan is recomputed without it (it is still being evicted)
        self.eviction_timeout = (
            eviction_timeout if eviction_timeout is not None else self.config.eviction_timeout
        )
        # plan binding (planBindingMode): per admission, node only or Full (Auto decides per admission,
        # against what kube-scheduler sees: the view is built at most once per binding pass)
        self._bindings: dict[str, tuple[Admission, BindingDecision]] = {}
        self._upstream: UpstreamView | None = None
        self._selectors = SelectorCache()
        self._verified: dict[str, Admission] = {}  # admissions whose allocations match the plan
        # hold until confirmed: devices of a released admission on a node where an admission bound node
        # only waits for kube-scheduler's allocation (which may take them): uid -> (deadline, devices)
        self._held: dict[str, tuple[float, list[PodPlacement]]] = {}
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
        # every pod of the cluster, in the cluster cache's light projection (the pods queueing does
        # not manage take node resources too: DaemonSets, system pods, other teams' pods)
        managed = (WORKLOAD_UID_LABEL, POD_GROUP_LABEL)
        self.all_pods: Informer[Pod] = inf(PODS, Pod, transform=functools.partial(light_pod, labels=managed))
        # the cluster as placement sees it, kept in place by the informers' deltas (never rebuilt
        # per sync): see queueing/cache
        self.cache = ClusterCache(selectors=self._selectors, managed_labels=managed, verify=self.verify)
        for mirrored in (
            self.nodes,
            self.slices,
            self.device_classes,
            self.claims,
            self.templates,
            self.all_pods,
        ):
            mirrored.add_mirror(self.cache.apply)
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
            self.all_pods,
        ]

        # the controller's own record (mirrors the ledger's active admissions): uid -> admitted workload
        self.admitted: dict[str, AdmittedWorkload] = {}
        self.admissions: dict[str, Admission] = {}  # uid -> status.admission (the plan)
        self.status_todo: set[str] = set()  # admitted in the ledger, status write not confirmed yet
        self.pending_reasons: dict[str, PendingReason] = {}  # workload key -> last reason
        self.inactive_cluster_queues: dict[str, str] = {}
        self._recorded: set[str] = set()  # workload UIDs the ledger knows
        self._ledger_cqs: dict[str, LedgerClusterQueue] = {}
        self._ledger_cohorts: dict[str, LedgerCohort] = {}
        self._ledger_lqs: dict[tuple[str, str], LedgerLocalQueue] = {}
        # admission fair sharing: decayed usage per LocalQueue / ClusterQueue (resource -> amount),
        # sampled by the usage-sampling periodic job, plus the entry penalties of each cycle
        self.lq_usage: dict[str, dict[str, float]] = {}
        self.cq_usage: dict[str, dict[str, float]] = {}
        self._usage_sampled_at: float | None = None
        # only act (admit, evict) while this says so (the leader elector's is_leader)
        self.may_act: Callable[[], bool] = lambda: True
        self.evicting: dict[str, Evicting] = {}  # uid -> eviction in progress (pods/claims not gone yet)
        self.pods_ready_seen: set[str] = set()  # admitted workloads whose pods were all Ready once
        self._wake = asyncio.Event()
        # independent API writes (one per Workload or Job) in flight at once within a step
        self.write_concurrency = 16
        self._task: asyncio.Task[None] | None = None
        self._retry_handle: asyncio.TimerHandle | None = None
        self._timer_handles: dict[float, asyncio.TimerHandle] = {}
        self._step = asyncio.Lock()  # held during one sync: a graceful stop waits for it
        self._started = False
        self.leading = False
        self.synced = asyncio.Event()  # set after every completed sync (tests wait on conditions)
        # isolation (controller/isolation.py): queue objects the ledger refused; the outage's log
        self.quarantine = Quarantine(report=lambda o, m: self.events.emit(o, "Warning", LEDGER_REJECTED, m))
        self.outage = OutageLog()
        self._invalid_status: dict[str, str] = {}  # ClusterQueue the model rejects -> status written
        # wedge detection (controller/health.py): when a sync last completed (time.monotonic())
        self.last_sync_completed: float | None = None

    # ------------------------------------------------------------------ lifecycle
    def _on_change(self, old: KubeObject | None, new: KubeObject | None) -> None:
        if new is None and old is not None:
            self._on_deleted(old)
        self._wake.set()

    def _on_deleted(self, obj: KubeObject) -> None:
        """An object left the cluster: drop what is kept about it by UID that needs no ledger write.
        An admitted Workload's entries go in :meth:`_forget_deleted` (its ledger admission is released
        first)."""
        uid = obj.metadata.uid
        if not uid:
            return
        self.events.forget(uid)
        if isinstance(obj, Workload):
            self._recorded.discard(uid)
            self.pending_reasons.pop(obj.key, None)

    def wake(self) -> None:
        self._wake.set()

    @property
    def informers_synced(self) -> bool:
        return all(i.has_synced for i in self.informers)

    async def start(self, timeout: float = 60.0, *, lead: bool = True) -> None:
        """Start the informers and wait for them; with ``lead`` also start admitting and evicting
        (without: a standby, :meth:`begin_leading` when it gets the Lease)."""
        for i in self.informers:
            i.start()
        await asyncio.gather(*(i.wait_synced(timeout) for i in self.informers))
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
        await self._sync_ledger_queues()
        await self.recover()
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
        for i in self.informers:
            await i.stop()

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
            self.synced.set()

    def _outage_backoff(self) -> float:
        """During a ledger outage the retries back off, up to 2 s (one line is logged, not one a try)."""
        return float(min(self.retry_backoff * 2 ** min(self.outage.retries, 6), max(self.retry_backoff, 2.0)))

    def _wake_at(self, t: float) -> None:
        """Wake the loop when the controller's clock reaches ``t`` (a backoff or a timeout ends).
        With an injected clock the test advances it and calls :meth:`wake`."""
        delay = t - self.clock()
        if delay <= 0:
            self._wake.set()
            return
        key = round(t, 3)
        if key in self._timer_handles or not self.leading:
            return

        def fire() -> None:
            self._timer_handles.pop(key, None)
            self._wake.set()

        self._timer_handles[key] = asyncio.get_running_loop().call_later(min(delay, 3600.0), fire)

    def _retry_later(self, delay: float | None = None) -> None:
        if self._retry_handle is None or self._retry_handle.cancelled():
            loop = asyncio.get_running_loop()

            def fire() -> None:
                self._retry_handle = None
                self._wake.set()

            self._retry_handle = loop.call_later(self.retry_backoff if delay is None else delay, fire)

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
        self._recorded = set(state.admissions) | set(state.pending)
        ctx = self._context()
        for uid, adm in state.admissions.items():
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
            "recovered %d admissions from the ledger (%d being evicted)",
            len(self.admitted),
            len(self.evicting),
        )

    def _evicting_from(self, wl: Workload) -> Evicting:
        c = wl.status.condition(EVICTED)
        reason = c.reason if c is not None else ev.PREEMPTED
        message = c.message if c is not None else ""
        started = _epoch(c.last_transition_time) if c is not None else self.clock()
        return Evicting(
            wl.metadata.uid or "",
            wl.key,
            reason,
            message,
            started or self.clock(),
            ev.preemptor_uid_of(message),
        )

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
        if not self.may_act():
            return
        self.stats.syncs += 1
        await self._sync_ledger_queues()
        await self._sync_jobs()
        await self._sync_pod_groups()
        await self._forget_deleted()
        await self._write_pending_status()
        await self._drive_evictions()
        await self._check_admitted()
        await self._schedule()
        await self._bind()
        await self._queue_status()
        await self._report_invalid_queues()

    async def _report_invalid_queues(self) -> None:
        """A ClusterQueue, Cohort, LocalQueue or ResourceFlavor that the API holds but the model rejects is
        left out, as if absent: a Warning Event on it names the field. A Cohort on a parent cycle gets one
        too (its ClusterQueues say it in their Active condition). Once per message."""
        for informer in (self.cluster_queues, self.cohorts, self.local_queues, self.flavors):
            for ref, msg in informer.invalid_objects():
                await self.events.emit(ref, "Warning", f"Invalid{ref.kind or 'Object'}", msg)
        cohorts = {c.name: c for c in queue_specs(self.cohorts.list()).cohorts}
        for name, cycle in cohort_cycles(cohorts).items():
            obj = self.cohorts.get(name)
            if obj is not None:
                why = f"Cohort {name} is on a parent cycle: {cycle}; its ClusterQueues are inactive"
                await self.events.emit(obj, "Warning", "CohortCycle", why)

    # ---- queues in the ledger
    async def _sync_ledger_queues(self) -> None:
        now = self.clock()
        await self._sync_ledger_cohorts(now)
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
                # isolation: data the ledger refuses stays with this ClusterQueue (inactive)
                write = functools.partial(self.ledger.upsert_cluster_queue, spec, at=now)
                await self.quarantine.store(cq, write)
                self._ledger_cqs[cq.name] = spec
        self.quarantine.forget_missing("ClusterQueue", (cq.name for cq in self.cluster_queues.list()))
        for lq in self.local_queues.list():
            lspec = LedgerLocalQueue(lq.namespace or "default", lq.name, lq.spec.cluster_queue)
            key = (lspec.namespace, lspec.name)
            if self._ledger_lqs.get(key) != lspec:
                try:
                    await self.ledger.upsert_local_queue(lspec, at=now)
                except Exception as e:  # isolation: its Jobs then wait with the ledger's refusal
                    if not is_data_error(e):
                        raise
                    log.warning("the ledger cannot store LocalQueue %s: %s", lq.key, refusal_message(e))
                self._ledger_lqs[key] = lspec

    async def _sync_ledger_cohorts(self, now: float) -> None:
        """The Cohorts (parent, own quota) as the core sees them, in the ledger: its quota check is the
        core's model over the whole tree. A cohort the ledger holds without a Cohort object (deleted)
        is written back as implicit: no parent, no quota of its own."""
        want = {
            c.name: LedgerCohort(c.name, c.parent, quota_specs(c.quotas()))
            for c in queue_specs(self.cohorts.list()).cohorts
        }
        if not self._ledger_cqs:  # the first sync after start() or resync(): compare with the ledger
            self._ledger_cohorts = await self.ledger.cohorts()
        for name in self._ledger_cohorts.keys() - want.keys():
            want[name] = LedgerCohort(name)
        self.quarantine.forget_missing("Cohort", (c.name for c in self.cohorts.list()))
        for name, spec in sorted(want.items()):
            if self._ledger_cohorts.get(name) != spec:
                obj = self.cohorts.get(name)
                write = functools.partial(self.ledger.upsert_cohort, spec, at=now)
                # isolation: data the ledger refuses stays with this Cohort (its ClusterQueues inactive)
                await (write() if obj is None else self.quarantine.store(obj, write))
                self._ledger_cohorts[name] = spec

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

        finished: list[tuple[Workload, bool, Job | None]] = []
        todo: list[Job] = []  # Jobs not finished that need a write (see ``sync``)
        for job in self.jobs.list():
            if job.metadata.deletion_timestamp:
                continue
            done, succeeded = job_finished(job)
            if not done:
                wl = owned.get(job.metadata.uid or "")
                if wl is None or (not job.spec.suspend and wl.metadata.uid not in self.admitted):
                    todo.append(job)
            elif (wl := owned.get(job.metadata.uid or "")) is not None and not wl.status.is_true(FINISHED):
                finished.append((wl, succeeded, job))

        async def sync(job: Job) -> None:
            wl = owned.get(job.metadata.uid or "")
            uid = wl.metadata.uid if wl is not None else None
            if not job.spec.suspend and (uid is None or uid not in self.admitted):
                await self._suspend(job, "not admitted by queueing: suspended until its Workload is admitted")
            if wl is None:
                try:
                    want = workload_for_job(job, wpcs, pcs)
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
        """Suspend a Job (its pods are deleted by the Job controller); a partial admission's lowered
        parallelism is given back in the same write (as Kueue restores the pod set info)."""
        body: dict[str, Any] = {"spec": {"suspend": True}}
        original = _original_parallelism(job)
        if original is not None:
            body["spec"]["parallelism"] = original
            body["metadata"] = {"annotations": {ORIGINAL_PARALLELISM_ANNOTATION: None}}
        raw = await retrying(
            lambda: self.kube.patch(JOBS, job.name, body, job.namespace),
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
        self.admitted.pop(uid, None)
        self.admissions.pop(uid, None)
        self._forget_binding(uid)
        self.status_todo.discard(uid)
        self.evicting.pop(uid, None)
        self.pods_ready_seen.discard(uid)
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
        present = {w.metadata.uid for w in self.workloads.list()}
        self._recorded.intersection_update(present)  # e.g. recovered from the ledger, Workload gone since
        for uid in [u for u in self.admitted if u not in present]:
            with contextlib.suppress(NotAdmitted):
                await self.ledger.release(
                    uid, at=self.clock(), reason="WorkloadDeleted", final_state="deleted"
                )
            self._hold_released(uid)
            self.admitted.pop(uid, None)
            self.admissions.pop(uid, None)
            self._forget_binding(uid)
            self.status_todo.discard(uid)
            self.evicting.pop(uid, None)
            self.pods_ready_seen.discard(uid)

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
                rs = wl.status.requeue_state
                backoff = _epoch(rs.requeue_at) if rs is not None and rs.requeue_at else None
                if backoff is not None and backoff > self.clock():
                    self._wake_at(backoff)
                infos.append(
                    workload_info(
                        wl,
                        ctx,
                        creation_time=_epoch(wl.metadata.creation_timestamp),
                        backoff_until=backoff or None,
                    )
                )
            except FromApiError as e:
                invalid[wl.key] = str(e)
        return infos, by_key, invalid

    async def _schedule(self) -> None:
        ctx = self._context()
        pending, by_key, invalid = self._pending(ctx)
        # isolation: a queue object the ledger refused is scheduled as last accepted, and inactive; a
        # ClusterQueue the model rejects is inactive too (an empty placeholder)
        refused = {
            **invalid_cluster_queues(self.cluster_queues.invalid_objects()),
            **self.quarantine.inactive(self.cluster_queues.list(), self.cohorts.list()),
        }
        specs = queue_specs(
            [
                *self.flavors.list(),
                *self.quarantine.for_cycle(self.cluster_queues.list()),
                *self.quarantine.for_cycle(self.cohorts.list()),
                *self.local_queues.list(),
                *self.namespaces.list(),
            ]
        )
        specs = with_placeholders(specs, refused)  # isolation
        for key, msg in invalid.items():
            await self._set_pending(by_key[key], PendingReason(None, "Inadmissible", msg))
        draining = any(q.stop_policy == "HoldAndDrain" for q in specs.cluster_queues) or any(
            q.stop_policy == "HoldAndDrain" for q in specs.local_queues
        )
        if not pending and not (draining and self.admitted):
            # no cycle to run, but a queue on a cohort cycle, stopped or missing a flavor is inactive all
            # the same
            self.inactive_cluster_queues = inactive_cluster_queues(
                ClusterSnapshot(
                    cluster_queues=specs.cluster_queues,
                    cohorts=specs.cohorts,
                    flavors=specs.flavors,
                    inactive=refused,
                )
            )
            self._pending_metrics({}, by_key)
            return
        admitted = tuple(self._as_admitted(uid, a) for uid, a in self.admitted.items())
        snapshot = ClusterSnapshot(
            cluster_queues=specs.cluster_queues,
            cohorts=specs.cohorts,
            local_queues=specs.local_queues,
            flavors=specs.flavors,
            pending=tuple(pending),
            admitted=admitted,
            # a preemptor whose plan was carried out goes first (read from the Workload, so that it
            # holds across a restart)
            nominated=frozenset(
                key
                for key, w in by_key.items()
                if (c := w.status.condition(QUOTA_RESERVED)) is not None
                and c.status == "False"
                and c.reason == "Preempting"
            ),
            namespaces=specs.namespaces,
            local_queue_usage=self.lq_usage,
            cluster_queue_usage=self.cq_usage,
            inactive=refused,
        )
        placer = self._placer()
        now = self.clock()
        t0 = time.perf_counter()
        scheduling = self.config.scheduling()
        if self.verify:
            scheduling = scheduling.model_copy(update={"verify": True})
        # isolation: a workload whose evaluation raises is left out (with its reason), the rest go on
        result, failed = isolate_cycle(
            lambda items: run_cycle(
                dataclasses.replace(snapshot, pending=tuple(items)), placer, now, scheduling
            ),
            pending,
            lambda w: w.key,
        )
        spent = time.perf_counter() - t0
        for key, why in failed.items():
            await self._set_pending(by_key[key], PendingReason(None, "Inadmissible", why))
        self.stats.cycles += 1
        if pending:
            self.metrics.admission_attempt("success" if result.admissions else "inadmissible", spent)
            self.metrics.allocator(spent, allocated=bool(result.admissions or result.preemptions))
        self.inactive_cluster_queues = dict(result.inactive_cluster_queues)
        for cq_name, share in weighted_shares(
            snapshot.cluster_queues, snapshot.cohorts, snapshot.admitted
        ).items():
            self.metrics.set_weighted_share(cq_name, share)
        for store, pens in (
            (self.lq_usage, result.local_queue_penalties),
            (self.cq_usage, result.cluster_queue_penalties),
        ):
            for k, pen in pens.items():
                u = store.setdefault(k, {})
                for r, v in pen.items():
                    u[r] = u.get(r, 0.0) + v
        if not self.may_act():
            log.warning("not the leader any more: the cycle's decisions are dropped")
            return
        devices = DeviceIndex(self.slices.list())
        await self._admit_all(
            [(wl, adm) for adm in result.admissions if (wl := by_key.get(adm.key)) is not None], now, devices
        )
        admitted_by_key = {a.key: uid for uid, a in self.admitted.items()}
        by_uid = {w.metadata.uid: w for w in self.workloads.list()}
        for plan in result.preemptions:
            wl = by_key.get(plan.preemptor)
            if wl is None:
                continue
            for victim in plan.victims:
                vuid = admitted_by_key.get(victim.key)
                vwl = by_uid.get(vuid) if vuid else None
                if vuid is None or vwl is None or vuid in self.evicting:
                    continue  # already being evicted (a stuck victim is not evicted twice)
                msg = ev.preemption_message(wl.key, wl.metadata.uid or "", plan.cluster_queue, victim.reason)
                await self._start_eviction(
                    vwl, ev.PREEMPTED, msg, preemptor=wl, preemption_reason=victim.reason
                )
                self.metrics.preempted(plan.cluster_queue, victim.reason)
            await self._set_pending(wl, PendingReason(plan.cluster_queue, "Preempting", plan.message))
        for drain in result.evictions:  # HoldAndDrain
            vuid = admitted_by_key.get(drain.key)
            vwl = by_uid.get(vuid) if vuid else None
            if vuid is not None and vwl is not None and vuid not in self.evicting:
                await self._start_eviction(vwl, drain.reason, drain.message)
        for key, reason in result.pending.items():
            wl = by_key.get(key)
            if wl is not None:
                await self._set_pending(wl, reason)
        self._pending_metrics(result.pending, by_key)

    def _as_admitted(self, uid: str, a: AdmittedWorkload) -> AdmittedWorkload:
        """How the core sees an admitted workload: a victim being evicted is ``evicting`` (counted as
        going away, never chosen again); a stuck one (past the eviction timeout) holds its resources and
        is shown with the highest priority, so the preemptor's recomputed plan neither counts on it
        nor picks it again (by priority; ``reclaimWithinCohort: Any`` could still name it, and it is
        then waited for)."""
        e = self.evicting.get(uid)
        if e is None:
            return a
        if not e.stuck:
            return dataclasses.replace(a, evicting=True)
        return dataclasses.replace(a, workload=dataclasses.replace(a.workload, priority=2**31 - 1))

    def _placer(self) -> DraPlacer:
        """The cluster cache's placer, with what the controller holds: the claims the placer sees as
        the cluster's own leave out a per-pod claim allocated with devices of an admitted plan (the
        plan holds those devices already; counted twice, evicting its workload would not free them
        for the eviction planner), and include the devices held after a release (``_held_claims``).
        The admissions are the controller's own record, so what it just committed counts at once
        (Kueue's "assume"), before any watch echoes it."""
        self.cache.sync_holds(self.admissions, ev.planned_devices)
        self.cache.set_extra_claims(self._held_claims())
        return self.cache.placer()

    def _pending_metrics(self, pending: Any, by_key: dict[str, Workload]) -> None:
        """Gauges: pending (active / inadmissible) and admitted per ClusterQueue; quota usage."""
        cq_of_lq = {lq.key: lq.spec.cluster_queue for lq in self.local_queues.list()}
        counts: dict[str, list[int]] = {cq.name: [0, 0] for cq in self.cluster_queues.list()}
        for key, wl in by_key.items():
            reason = pending.get(key)
            cq = (reason.cluster_queue if reason is not None else None) or cq_of_lq.get(
                f"{wl.namespace or 'default'}/{wl.spec.queue_name}"
            )
            if cq is None or cq not in counts:
                continue
            bad = reason is not None and reason.reason in ("Inadmissible", "Deactivated")
            counts[cq][1 if bad else 0] += 1
        admitted: dict[str, int] = dict.fromkeys(counts, 0)
        usage: dict[tuple[str, str, str], Any] = {}
        for a in self.admitted.values():
            admitted[a.cluster_queue] = admitted.get(a.cluster_queue, 0) + 1
            for (flavor, resource), amount in a.usage.items():
                k = (a.cluster_queue, flavor, resource)
                usage[k] = usage.get(k, 0) + amount
        for cq, (active, inadmissible) in counts.items():
            self.metrics.set_pending(cq, active=active, inadmissible=inadmissible)
        for cq, n in admitted.items():
            self.metrics.set_admitted_active(cq, n)
        for cq in self.cluster_queues.list():
            for g in cq.spec.resource_groups or []:
                for fq in g.flavors:
                    for r in fq.resources:
                        self.metrics.set_nominal_quota(cq.name, fq.name, r.name, r.nominal_quota)
                        self.metrics.set_usage(
                            cq.name, fq.name, r.name, float(usage.get((cq.name, fq.name, r.name), 0))
                        )

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

    async def _admit_all(
        self, admits: list[tuple[Workload, CycleAdmission]], now: float, devices: DeviceIndex
    ) -> None:
        """Carry out a cycle's admissions: the ledger first, all of them in one transaction (one at a
        time when the batch is refused, so that a refusal stays with its workload), then the
        Workloads' statuses, independent writes run side by side."""
        if not admits or not self.may_act():
            return
        todo = [(wl, adm, admission_status(adm)) for wl, adm in admits]
        reqs = [
            ledger_request(wl.metadata.uid or "", adm, a, self._claim_specs(wl), devices)
            for wl, adm, a in todo
        ]
        for _ in todo:
            fault_point("admission.before_ledger")
        await each([wl for wl, _, _ in todo], self._record, limit=self.write_concurrency)
        if len(todo) > 1:
            try:
                await self.ledger.admit_many(reqs, at=now)
            except Exception as e:  # isolation: one of them is refused (its data, or already admitted):
                if not is_data_error(e):  # each on its own below, the refusal stays with its workload
                    raise
            else:
                for wl, adm, a in todo:
                    self._admitted(wl, adm, a, now)
                await each(
                    todo, lambda t: self._write_admission(t[0], t[2], now), limit=self.write_concurrency
                )
                return
        for (wl, adm, a), req in zip(todo, reqs, strict=True):
            await self._admit(wl, adm, a, req, now)

    async def _admit(
        self, wl: Workload, adm: CycleAdmission, admission: Admission, req: Any, now: float
    ) -> None:
        uid = wl.metadata.uid or ""
        if not self.may_act():
            return
        try:
            await self.ledger.admit(req, at=now)
        except AlreadyAdmitted:
            # the ledger holds an admission this process does not know (a write lost before a
            # restart): the ledger's record is replaced by this cycle's plan
            log.warning("Workload %s was already admitted in the ledger; re-admitting", wl.key)
            await self.ledger.release(uid, at=now, reason="Readmitted", final_state="pending")
            await self.ledger.admit(req, at=now)
        except Exception as e:  # isolation: the ledger or the database refusing this workload's data
            if not is_data_error(e):
                raise
            log.warning("the ledger refused to admit %s: %s", wl.key, refusal_message(e))
            await self._set_pending(
                wl, PendingReason(adm.cluster_queue, "Pending", f"ledger: {refusal_message(e)}")
            )
            return
        self._admitted(wl, adm, admission, now)
        await self._write_admission(wl, admission, now)

    def _admitted(self, wl: Workload, adm: CycleAdmission, admission: Admission, now: float) -> None:
        """What the controller keeps once the ledger holds an admission."""
        uid = wl.metadata.uid or ""
        self.admitted[uid] = adm.admitted(now)
        self.admissions[uid] = admission
        self.pending_reasons.pop(wl.key, None)
        self.status_todo.add(uid)
        self.stats.admissions += 1
        fault_point("admission.after_ledger")
        waited = now - _epoch(wl.metadata.creation_timestamp) if wl.metadata.creation_timestamp else None
        self.metrics.quota_reserved(adm.cluster_queue, waited)
        self.metrics.admitted(adm.cluster_queue, waited)

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
        for done in (EVICTED, PREEMPTED):  # a requeued workload admitted again
            if wl.status.is_true(done):
                conds = with_condition(conds, done, "False", "Admitted", "admitted again", now, gen)
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
            log.warning("status of Workload %s not written yet: %s", wl.key, describe_error(e))
            self.stats.errors += 1
            self._retry_later()
            return
        self.status_todo.discard(uid)
        if out is None:  # deleted meanwhile: _forget_deleted releases it
            return
        fault_point("admission.after_status")
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

    # ---- eviction (see queueing/controller/evict.py for the steps)
    # ---- periodic jobs (queueing/controller/periodic.py runs them)
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
        """Full re-sync: the ledger's queues are written again if they differ and every Workload is
        looked at again (the informers keep their caches current by watch; this catches anything a
        write in between missed)."""
        self._ledger_cqs.clear()
        self._ledger_lqs.clear()
        self.wake()

    def recheck_inadmissible(self) -> None:
        """Inadmissible workloads are tried again (periodically, and when slices change)."""
        self.pending_reasons.clear()
        self.wake()

    async def _mark_evicted(
        self, wl: Workload, reason: str, message: str, preemption_reason: str | None = None
    ) -> Workload | None:
        """The Workload says Evicted (and Preempted, for a preemption): what users see."""
        now = self.clock()
        gen = wl.metadata.generation
        conds = with_condition(wl.status.conditions, EVICTED, "True", reason, message, now, gen)
        if preemption_reason is not None:
            conds = with_condition(conds, PREEMPTED, "True", preemption_reason, message, now, gen)
        return await self._patch_status(wl, {"conditions": _dump(conds)})

    async def _start_eviction(
        self,
        wl: Workload,
        reason: str,
        message: str,
        *,
        preemptor: Workload | None = None,
        preemption_reason: str | None = None,
    ) -> None:
        """Step 1: the Workload says Evicted (durable: a restart resumes from it); then stop its pods."""
        uid = wl.metadata.uid or ""
        if uid in self.evicting or uid not in self.admitted or not self.may_act():
            return
        now = self.clock()
        preemptor_uid = preemptor.metadata.uid if preemptor is not None else None
        # the ledger first: a restart resumes an eviction it recorded, even if the status write was lost
        try:
            await self.ledger.begin_eviction(
                uid, at=now, reason=reason, preemptor_uid=preemptor_uid, message=message
            )
        except NotAdmitted:
            return  # released meanwhile (finished): nothing to evict
        fault_point("eviction.after_ledger_start")
        out = await self._mark_evicted(wl, reason, message, preemption_reason)
        self.evicting[uid] = Evicting(uid, wl.key, reason, message, now, preemptor_uid)
        fault_point("eviction.after_mark")
        self.metrics.evicted(self.admitted[uid].cluster_queue, reason)
        log.info("evicting %s: %s", wl.key, message)
        await self.events.emit(out or wl, "Normal", "Preempted" if preemption_reason else "Evicted", message)
        await self._stop_pods(out or wl, message)
        fault_point("eviction.after_stop_pods")
        self._wake_at(now + self.eviction_timeout)

    async def _stop_pods(self, wl: Workload, why: str) -> None:
        """Suspend the Job (its pods are deleted by the Job controller) or delete a pod group's pods."""
        job = self._job_of(wl)
        if job is not None:
            if not job.spec.suspend and not job_finished(job)[0]:
                # (the planned node in the template is replaced at the next admission: the template
                # may only change while the Job is suspended)
                await self._suspend(job, f"evicted: {why}")
            return
        group = wl.labels.get(POD_GROUP_LABEL)
        if group:
            pods = [
                p
                for p in self._groups().get((wl.namespace or "default", group), [])
                if not _ended(p) and not p.metadata.deletion_timestamp
            ]
            if pods:
                # the pods own the Workload: keep it until the eviction is recorded (step 4)
                await self._eviction_finalizer(wl, True)
            for p in pods:
                try:
                    await retrying(
                        lambda p=p: self.kube.delete(PODS, p.name, p.namespace),  # type: ignore[misc]
                        what=f"delete Pod {p.key}",
                    )
                except Exception as e:
                    if not is_not_found(e):
                        raise

    async def _eviction_finalizer(self, wl: Workload, on: bool) -> None:
        """Add or remove :data:`ev.EVICTION_FINALIZER` on a Workload (a no-op when already so)."""
        have = list(wl.metadata.finalizers or [])
        if (ev.EVICTION_FINALIZER in have) == on:
            return
        want = [*have, ev.EVICTION_FINALIZER] if on else [f for f in have if f != ev.EVICTION_FINALIZER]
        try:
            raw = await self._patch(
                WORKLOADS,
                wl.name,
                {"metadata": {"finalizers": want or None}},
                wl.namespace,
                what=f"finalizers of Workload {wl.key}",
            )
        except Exception as e:
            if is_not_found(e):
                return
            raise
        self.workloads.observe(raw)

    def _holders(self, wl: Workload, admission: Admission) -> tuple[list[Pod], list[ResourceClaim]]:
        """The victim's pods that still run and the claims that still hold one of its planned devices."""
        uid = wl.metadata.uid or ""
        pods = [p for p in self.pods.list() if p.labels.get(WORKLOAD_UID_LABEL) == uid]
        group = wl.labels.get(POD_GROUP_LABEL)
        if group and self._job_of(wl) is None:
            pods += [
                p
                for p in self.group_pods.list()
                if p.labels.get(POD_GROUP_LABEL) == group and p.namespace == wl.namespace
            ]
        live = [p for p in pods if not _ended(p)]
        planned = ev.planned_devices(admission)
        claims = []
        for c in self.claims.list():
            if c.namespace != wl.namespace or c.status.allocation is None:
                continue
            results = c.status.allocation.devices.results or [] if c.status.allocation.devices else []
            if any((r.driver, r.pool, r.device) in planned for r in results):
                claims.append(c)
        return live, claims

    async def _drive_evictions(self) -> None:
        """Step 2 for every eviction in progress; step 3 and 4 for those whose pods and claims are gone."""
        by_uid = {w.metadata.uid: w for w in self.workloads.list()}
        now = self.clock()
        for uid, e in sorted(self.evicting.items()):
            wl = by_uid.get(uid)
            admission = self.admissions.get(uid)
            if wl is None or admission is None:
                self.evicting.pop(uid, None)
                continue
            live, claims = self._holders(wl, admission)
            if live:
                await self._stop_pods(wl, e.message)  # again after a restart or a user's unsuspend
            live_uids = {p.metadata.uid for p in live}
            shared = ev.shared_claims(admission)
            for c in claims:
                users = [r for r in c.status.reserved_for or [] if r.get("uid") in live_uids]
                if c.name in shared and not users and not live:
                    # the controller wrote this allocation (plan binding): it takes it back
                    raw = await self._patch(
                        RESOURCE_CLAIMS,
                        c.name,
                        {"status": {"allocation": None, "reservedFor": None}},
                        c.namespace,
                        subresource="status",
                        what=f"deallocate ResourceClaim {c.key}",
                    )
                    self.claims.observe(raw)
            if live or claims:
                if not e.stuck and now - e.started >= self.eviction_timeout:
                    e.stuck = True
                    msg = (
                        f"{e.key} did not go away within {self.eviction_timeout:g}s "
                        f"({len(live)} pod(s), {len(claims)} claim(s) left); its preemptor's plan is recomputed"
                    )
                    log.warning("%s", msg)
                    await self.events.emit(wl, "Warning", "EvictionStuck", msg)
                continue
            # step 3: the ledger releases the quota and records the eviction
            with contextlib.suppress(NotAdmitted):  # released before a restart: only the requeue was lost
                await self.ledger.evict(
                    uid, at=now, reason=e.reason, preemptor_uid=e.preemptor_uid, message=e.message
                )
                fault_point("eviction.after_ledger")
            self._hold_released(uid)
            self.admitted.pop(uid, None)
            self.admissions.pop(uid, None)
            self._forget_binding(uid)
            self.status_todo.discard(uid)
            self.pods_ready_seen.discard(uid)
            self.evicting.pop(uid, None)
            await self._requeue(wl, e)

    async def _requeue(self, wl: Workload, e: Evicting) -> None:
        """Step 4: QuotaReserved/Admitted False and Requeued — at once, or with backoff (or deactivated)
        after a PodsReadyTimeout. A pod group whose pods were deleted is being deleted with them (its
        pods owned it): only its finalizer goes."""
        if wl.metadata.deletion_timestamp:
            await self._eviction_finalizer(wl, False)
            log.info("evicted %s is being deleted (its pods are gone): not requeued", wl.key)
            return
        now = self.clock()
        gen = wl.metadata.generation
        why = f"evicted ({e.reason}): {e.message}"
        conds = with_condition(wl.status.conditions, QUOTA_RESERVED, "False", e.reason, why, now, gen)
        conds = with_condition(conds, ADMITTED, "False", e.reason, why, now, gen)
        status: dict[str, Any] = {"conditions": conds, "admission": None}
        if e.reason != ev.PODS_READY_TIMEOUT:
            # as in Kueue: only a waitForPodsReady timeout backs off (and counts toward the limit);
            # a preempted (or otherwise evicted) workload is pending again at once, requeueState untouched
            message = f"requeued at once after eviction ({e.reason})"
            status["conditions"] = with_condition(conds, REQUEUED, "True", e.reason, message, now, gen)
            status["reason"] = message
            await self._write_requeue(wl, status, "Requeued", f"quota released; {message}")
            return
        strategy = self.config.wait_for_pods_ready.requeuing_strategy
        count = wl.status.requeue_state.count or 0 if wl.status.requeue_state is not None else 0
        decision = next_requeue(count, now, strategy)
        if decision.deactivate:
            raw = await self._patch(
                WORKLOADS, wl.name, {"spec": {"active": False}}, wl.namespace, what=f"deactivate {wl.key}"
            )
            self.workloads.observe(raw)
            conds = with_condition(
                conds, EVICTED, "True", "DeactivatedDueToRequeuingLimitExceeded", decision.message, now, gen
            )
            status["conditions"] = with_condition(
                conds, REQUEUED, "False", "Deactivated", decision.message, now, gen
            )
            status["reason"] = "Deactivated"
        else:
            assert decision.requeue_at is not None
            status["conditions"] = with_condition(
                conds,
                REQUEUED,
                "True",
                e.reason,
                f"requeued after eviction ({e.reason}); {decision.message}",
                now,
                gen,
            )
            status["reason"] = f"requeued after eviction ({e.reason})"
            status["requeueState"] = {"count": decision.count, "requeueAt": fmt_time(decision.requeue_at)}
            self._wake_at(decision.requeue_at)
        await self._write_requeue(
            wl,
            status,
            "Requeued" if not decision.deactivate else "Deactivated",
            f"quota released; {decision.message}",
        )

    async def _write_requeue(self, wl: Workload, status: dict[str, Any], event: str, message: str) -> None:
        await self._patch_status(wl, {**status, "conditions": _dump(status["conditions"])})
        await self._eviction_finalizer(wl, False)
        fault_point("eviction.after_requeue")
        await self.events.emit(wl, "Normal", event, message)

    async def _check_admitted(self) -> None:
        """waitForPodsReady and lost placements: evict an admitted Workload whose pods are not all
        Ready within the timeout, whose planned node is gone, or whose planned device is tainted
        NoExecute."""
        wfpr = self.config.wait_for_pods_ready
        by_uid = {w.metadata.uid: w for w in self.workloads.list()}
        nodes = {n.name for n in self.nodes.list()}
        tainted = _tainted_devices(self.slices.list())
        now = self.clock()
        for uid in sorted(self.admitted):
            if uid in self.evicting or uid in self.status_todo:
                continue
            wl = by_uid.get(uid)
            admission = self.admissions.get(uid)
            if wl is None or admission is None or wl.status.is_true(FINISHED):
                continue
            gone = sorted(ev.planned_nodes(admission) - nodes)
            if gone and nodes:
                await self._start_eviction(
                    wl, ev.NODE_LOST, f"planned node(s) {', '.join(gone)} no longer exist"
                )
                continue
            bad = sorted(ev.planned_devices(admission) & tainted)
            if bad:
                names = ", ".join("/".join(d) for d in bad)
                await self._start_eviction(
                    wl, ev.DEVICE_TAINTED, f"planned device(s) {names} are tainted with effect NoExecute"
                )
                continue
            if not wfpr.enable or uid in self.pods_ready_seen:
                continue
            want = sum(psa.count or len(psa.placements or []) for psa in admission.pod_set_assignments)
            live, _ = self._holders(wl, admission)
            ready = sum(1 for p in live if _pod_ready(p))
            if want and ready >= want:
                self.pods_ready_seen.add(uid)
                continue
            job = self._job_of(wl)
            timeout = ev.pods_ready_timeout(wl, wfpr.timeout, job.annotations if job is not None else None)
            deadline = self.admitted[uid].admission_time + timeout
            if now >= deadline:
                await self._start_eviction(
                    wl,
                    ev.PODS_READY_TIMEOUT,
                    f"Exceeded the PodsReady timeout {timeout:g}s: {ready} of {want} pod(s) Ready",
                )
            else:
                self._wake_at(deadline)

    # ---- plan binding
    def _forget_binding(self, uid: str) -> None:
        self._bindings.pop(uid, None)
        self._verified.pop(uid, None)

    def _awaiting_allocation(self, but: str = "") -> set[str]:
        """Nodes of admissions bound node only whose claims kube-scheduler has not allocated yet."""
        mode = self.config.plan_binding_mode
        if mode == "Full":
            return set()
        nodes: set[str] = set()
        for uid, adm in self.admissions.items():
            if uid == but or self._verified.get(uid) is adm:
                continue
            hit = self._bindings.get(uid)
            if mode == "Auto" and (hit is None or not hit[1].node_only):
                continue  # bound Full, or not decided yet (the decision sees the cluster as it is then)
            nodes |= ev.planned_nodes(adm)
        return nodes

    def _hold_released(self, uid: str) -> None:
        """Hold until confirmed: an admission is released while one bound node only on the same node
        waits for kube-scheduler, which may give it a device released now instead of its planned one.
        The released placements on such nodes stay held until every admission bound node only there is
        confirmed (its allocation checked and recorded) or gone, or ``nodeOnlyConfirmTimeout`` passes."""
        adm = self.admissions.get(uid)
        if adm is None:
            return
        waiting = self._awaiting_allocation(but=uid)
        placements = [
            p for psa in adm.pod_set_assignments for p in psa.placements or [] if p.node_name in waiting
        ]
        if placements:
            self._held[uid] = (self.clock() + self.config.node_only_confirm_timeout, placements)

    def _held_claims(self) -> list[ResourceClaim]:
        """The held devices as allocated claims for the placer (only the placer sees them). A hold ends
        when no admission bound node only on its node awaits its allocation, or at its deadline."""
        if not self._held:
            return []
        now = self.clock()
        waiting = self._awaiting_allocation()
        out: list[ResourceClaim] = []
        for uid, (deadline, placements) in list(self._held.items()):
            keep = [p for p in placements if p.node_name in waiting] if now < deadline else []
            if not keep:
                del self._held[uid]
                continue
            self._held[uid] = (deadline, keep)
            self._wake_at(deadline)
            for p in keep:
                for i, c in enumerate(p.claims or []):
                    if not c.devices:
                        continue
                    out.append(
                        ResourceClaim.model_validate(
                            {
                                "metadata": {"name": f"held-{uid}-{p.index}-{i}", "namespace": "held"},
                                "status": {
                                    "allocation": {
                                        "devices": {
                                            "results": [_without_nulls(d.to_dict()) for d in c.devices]
                                        }
                                    }
                                },
                            }
                        )
                    )
        return out

    def _binding(self, wl: Workload, admission: Admission) -> BindingDecision:
        """Node only or Full for this admission. ``Auto`` asks :func:`choose_binding` once per
        admission, before any of its pods is released (until then its claims are not allocated, so
        asking again after a restart is as valid as the first answer)."""
        mode = self.config.plan_binding_mode
        if mode != "Auto":
            return BindingDecision(mode == "NodeOnly", f"planBindingMode {mode}")
        uid = wl.metadata.uid or ""
        hit = self._bindings.get(uid)
        if hit is not None and hit[0] is admission:
            return hit[1]
        if self._upstream is None:
            self._upstream = UpstreamView(
                self.nodes.list(),
                self.slices.list(),
                self.device_classes.list(),
                self.claims.list(),
                self.templates.list(),
                cache=self._selectors,
            )
        decision = choose_binding(
            admission,
            {ps.name: ps.claim_refs() for ps in wl.spec.pod_sets},
            wl.namespace or "default",
            self._upstream,
        )
        log.debug(
            "plan binding of %s: %s (%s)",
            wl.key,
            "node only" if decision.node_only else "Full",
            decision.reason,
        )
        self._bindings[uid] = (admission, decision)
        return decision

    async def _bind(self) -> None:
        self._upstream = None  # what kube-scheduler sees now (built when a decision needs it)
        by_uid = {w.metadata.uid: w for w in self.workloads.list()}
        pods_by_wl: dict[str, list[Pod]] = {}
        for p in self.pods.list():
            pods_by_wl.setdefault(p.labels.get(WORKLOAD_UID_LABEL, ""), []).append(p)
        groups = self._groups()

        async def bind(uid: str) -> None:
            wl = by_uid.get(uid)
            admission = self.admissions.get(uid)
            if wl is None or admission is None:
                return
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
                pods = members
            if self.config.plan_binding_mode != "Full" and self._verified.get(uid) is not admission:
                await self._check_allocations(wl, admission, pods)

        # workload after workload in UID order (binding decisions are taken in that order: the
        # semaphore is first come, first served), their writes side by side
        await each(
            [u for u in sorted(self.admitted) if u not in self.status_todo and u not in self.evicting],
            bind,
            limit=self.write_concurrency,
        )

    def _template_claims(self, wl: Workload, pod_set: str) -> bool:
        ps = wl.pod_set(pod_set)
        return ps is not None and any(c.resource_claim_template_name for c in ps.claim_refs())

    async def _allocate(self, claim: ResourceClaim, placement: Any, node: str) -> bool:
        """Write the planned allocation into a claim (Full mode). False when the claim already holds a
        different allocation (someone else allocated it: the plan cannot be bound as made)."""
        if claim.status.allocation is not None:
            planned = {(d.driver, d.pool, d.device) for d in placement.devices}
            have = {(r.driver, r.pool, r.device) for r in _allocated_results(claim)}
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
        fault_point("bind.after_claim_allocation")
        return True

    async def _start_job(self, wl: Workload, job: Job, admission: Admission) -> None:
        """Unsuspend an admitted Job in one write: pod template label (our pods informer), the placement
        gate when needed, the planned node when every pod of the pod set has the same one, the admitted
        parallelism (partial admission). Shared claims get their allocation first (Full mode)."""
        ns = wl.namespace or "default"
        psa = admission.pod_set_assignments[0] if admission.pod_set_assignments else None
        if psa is None:
            return
        binding = self._binding(wl, admission)
        full = not binding.node_only
        if full:
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
        elif HOSTNAME_LABEL in (job.spec.template.spec.node_selector or {}):
            ps = wl.pod_set(psa.name)
            if ps is None or HOSTNAME_LABEL not in (ps.template.spec.node_selector or {}):
                spec["nodeSelector"] = {HOSTNAME_LABEL: None}  # a previous admission's node
        if needs_gate(admission, psa.name, full, self._template_claims(wl, psa.name)):
            spec["schedulingGates"] = [{"name": GATE_PLACEMENT}]
        if spec:
            template["spec"] = spec
        patch: dict[str, Any] = {"spec": {"suspend": False, "template": template}}
        original = _original_parallelism(job)
        own = original if original is not None else job.spec.parallelism
        if psa.count is not None and own is not None and psa.count < own:
            # partial admission: the Job's own parallelism is kept to be restored on suspension
            patch["spec"]["parallelism"] = psa.count
            patch["metadata"] = {"annotations": {ORIGINAL_PARALLELISM_ANNOTATION: str(own)}}
        elif original is not None:  # left from an earlier partial admission: admitted in full now
            patch["spec"]["parallelism"] = original
            patch["metadata"] = {"annotations": {ORIGINAL_PARALLELISM_ANNOTATION: None}}
        fault_point("bind.before_start_job")
        raw = await retrying(
            lambda: self.kube.patch(JOBS, job.name, patch, job.namespace, patch_type="strategic"),
            what=f"start Job {job.key}",
        )
        self.jobs.observe(raw)
        fault_point("bind.after_start_job")
        how = ""
        if self.config.plan_binding_mode == "Auto":
            how = f"; plan binding: {'node only' if binding.node_only else 'Full'} ({binding.reason})"
        await self.events.emit(
            job,
            "Normal",
            "Started",
            f"Admitted by ClusterQueue {admission.cluster_queue}; plan: {plan_summary(admission)}{how}",
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
        full = not self._binding(wl, admission).node_only

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
            if full:
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
            labels = (raw.get("metadata") or {}).get("labels") or {}
            for informer, label in ((self.pods, WORKLOAD_UID_LABEL), (self.group_pods, POD_GROUP_LABEL)):
                if label in labels:  # the informer that watches it (a pod group's pods: group_pods)
                    informer.observe(raw)
            self.stats.pods_ungated += 1
            fault_point("bind.after_pod")

    async def _check_allocations(self, wl: Workload, admission: Admission, pods: list[Pod]) -> None:
        """kube-scheduler allocated the claims of pods bound node only: the devices must be the plan's.
        When they are not (a device was released between the plan and the allocation), the Workload's
        plan and the controller's record take the allocated devices — what the pods hold — and a
        Warning Event says so. Done once every planned pod's claims are allocated."""
        ns = wl.namespace or "default"
        by_index: dict[tuple[str, int], Pod] = {}
        for pod in pods:
            if not pod.spec.node_name or pod.metadata.deletion_timestamp or _gated(pod, GATE_ADMISSION):
                continue
            ps = pod.labels.get(POD_SET_LABEL)
            if ps is None and len(admission.pod_set_assignments) == 1:
                ps = admission.pod_set_assignments[0].name
            psa = next((a for a in admission.pod_set_assignments if a.name == ps), None)
            if psa is None or not psa.placements:
                continue
            raw = pod.annotations.get(PLACEMENT_INDEX_ANNOTATION) or pod.annotations.get(
                "batch.kubernetes.io/job-completion-index"
            )
            if raw is not None and raw.isdigit():
                by_index.setdefault((psa.name, int(raw)), pod)
            elif len(psa.placements) == 1:
                by_index.setdefault((psa.name, psa.placements[0].index), pod)
        new = admission.model_copy(deep=True)
        complete = True
        differs: list[str] = []
        for psa in new.pod_set_assignments:
            for pl in psa.placements or []:
                bound = by_index.get((psa.name, pl.index))
                for c in pl.claims or []:
                    if is_implicit_claim(c):
                        continue
                    name = c.resource_claim_name or (
                        pod_claim_name(bound, c.name) if bound is not None else None
                    )
                    claim = self.claims.get(name, ns) if name else None
                    if claim is None or claim.status.allocation is None:
                        complete = False
                        continue
                    got = _allocated_results(claim)
                    if device_results(got) == device_results(c.devices):
                        continue
                    differs.append(
                        f"ResourceClaim {claim.key} (claim {c.name} of pod {psa.name}[{pl.index}] on "
                        f"{pl.node_name}) got {describe_devices(got)}, planned {describe_devices(c.devices)}"
                    )
                    c.devices = [allocated_device(r) for r in got]
        if differs:
            new.planned_devices = new.count_planned_devices()
            out = await self._patch_status(wl, {"admission": _without_nulls(new.to_dict())})
            if out is None:
                return
            uid = wl.metadata.uid or ""
            self.admissions[uid] = new
            try:  # the ledger's plan rows follow (charges are the same: devices of the same classes)
                await self.ledger.rebind(
                    uid, ledger_pods(new, self._claim_specs(wl), DeviceIndex(self.slices.list()))
                )
            except LedgerError as e:
                log.warning("the ledger did not take the allocated devices of %s: %s", wl.key, e)
            a = self.admitted.get(uid)
            if a is not None:
                old = a.placement if isinstance(a.placement, Placement) else Placement(nodes=())
                self.admitted[uid] = dataclasses.replace(
                    a, placement=dataclasses.replace(old, detail=recorded_plan(new))
                )
            await self.events.emit(
                wl,
                "Warning",
                "AllocationDiffers",
                "kube-scheduler allocated other devices than planned: "
                + "; ".join(differs)
                + ". The plan and the ledger now record the allocated devices.",
            )
            admission = new
        if complete:
            self._verified[wl.metadata.uid or ""] = admission
            if self._held:
                self._wake.set()  # devices held for this binding may be plannable again

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
        # isolation: a ClusterQueue the model rejects says so in its status (once per message)
        invalid_cqs = invalid_cluster_queues(self.cluster_queues.invalid_objects())
        for name in self._invalid_status.keys() - invalid_cqs.keys():
            del self._invalid_status[name]
        for name, why in invalid_cqs.items():
            if self._invalid_status.get(name) != why:
                try:
                    await self._patch(
                        CLUSTER_QUEUES,
                        name,
                        {"status": invalid_status(why, self.clock())},
                        subresource="status",
                        what=f"status of ClusterQueue {name}",
                    )
                except Exception as e:
                    if not is_not_found(e):
                        raise
                self._invalid_status[name] = why
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


def _original_parallelism(job: Job) -> int | None:
    """The parallelism a partially admitted Job had before the controller lowered it."""
    raw = job.annotations.get(ORIGINAL_PARALLELISM_ANNOTATION, "")
    return int(raw) if raw.isdigit() else None


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


def _allocated_results(claim: ResourceClaim) -> list[DeviceRequestAllocationResult]:
    alloc = claim.status.allocation
    return list((alloc.devices.results or []) if alloc is not None and alloc.devices is not None else [])


def _gated(pod: Pod, gate: str = GATE_PLACEMENT) -> bool:
    return any(g.name == gate for g in pod.spec.scheduling_gates or [])


def _dump(conds: Iterable[Any]) -> list[dict[str, Any]]:
    return [c.to_dict() for c in conds]


def _status_dict(obj: ClusterQueue | LocalQueue) -> dict[str, Any]:
    return obj.status.to_dict()


def _cond_time(wl: Workload, type_: str) -> str | None:
    c = wl.status.condition(type_)
    return c.last_transition_time if c is not None else None


def _pod_ready(pod: Pod) -> bool:
    if pod.status.phase == "Succeeded":
        return True
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def _tainted_devices(slices: Iterable[ResourceSlice]) -> set[tuple[str, str, str]]:
    out: set[tuple[str, str, str]] = set()
    for sl in slices:
        for d in sl.spec.devices or []:
            if any(t.effect == "NoExecute" for t in d.taints or []):
                out.add((sl.spec.driver, sl.spec.pool.name, d.name))
    return out
