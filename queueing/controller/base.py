"""The controller's state and what every reconciler shares: the informers and the indexes their
deltas keep (Workloads by UID and owner, the pending set, the cluster cache), the per-workload
records (queueing/controller/records.py), the wake-ups, and the API writes (Workload status,
suspension of a Job or another integrated kind, Workload creation) with their retries.

The integrated kinds (queueing/integrations/registry.py) are watched per entry: one
:class:`KindSource` each for the kinds held by suspend (batch/v1 Job, RayJob, RayCluster, JobSet);
a kind served from a CRD gets its informer only once the CustomResourceDefinitions informer sees the
CRD served (and loses it when the CRD goes).

The reconcilers build on it, one concern per module: ``binding`` (plan binding), ``source`` (the
workload source: Jobs and pod groups become Workloads and finish), ``eviction``, ``admission``
(the scheduling cycle and the admission executor), ``queue_sync`` (queue objects: ledger copies and
status); ``controller`` runs them in one sync.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
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
    FINISHED,
    GATE_PLACEMENT,
    POD_GROUP_LABEL,
    POD_SET_LABEL,
    WORKLOAD_UID_LABEL,
    Admission,
    ClusterQueue,
    Cohort,
    LocalQueue,
    PodPlacement,
    ResourceFlavor,
    Topology,
    Workload,
    WorkloadPriorityClass,
)
from queueing.cache import ClusterCache, counted_pods_selectors, light_pod
from queueing.cache.pod_owners import PodOwners
from queueing.cache.reasons import ReasonChanges
from queueing.cache.workloads import PendingWorkloads
from queueing.config import Config
from queueing.controller.evict import Evicting
from queueing.controller.isolation import LEDGER_REJECTED, OutageLog, Quarantine
from queueing.controller.kueue_labels import JobSources
from queueing.controller.metrics import ControllerMetrics
from queueing.controller.plan import without_nulls as _without_nulls
from queueing.controller.records import FieldView, FlagView, Orphan, Records
from queueing.dra.allocator import SelectorCache
from queueing.dra.binding import (
    BindingDecision,
    UpstreamView,
)
from queueing.integrations.base import SuspendableJob
from queueing.integrations.job import BatchJob
from queueing.integrations.registry import Integration, pod_gated, suspendable
from queueing.kube.client import (
    CLUSTER_QUEUES,
    COHORTS,
    CRDS,
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
    TOPOLOGIES,
    WORKLOAD_PRIORITY_CLASSES,
    WORKLOADS,
    KubeClient,
    Resource,
)
from queueing.kube.events import EventRecorder
from queueing.kube.informer import Informer
from queueing.kube.writes import is_already_exists, is_not_found, retrying
from queueing.ledger.repository import Ledger
from queueing.ledger.state import ClusterQueueSpec as LedgerClusterQueue
from queueing.ledger.state import CohortSpec as LedgerCohort
from queueing.ledger.state import LocalQueueSpec as LedgerLocalQueue
from queueing.ledger.state import WorkloadSpec as LedgerWorkload
from queueing.scheduling.cycle import CycleMemo, PendingReason
from queueing.scheduling.from_api import (
    ApiContext,
    admitted_workload,
    queued_since,
)
from queueing.scheduling.jobs import QUEUE_NAME_LABEL, WorkloadError
from queueing.scheduling.kueue_labels import KUEUE_QUEUE_NAME_LABEL
from queueing.scheduling.snapshot import AdmittedWorkload
from queueing.verify import verify_from_env

log = logging.getLogger("queueing.controller")

REASON_MAX = 316


def _epoch(ts: str | None) -> float:
    if not ts:
        return 0.0
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


PriorityClasses = tuple[dict[str, int], dict[str, int]]  # WorkloadPriorityClasses, PriorityClasses


@dataclass(frozen=True)
class WantedWorkload:
    """The Workload an object waiting for one would get (or why it cannot have one), built for one
    version of it with the priority classes of then (controller/source.py)."""

    resource_version: str
    classes: PriorityClasses
    workload: Workload | WorkloadError | None

    @staticmethod
    def build(adapter: SuspendableJob, obj: KubeObject, classes: PriorityClasses) -> WantedWorkload:
        try:
            wl: Workload | WorkloadError | None = adapter.workload(*classes)
        except WorkloadError as e:
            wl = e
        return WantedWorkload(obj.metadata.resource_version or "", classes, wl)

    def holds_for(self, obj: KubeObject, classes: PriorityClasses) -> bool:
        return self.resource_version == (obj.metadata.resource_version or "") and self.classes == classes

    def priority(self) -> int:
        return (self.workload.spec.priority or 0) if isinstance(self.workload, Workload) else 0


@dataclass
class KindSource:
    """One integrated kind held by suspend: its informer (None while its CRD is not served), the keys
    of its objects to look at in the next sync (an ordered set, in delta order), and whether all are."""

    integration: Integration
    informer: Any = None  # Informer[...] (Jobs: an Informer or JobSources)
    dirty: dict[str, None] = field(default_factory=dict)
    all_dirty: bool = True

    @property
    def kind(self) -> str:
        return self.integration.kind

    @property
    def resource(self) -> Resource:
        i = self.integration
        return JOBS if i.kind == "Job" else Resource(i.group, i.version, i.plural, True, i.kind)

    @property
    def ready(self) -> bool:
        """Its informer is running and has listed once."""
        inf = self.informer
        if inf is None:
            return False
        return all(i.has_synced for i in getattr(inf, "informers", [inf]))


def _crd_projection(raw: dict[str, Any]) -> dict[str, Any]:
    """What the CRD informer keeps of a CustomResourceDefinition: its name and served versions."""
    versions = ((raw.get("spec") or {}).get("versions")) or []
    meta = raw.get("metadata") or {}
    return {
        "apiVersion": raw.get("apiVersion"),
        "kind": raw.get("kind"),
        "metadata": {k: meta[k] for k in ("name", "uid", "resourceVersion") if k in meta},
        "spec": {"versions": [{"name": v.get("name"), "served": v.get("served")} for v in versions]},
    }


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
    repaired: int = 0  # Workload statuses rewritten from the ledger's admission
    synced: int = 0  # dashboard: syncs finished (``syncs`` counts those begun)


class ControllerBase:
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
        # one record per admitted workload (queueing/controller/records.py); the fields are read and
        # written through views by field (``admitted``, ``admissions``, ``evicting``, ...)
        self.records = Records()
        self._bindings: FieldView[tuple[Admission, BindingDecision]] = FieldView(self.records, "binding")
        self._upstream: UpstreamView | None = None
        self._selectors = SelectorCache()
        self._verified: FieldView[Admission] = FieldView(
            self.records, "verified"
        )  # allocations match the plan
        # hold until confirmed: devices of a released admission on a node where an admission bound node
        # only waits for kube-scheduler's allocation (which may take them): uid -> (deadline, devices)
        self._held: FieldView[tuple[float, list[PodPlacement]]] = FieldView(self.records, "held")
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
        self.topologies: Informer[Topology] = inf(TOPOLOGIES, Topology)  # flavors' topologyName
        self.cohorts: Informer[Cohort] = inf(COHORTS, Cohort)
        self.cluster_queues: Informer[ClusterQueue] = inf(CLUSTER_QUEUES, ClusterQueue)
        self.local_queues: Informer[LocalQueue] = inf(LOCAL_QUEUES, LocalQueue)
        self.workloads: Informer[Workload] = inf(WORKLOADS, Workload)
        self.workload_priority_classes: Informer[WorkloadPriorityClass] = inf(
            WORKLOAD_PRIORITY_CLASSES, WorkloadPriorityClass
        )
        self.jobs: Informer[Job] | JobSources = inf(JOBS, Job, label_selector=QUEUE_NAME_LABEL)
        job_informers = [self.jobs]
        if self.config.accept_kueue_labels:  # acceptKueueLabels: Kueue-labelled Jobs too (kueue_labels.py)
            job_informers.append(inf(JOBS, Job, label_selector=KUEUE_QUEUE_NAME_LABEL))
            self.jobs = JobSources(job_informers)
        self.pods: Informer[Pod] = inf(PODS, Pod, label_selector=WORKLOAD_UID_LABEL)
        # the managed pods by Workload UID and by controlling owner, kept by the informer's deltas
        self.pod_owners = PodOwners()
        self.pods.add_mirror(self.pod_owners.apply)
        self.group_pods: Informer[Pod] = inf(PODS, Pod, label_selector=POD_GROUP_LABEL)
        # pod-gated kinds (queueing/integrations/podgated.py): queued pods not in a group yet (their
        # objects: ``gated_sources`` below)
        self.queued_pods: Informer[Pod] = inf(
            PODS, Pod, label_selector=f"{QUEUE_NAME_LABEL},!{POD_GROUP_LABEL}"
        )
        self.nodes: Informer[Node] = inf(NODES, Node)
        self.slices: Informer[ResourceSlice] = inf(RESOURCE_SLICES, ResourceSlice)
        self.device_classes: Informer[DeviceClass] = inf(DEVICE_CLASSES, DeviceClass)
        self.claims: Informer[ResourceClaim] = inf(RESOURCE_CLAIMS, ResourceClaim)
        self.templates: Informer[ResourceClaimTemplate] = inf(RESOURCE_CLAIM_TEMPLATES, ResourceClaimTemplate)
        self.priority_classes: Informer[PriorityClass] = inf(PRIORITY_CLASSES, PriorityClass)
        self.namespaces: Informer[Namespace] = inf(NAMESPACES, Namespace)
        # the pods queueing does not manage that take node resources (DaemonSets, system pods, other
        # teams' pods), in the cluster cache's light projection: the API server sends only those (not
        # the managed pods, which the plans account for, nor finished pods; see counted_pods_selectors)
        managed = (WORKLOAD_UID_LABEL, POD_GROUP_LABEL)
        counted_labels, counted_fields = counted_pods_selectors(managed)
        self.all_pods: Informer[Pod] = inf(
            PODS,
            Pod,
            label_selector=counted_labels,
            field_selector=counted_fields,
            transform=functools.partial(light_pod, labels=managed),
        )
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
        # the pending Workloads, kept by deltas (see queueing/cache/workloads.py): a Workload's
        # WorkloadInfo is built once per version, the backlog's runs stay sorted between cycles
        self.pending = PendingWorkloads(verify=self.verify)
        self.reasons = ReasonChanges(self.verify)  # the last pending reason written, per workload
        self._memo = CycleMemo()  # what cycles share (bound to the queue objects and the placer)
        self._memo_changes = -1  # the cluster cache's change count the memo's plans were made at
        self._ctx: ApiContext | None = None  # built again when what it holds changed
        self._specs: Any = None  # queue_specs(...): built again on a queue, cohort or flavor delta
        self._wl_uids: dict[str, str] = {}  # Workload UID -> key
        self._owned: dict[str, str] = {}  # controlling owner's UID -> key of its Workload
        # the integrated kinds held by suspend (queueing/integrations/registry.py), by kind; a kind
        # from a CRD gets its informer when the CRD is served (``_crd_delta``)
        self.sources: dict[str, KindSource] = {i.kind: KindSource(i) for i in suspendable()}
        self.sources["Job"].informer = self.jobs
        # the pod-gated kinds whose objects are read (StatefulSet: replicas and owner; LeaderWorkerSet,
        # from a CRD: owner and when a group is scaled away), by kind; never synced as sources
        self.gated_sources: dict[str, KindSource] = {i.kind: KindSource(i) for i in pod_gated()}
        for src in self.gated_sources.values():
            if not src.integration.crd:
                src.informer = inf(src.resource, src.integration.model, label_selector=QUEUE_NAME_LABEL)
        self._informers_running = False
        self.crds: Informer[KubeObject] = inf(CRDS, KubeObject, transform=_crd_projection)
        self.crds.add_mirror(self._crd_delta)
        # Jobs (keys) to look at in the next sync, in the order their deltas came (an ordered set)
        self._dirty_jobs: dict[str, None] = self.sources["Job"].dirty
        # at most this many Jobs get writes (Workload created, suspended) per sync: the rest wait for
        # the next, so that a burst of new Jobs does not hold up admissions, starts and finishes
        self.jobs_per_sync = 256
        # objects waiting for their Workload beyond one sync's batch, by UID: (resourceVersion, the
        # priority classes, the Workload built for it or why it cannot have one), built once per
        # version to order the batches by priority and used at the creation (controller/source.py)
        self._wanted: dict[str, WantedWorkload] = {}
        # pending reasons to write (key -> reason as written to it, oldest first), after the cycle's
        # admissions and starts; at most this many per sync (controller/admission.py _write_reasons)
        self._reasons_todo: dict[str, PendingReason] = {}
        self.reasons_per_sync = 256
        # a cycle's admissions are committed in ledger transactions of at most this many (in the
        # cycle's order): the first Jobs start while the rest are committed
        self.admissions_per_transaction = 64
        self._admitted_seen: dict[str, str] = {}  # uid -> key of the admissions the pending set knows
        # Workloads (keys) that no longer match their Job -> why: replaced (controller/eviction.py)
        self._to_replace: dict[str, str] = {}
        self._reactivated: list[str] = []  # keys of pending Workloads that changed (maybe reactivated)
        self.workloads.add_mirror(self._workload_delta)
        self.jobs.add_mirror(lambda old, new: self._dirty_jobs.setdefault((new or old).key))  # type: ignore[union-attr]
        for queue_informer in (
            self.flavors,
            self.topologies,
            self.cohorts,
            self.cluster_queues,
            self.local_queues,
            self.namespaces,
        ):
            queue_informer.add_mirror(self._queues_delta)
        for context_informer in (
            self.device_classes,
            self.templates,
            self.workload_priority_classes,
            self.priority_classes,
        ):
            context_informer.add_mirror(self._context_delta)
        self.claims.add_mirror(self._claim_delta)
        self.informers: list[Informer[Any]] = [
            self.crds,
            self.flavors,
            self.topologies,
            self.cohorts,
            self.cluster_queues,
            self.local_queues,
            self.workloads,
            self.workload_priority_classes,
            *job_informers,
            self.pods,
            self.group_pods,
            self.queued_pods,
            *(src.informer for src in self.gated_sources.values() if src.informer is not None),
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
        self.admitted: FieldView[AdmittedWorkload] = FieldView(self.records, "admitted")
        self.admissions: FieldView[Admission] = FieldView(self.records, "admission")  # the plan
        self.status_todo = FlagView(self.records, "status_todo")  # the status write not confirmed yet
        self.pending_reasons: dict[str, PendingReason] = {}  # workload key -> last reason
        self.inactive_cluster_queues: dict[str, str] = {}
        # workload UIDs the ledger knows -> since when each waits there (epoch seconds: its Job's
        # creation, or its last eviction; what the wait-time metrics measure from)
        self._recorded: dict[str, float] = {}
        self._to_record: set[str] = set()  # Workloads seen, maybe not in the ledger yet
        self._status_check: set[str] = set()  # admitted Workloads changed: status compared with the plan
        self._orphans: dict[str, Orphan] = {}  # admissions of deleted Workloads whose Job runs on
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
        self.evicting: FieldView[Evicting] = FieldView(self.records, "evicting")  # pods/claims not gone yet
        self.pods_ready_seen = FlagView(self.records, "pods_ready_seen")  # all its pods were Ready once
        self._wake = asyncio.Event()
        # independent API writes (one per Workload or Job) in flight at once within a step
        self.write_concurrency = 16
        self._task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Future[None]] = set()  # informers of a removed CRD stopping
        self._retry_handle: asyncio.TimerHandle | None = None
        self._timer_handles: dict[float, asyncio.TimerHandle] = {}
        self._step = asyncio.Lock()  # held during one sync: a graceful stop waits for it
        self._started = False
        self.leading = False
        self.synced = asyncio.Event()  # set after every completed sync (tests wait on conditions)
        # isolation (controller/isolation.py): queue objects the ledger refused; the outage's log
        self.quarantine = Quarantine(report=lambda o, m: self.events.emit(o, "Warning", LEDGER_REJECTED, m))
        self.outage = OutageLog()
        # queue objects being deleted that admitted workloads still use -> what their status says
        self._terminating: dict[tuple[str, str], str] = {}
        # (kind, key) of the queue objects with a deletionTimestamp (kept by the informers' deltas)
        self._deleting: set[tuple[str, str]] = set()
        self._invalid_status: dict[str, str] = {}  # ClusterQueue the model rejects -> status written
        # wedge detection (controller/health.py): when a sync last completed (time.monotonic())
        self.last_sync_completed: float | None = None

    def _workload_delta(self, old: Workload | None, new: Workload | None) -> None:
        """A Workload changed: the indexes by UID and owner, the pending set and its owner Job."""
        for wl, present in ((old, False), (new, True)):
            if wl is None:
                continue
            uid = wl.metadata.uid or ""
            if present:
                self._wl_uids[uid] = wl.key
                if uid not in self._recorded:
                    self._to_record.add(uid)
                if uid in self.admitted:
                    self._status_check.add(uid)
            elif self._wl_uids.get(uid) == wl.key:
                del self._wl_uids[uid]
            for o in wl.metadata.owner_references or []:
                if not o.controller:
                    continue
                if present:
                    self._owned[o.uid] = wl.key
                elif self._owned.get(o.uid) == wl.key:
                    del self._owned[o.uid]
                src = self._source_for(o.api_version, o.kind)
                if src is not None:
                    src.dirty.setdefault(f"{wl.namespace}/{o.name}")
            self.pending.mark(wl.key)

    def _source_for(self, api_version: str, kind: str) -> KindSource | None:
        src = self.sources.get(kind)
        return src if src is not None and src.integration.api_version == api_version else None

    def _gated_object(self, kind: str, namespace: str, name: str) -> Any:
        """An object of a watched pod-gated kind (None: not one, unknown, or its CRD not served)."""
        src = self.gated_sources.get(kind)
        return src.informer.get(name, namespace) if src is not None and src.informer is not None else None

    def _mark_all_sources(self) -> None:
        """Every object of every integrated kind is looked at in the next sync."""
        for src in self.sources.values():
            src.all_dirty = True

    def _crd_delta(self, old: KubeObject | None, new: KubeObject | None) -> None:
        """A CRD changed: an integrated kind's informer starts when its CRD serves its version, and
        stops when it no longer does."""
        name = (new or old).name  # type: ignore[union-attr]
        for src in [*self.sources.values(), *self.gated_sources.values()]:
            integ = src.integration
            if not integ.crd or integ.crd_name != name:
                continue
            versions = ((new.to_dict().get("spec") or {}).get("versions") or []) if new is not None else []
            served = any(v.get("name") == integ.version and v.get("served") for v in versions)
            if served and src.informer is None:
                self._enable_source(src)
            elif not served and src.informer is not None:
                self._disable_source(src)

    def _enable_source(self, src: KindSource) -> None:
        i: Informer[Any] = Informer(
            self.kube, src.resource, src.integration.model, label_selector=QUEUE_NAME_LABEL
        )
        i.add_handler(self._on_change)
        i.add_mirror(lambda old, new: src.dirty.setdefault((new or old).key))  # type: ignore[union-attr]
        src.informer, src.all_dirty = i, True
        self.informers.append(i)
        if self._informers_running:
            i.start()
        log.info("integration %s enabled: CRD %s is served", src.kind, src.integration.crd_name)
        self._wake.set()

    def _disable_source(self, src: KindSource) -> None:
        i = src.informer
        src.informer = None
        src.dirty.clear()
        if i in self.informers:
            self.informers.remove(i)
        task = asyncio.ensure_future(i.stop())
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        log.info("integration %s disabled: CRD %s is not served", src.kind, src.integration.crd_name)

    def log_disabled_sources(self) -> None:
        """One line per integrated kind whose CRD is not installed (not an error)."""
        for src in [*self.sources.values(), *self.gated_sources.values()]:
            if src.integration.crd and src.informer is None:
                log.info(
                    "integration %s disabled: CRD %s is not installed (its informer starts when it is)",
                    src.kind,
                    src.integration.crd_name,
                )

    def _queues_delta(self, old: KubeObject | None, new: KubeObject | None) -> None:
        self._specs = None
        obj = new if new is not None else old
        if obj is None:
            return
        key = (obj.kind or type(obj).KIND, obj.key)
        if new is not None and new.metadata.deletion_timestamp:
            self._deleting.add(key)
        else:
            self._deleting.discard(key)

    def _context_delta(self, old: KubeObject | None, new: KubeObject | None) -> None:
        self._ctx = None
        self.pending.context_changed()

    def _claim_delta(self, old: KubeObject | None, new: KubeObject | None) -> None:
        self._ctx = None
        self.pending.claim_changed((new or old).key)  # type: ignore[union-attr]

    def _workload_by_uid(self, uid: str) -> Workload | None:
        key = self._wl_uids.get(uid)
        return self.workloads.get_key(key) if key is not None else None

    def _note_admitted(self) -> None:
        """Admissions taken or given back since the last call: their Workloads and Jobs are looked at
        again (whether a Workload is pending depends on the controller's record, not only the object)."""
        seen = self._admitted_seen
        for uid in [u for u in seen if u not in self.admitted]:
            self._mark_workload(seen.pop(uid))
        for uid, a in self.admitted.items():
            if uid not in seen:
                seen[uid] = a.key
                self._mark_workload(a.key)

    def _mark_workload(self, key: str) -> None:
        self.pending.mark(key)
        wl = self.workloads.get_key(key)
        if wl is not None:
            for o in wl.metadata.owner_references or []:
                src = self._source_for(o.api_version, o.kind) if o.controller else None
                if src is not None:
                    src.dirty.setdefault(f"{wl.namespace}/{o.name}")

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
            self._recorded.pop(uid, None)
            self.pending_reasons.pop(obj.key, None)
            self._reasons_todo.pop(obj.key, None)
            owner = next((o for o in obj.metadata.owner_references or [] if o.controller), None)
            admission = self.admissions.get(uid)
            if owner is not None and owner.kind == "Job" and admission is not None:
                # kept for the Workload its Job gets next, while the Job runs (_forget_deleted)
                ns = obj.namespace or "default"
                self._orphans[uid] = Orphan(uid, obj.key, owner.uid, f"{ns}/{owner.name}", admission)

    def wake(self) -> None:
        self._wake.set()

    @property
    def informers_synced(self) -> bool:
        return all(i.has_synced for i in self.informers)

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

    def _context(self) -> ApiContext:
        if self._ctx is not None:
            return self._ctx
        objs: list[KubeObject] = [
            *self.device_classes.list(),
            *self.templates.list(),
            *self.claims.list(),
            *self.workload_priority_classes.list(),
            *self.priority_classes.list(),
        ]
        self._ctx = ApiContext.from_objects(objs, verify=self.verify)
        return self._ctx

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

    def _ledger_workload(self, wl: Workload) -> LedgerWorkload:
        """The ledger's record of a Workload: waiting since its Job's creation (``queued_since``)."""
        return LedgerWorkload(
            wl.metadata.uid or "",
            wl.namespace or "default",
            wl.name,
            wl.spec.queue_name or "",
            wl.spec.priority or 0,
            {
                "podSets": [
                    {"name": p.name, "count": p.count, "minCount": p.min_count} for p in wl.spec.pod_sets
                ]
            },
            owner_uid=_owner_uid(wl),
            queued_at_ms=round(self._queued_at_of(wl) * 1000),
        )

    def _queued_at_of(self, wl: Workload) -> float:
        """Since when the Workload waits as the cluster shows it (epoch seconds; see ``queued_since``)."""
        src = self._source_of(wl)  # its object's creation (a Job, a RayJob, ...)
        since = _epoch(queued_since(wl, src.object.metadata.creation_timestamp if src is not None else None))
        return since or self.clock()

    async def _record(self, wl: Workload) -> None:
        uid = wl.metadata.uid or ""
        if uid in self._recorded:
            return
        spec = self._ledger_workload(wl)
        await self.ledger.add_workload(spec, at=self.clock())
        self._recorded[uid] = (spec.queued_at_ms or 0) / 1000

    async def _record_seen(self) -> None:
        """Workloads the controller sees for the first time are recorded in the ledger (one
        transaction), waiting since their Job's creation: the wait-time report, ``queueing explain`` and
        the metrics measure the same wait."""
        todo, self._to_record = self._to_record, set()
        wls = [
            wl
            for uid in sorted(todo)
            if uid not in self._recorded
            and (wl := self._workload_by_uid(uid)) is not None
            and wl.spec.queue_name
            and not wl.status.is_true(FINISHED)
            and not wl.metadata.deletion_timestamp
        ]
        if not wls:
            return
        specs = [self._ledger_workload(wl) for wl in wls]
        try:
            await self.ledger.add_workloads(specs, at=self.clock())
        except BaseException:
            self._to_record |= todo  # tried again at the next sync
            raise
        for spec in specs:
            self._recorded[spec.uid] = (spec.queued_at_ms or 0) / 1000

    def _source_of(self, wl: Workload) -> SuspendableJob | None:
        """The object of an integrated kind held by suspend that owns ``wl`` (as its adapter)."""
        for o in wl.metadata.owner_references or []:
            src = self._source_for(o.api_version, o.kind) if o.controller else None
            if src is None or src.informer is None:
                continue
            obj = src.informer.get(o.name, wl.namespace)
            if obj is not None and obj.metadata.uid == o.uid:
                return src.integration.adapt(obj, self.config.accept_kueue_labels)
        return None

    def _pods_by_workload(self) -> Callable[[Workload], list[Pod]]:
        """The pods of each admitted Workload: those labelled with its UID, and for a Job's Workload
        every pod of its Job (a Workload recreated for the same Job took over the admission of the
        one whose UID the pod template carries). From the index the pods informer keeps
        (``PodOwners``); verify mode checks the index against the informer's pods."""
        owners = self.pod_owners
        if self.verify:
            owners.check(self.pods.list())

        def pods_of(wl: Workload) -> list[Pod]:
            src = self._source_of(wl)  # a Job's own pods (other kinds' pods are their children's)
            if isinstance(src, BatchJob) and src.job.metadata.uid:
                return owners.controlled_by(src.job.metadata.uid)
            return owners.labelled(wl.metadata.uid or "")

        return pods_of

    def _admitted_from(self, wl: Workload, admission: Admission, admission_time: float) -> AdmittedWorkload:
        """How the core sees ``wl`` admitted with ``admission`` (the ledger's plan, whatever its status
        shows). Raises FromApiError."""
        view = wl
        if wl.status.admission != admission:
            view = wl.model_copy(update={"status": wl.status.model_copy(update={"admission": admission})})
        return admitted_workload(
            view,
            self._context(),
            admission_time=admission_time,
            creation_time=_epoch(wl.metadata.creation_timestamp),
        )

    def _job_alive(self, key: str, uid: str) -> Job | None:
        """The Job ``key`` if it is the one with ``uid`` and neither finished nor being deleted."""
        job = self.jobs.get_key(key)
        if job is None or job.metadata.uid != uid or job.metadata.deletion_timestamp:
            return None
        return None if BatchJob(job).finished()[0] else job

    def _groups(self) -> dict[tuple[str, str], list[Pod]]:
        out: dict[tuple[str, str], list[Pod]] = {}
        for p in self.group_pods.list():
            if p.metadata.deletion_timestamp:
                continue
            out.setdefault((p.namespace or "default", p.labels.get(POD_GROUP_LABEL, "")), []).append(p)
        return out

    async def _suspend(self, job: Job | SuspendableJob, why: str) -> None:
        """Suspend an object held by suspend (its operator deletes its pods); a partial admission's
        lowered counts are given back in the same write (as Kueue restores the pod set info)."""
        src_job: SuspendableJob = BatchJob(job) if isinstance(job, Job) else job
        obj = src_job.object
        src = self.sources[obj.kind or "Job"]
        body = src_job.suspend_patch()
        raw = await retrying(
            lambda: self.kube.patch(
                src.resource,
                obj.name,
                body,
                obj.namespace,
                patch_type="json" if isinstance(body, list) else "merge",
            ),
            what=f"suspend {src.kind} {obj.key}",
        )
        src.informer.observe(raw)
        self.stats.suspended += 1
        log.info("suspended %s %s: %s", src.kind, obj.key, why)
        await self.events.emit(obj, "Normal", "Suspended", why)

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
        self._wake.set()  # its cycle is the next sync's (Workloads are created after the cycle)

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


def _owner_uid(wl: Workload) -> str | None:
    """The UID of the Workload's controller owner (its Job, its pod group's first pod, ...)."""
    return next((o.uid for o in wl.metadata.owner_references or [] if o.controller), None)


def _pod_set_of(wl: Workload, pod: Pod) -> str | None:
    """The pod set of a pod-group pod: the one its pod-set label names (the pod-gated kinds' pods), else
    the one whose template is the pod's spec (without node and gates)."""
    named = pod.labels.get(POD_SET_LABEL)
    if named is not None and wl.pod_set(named) is not None:
        return named
    mine = _without_nulls(pod.spec.model_copy(update={"node_name": None, "scheduling_gates": None}).to_dict())
    for ps in wl.spec.pod_sets:
        if _without_nulls(ps.template.spec.to_dict()) == mine:
            return ps.name
    return None


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
