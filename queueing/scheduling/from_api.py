"""Pure conversions between the API models and the scheduling core's snapshot types.

Used by the controller and the simulator (no I/O, no clock: times are parameters).

* :func:`flavor_spec`, :func:`cluster_queue_spec`, :func:`cohort_spec`, :func:`local_queue_spec`,
  :func:`namespace_labels` and :func:`queue_specs` (all of them from a list of objects);
* :class:`ApiContext` (DeviceClasses, claim templates, shared claims, priority classes) and
  :func:`workload_info`: a v1beta1 Workload -> :class:`WorkloadInfo` whose ``placement_request`` is a
  :class:`~queueing.scheduling.dra_placer.DraRequest` (pods from the podSet templates; claims from
  ``podSets[].resourceClaims`` or the template's ``spec.resourceClaims``); pod sets of equal specs
  get their parts and fit signature from the context's ``_PodSetMemo`` (checked in verify mode);
* :func:`admitted_workload`: an admitted Workload (``status.admission``) -> :class:`AdmittedWorkload`
  whose placement carries a :class:`~queueing.scheduling.dra_placer.RecordedPlan`;
* :func:`admission_status`: a cycle's :class:`~queueing.scheduling.cycle.Admission` -> the
  v1beta1 ``status.admission`` to write (flavors, charged usage, planned node and devices per pod).

Expected device charges per pod (``PodSetInfo.device_requests``, used to pick resource groups and
for the quota pre-check; the charge itself comes from the plan): ``ExactCount`` requests of claims
from templates (``count``, default 1; ``firstAvailable``: its first subrequest), a shared claim's
devices divided among the pod set's pods, and extended resources a DeviceClass backs
(``spec.extendedResourceName`` or ``deviceclass.resource.kubernetes.io/<class>``) under the class
name. Such extended resources are not plain ``requests``; an extended resource no class backs is
(quota resource ``nvidia.com/gpu`` from node allocatable).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from pydantic_core import PydanticSerializationError

from queueing.api.base import KubeObject
from queueing.api.core import Namespace, PriorityClass
from queueing.api.quantity import Quantity, amount_quantity
from queueing.api.resource import (
    DeviceClass,
    DeviceRequestAllocationResult,
    ResourceClaim,
    ResourceClaimSpec,
    ResourceClaimTemplate,
)
from queueing.api.v1beta1 import (
    Admission as ApiAdmission,
)
from queueing.api.v1beta1 import (
    AllocatedDevice,
    ClaimPlacement,
    ClusterQueue,
    Cohort,
    LocalQueue,
    PodPlacement,
    PodSet,
    PodSetAssignment,
    ResourceFlavor,
    Topology,
    Workload,
    WorkloadPriorityClass,
)
from queueing.api.v1beta1 import FairSharing as ApiFairSharing
from queueing.api.v1beta1 import LabelSelector as ApiLabelSelector
from queueing.api.v1beta1 import ResourceGroup as ApiResourceGroup
from queueing.dra.errors import AllocationError
from queueing.dra.extended import extended_resource_classes, spec_extended_requests
from queueing.dra.gang import spec_requests  # one definition of a pod's requests
from queueing.dra.verify import VerifyError
from queueing.scheduling.cycle import Admission
from queueing.scheduling.dra_placer import (
    ClaimRef,
    DraPlan,
    DraPodSet,
    DraRequest,
    RecordedClaim,
    RecordedDevice,
    RecordedPlan,
    RecordedPod,
    placement_metadata,
    placement_selector_keys,
)
from queueing.scheduling.placer import Placement
from queueing.scheduling.snapshot import (
    AdmittedWorkload,
    ClusterQueueSpec,
    CohortSpec,
    FlavorFungibility,
    FlavorQuotas,
    FlavorResource,
    FlavorSpec,
    LabelSelector,
    LabelSelectorRequirement,
    LocalQueueSpec,
    PodSetInfo,
    PreemptionPolicy,
    ResourceGroup,
    ResourceQuota,
    Taint,
    Toleration,
    WorkloadInfo,
)

__all__ = [
    "ApiContext",
    "FromApiError",
    "QueueSpecs",
    "admission_status",
    "admitted_workload",
    "cluster_queue_spec",
    "cohort_spec",
    "flavor_spec",
    "local_queue_spec",
    "namespace_labels",
    "queue_specs",
    "recorded_plan",
    "workload_info",
    "workload_priority",
]

ADMISSION_FAIR_SHARING_MODE = "UsageBasedAdmissionFairSharing"


class FromApiError(ValueError):
    """An object cannot be converted; the message names the object and the field."""


# ------------------------------------------------------------------------------------ queues
def _weight(fs: ApiFairSharing | None) -> Fraction:
    return fs.weight.value if fs is not None and fs.weight is not None else Fraction(1)


def _groups(groups: Sequence[ApiResourceGroup] | None) -> tuple[ResourceGroup, ...]:
    out = []
    for g in groups or []:
        flavors = tuple(
            FlavorQuotas(
                fq.name,
                {
                    r.name: ResourceQuota(
                        r.nominal_quota.value,
                        r.borrowing_limit.value if r.borrowing_limit is not None else None,
                        r.lending_limit.value if r.lending_limit is not None else None,
                    )
                    for r in fq.resources
                },
            )
            for fq in g.flavors
        )
        out.append(ResourceGroup(tuple(g.covered_resources), flavors))
    return tuple(out)


def label_selector(sel: ApiLabelSelector | None) -> LabelSelector | None:
    if sel is None:
        return None
    return LabelSelector(
        dict(sel.match_labels or {}),
        tuple(
            LabelSelectorRequirement(r.key, r.operator, tuple(r.values or ()))
            for r in sel.match_expressions or []
        ),
    )


def flavor_spec(rf: ResourceFlavor) -> FlavorSpec:
    s = rf.spec
    return FlavorSpec(
        name=rf.name,
        node_labels=dict(s.node_labels or {}),
        node_taints=tuple(
            Taint(t.key, t.value or "", t.effect)  # type: ignore[arg-type]
            for t in s.node_taints or []
        ),
        tolerations=tuple(
            Toleration(t.key or "", t.operator or "Equal", t.value or "", t.effect or "")
            for t in s.tolerations or []
        ),
        placement_policy=s.placement_policy or "FirstFit",
        topology_name=s.topology_name,
    )


def with_topology(f: FlavorSpec, topologies: Mapping[str, Topology]) -> FlavorSpec:
    """The flavor with its Topology's levels (none when it names no Topology or a missing one)."""
    t = topologies.get(f.topology_name) if f.topology_name else None
    if t is None:
        return f
    levels = tuple((lv.key, lv.device_attribute is not None) for lv in t.spec.levels)
    return replace(f, topology_levels=levels)


def cluster_queue_spec(cq: ClusterQueue) -> ClusterQueueSpec:
    s = cq.spec
    p = s.preemption
    ff = s.flavor_fungibility
    return ClusterQueueSpec(
        name=cq.name,
        resource_groups=_groups(s.resource_groups),
        cohort=s.cohort_name or None,
        queueing_strategy=s.queueing_strategy,
        preemption=PreemptionPolicy(
            within_cluster_queue=p.within_cluster_queue,
            reclaim_within_cohort=p.reclaim_within_cohort,
            borrow_within_cohort=p.borrow_within_cohort.policy if p.borrow_within_cohort else "Never",
            max_priority_threshold=p.borrow_within_cohort.max_priority_threshold
            if p.borrow_within_cohort
            else None,
        )
        if p is not None
        else PreemptionPolicy(),
        flavor_fungibility=FlavorFungibility(
            when_can_borrow="Borrow" if ff.when_can_borrow == "MayStopSearch" else "TryNextFlavor",
            when_can_preempt="Preempt" if ff.when_can_preempt == "MayStopSearch" else "TryNextFlavor",
        )
        if ff is not None
        else FlavorFungibility(),
        fair_weight=_weight(s.fair_sharing),
        stop_policy=s.stop_policy,
        namespace_selector=label_selector(s.namespace_selector),
        admission_fair_sharing=s.admission_scope is not None
        and s.admission_scope.admission_mode == ADMISSION_FAIR_SHARING_MODE,
    )


def cohort_spec(c: Cohort) -> CohortSpec:
    return CohortSpec(
        name=c.name,
        parent=c.spec.parent_name or None,
        resource_groups=_groups(c.spec.resource_groups),
        fair_weight=_weight(c.spec.fair_sharing),
    )


def local_queue_spec(lq: LocalQueue) -> LocalQueueSpec:
    return LocalQueueSpec(
        namespace=lq.namespace or "default",
        name=lq.name,
        cluster_queue=lq.spec.cluster_queue,
        fair_weight=_weight(lq.spec.fair_sharing),
        stop_policy=lq.spec.stop_policy,
        terminating=bool(lq.metadata.deletion_timestamp),
    )


def namespace_labels(namespaces: Iterable[Namespace]) -> dict[str, dict[str, str]]:
    """Namespace name -> labels, with ``kubernetes.io/metadata.name`` as the API server sets it."""
    return {ns.name: {"kubernetes.io/metadata.name": ns.name, **ns.labels} for ns in namespaces}


@dataclass(frozen=True)
class QueueSpecs:
    flavors: tuple[FlavorSpec, ...] = ()
    cluster_queues: tuple[ClusterQueueSpec, ...] = ()
    cohorts: tuple[CohortSpec, ...] = ()
    local_queues: tuple[LocalQueueSpec, ...] = ()
    namespaces: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


def queue_specs(objects: Iterable[KubeObject], extra_namespaces: Iterable[str] = ()) -> QueueSpecs:
    """The queue configuration among ``objects`` (others are ignored), sorted by name. Namespaces
    named in ``extra_namespaces`` without a Namespace object get only the metadata.name label."""
    rfs, cqs, cohorts, lqs, nss = [], [], [], [], []
    topologies: dict[str, Topology] = {}
    for o in objects:
        if isinstance(o, Topology):
            topologies[o.name] = o
        elif isinstance(o, ResourceFlavor):
            rfs.append(flavor_spec(o))
        elif isinstance(o, ClusterQueue):
            cqs.append(cluster_queue_spec(o))
        elif isinstance(o, Cohort):
            cohorts.append(cohort_spec(o))
        elif isinstance(o, LocalQueue):
            lqs.append(local_queue_spec(o))
        elif isinstance(o, Namespace):
            nss.append(o)
    labels: dict[str, Mapping[str, str]] = {n: {"kubernetes.io/metadata.name": n} for n in extra_namespaces}
    labels.update(namespace_labels(nss))
    rfs = [with_topology(f, topologies) for f in rfs]
    return QueueSpecs(
        tuple(sorted(rfs, key=lambda f: f.name)),
        tuple(sorted(cqs, key=lambda c: c.name)),
        tuple(sorted(cohorts, key=lambda c: c.name)),
        tuple(sorted(lqs, key=lambda q: q.key)),
        labels,
    )


# ------------------------------------------------------------------------------------ workloads
@dataclass(frozen=True)
class ApiContext:
    """What converting a Workload needs besides the Workload."""

    device_classes: Mapping[str, DeviceClass] = field(default_factory=dict)
    templates: Mapping[str, ResourceClaimTemplate] = field(default_factory=dict)  # "ns/name"
    claims: Mapping[str, ResourceClaim] = field(default_factory=dict)  # "ns/name"
    workload_priority_classes: Mapping[str, int] = field(default_factory=dict)
    priority_classes: Mapping[str, int] = field(default_factory=dict)
    default_priority: int = 0  # the globalDefault PriorityClass's value, if any
    extended_resources: bool = True  # DRAExtendedResource feature gate
    # verify mode (``queueing.dra.verify``): every answer of the pod-set memo also computed afresh
    verify: bool = False
    # ``_PodSetMemo``: what ``workload_info`` derived from pod sets of equal specs in this context
    memo: _PodSetMemo = field(default_factory=lambda: _PodSetMemo(), init=False, repr=False, compare=False)

    @classmethod
    def from_objects(
        cls, objects: Iterable[KubeObject], *, extended_resources: bool = True, verify: bool = False
    ) -> ApiContext:
        classes: dict[str, DeviceClass] = {}
        templates: dict[str, ResourceClaimTemplate] = {}
        claims: dict[str, ResourceClaim] = {}
        wpcs: dict[str, int] = {}
        pcs: dict[str, int] = {}
        default = 0
        for o in objects:
            if isinstance(o, DeviceClass):
                classes[o.name] = o
            elif isinstance(o, ResourceClaimTemplate):
                templates[f"{o.namespace or 'default'}/{o.name}"] = o
            elif isinstance(o, ResourceClaim):
                claims[f"{o.namespace or 'default'}/{o.name}"] = o
            elif isinstance(o, WorkloadPriorityClass):
                wpcs[o.name] = o.value
            elif isinstance(o, PriorityClass):
                pcs[o.name] = o.value
                if o.global_default:
                    default = o.value
        return cls(classes, templates, claims, wpcs, pcs, default, extended_resources, verify)

    @property
    def extended(self) -> dict[str, str]:
        """Extended resource name -> DeviceClass backing it (empty when the gate is off)."""
        if not self.extended_resources:
            return {}
        cached = self.__dict__.get("_extended")
        if cached is None:
            cached = extended_resource_classes(self.device_classes.values())
            object.__setattr__(self, "_extended", cached)
        return dict(cached)


def workload_priority(wl: Workload, ctx: ApiContext) -> int:
    """``spec.priority``; else the value of ``spec.priorityClassRef``; else the pod templates'
    ``priorityClassName`` (PriorityClass); else the globalDefault PriorityClass; else 0."""
    ref = f"Workload {wl.key}"
    if wl.spec.priority is not None:
        return wl.spec.priority
    pcr = wl.spec.priority_class_ref
    if pcr is not None:
        table = ctx.workload_priority_classes if pcr.kind == "WorkloadPriorityClass" else ctx.priority_classes
        if pcr.name not in table:
            raise FromApiError(f"{ref}: spec.priorityClassRef.name: {pcr.kind} {pcr.name!r} not found")
        return table[pcr.name]
    for i, ps in enumerate(wl.spec.pod_sets):
        name = ps.template.spec.priority_class_name
        if name:
            if name not in ctx.priority_classes:
                raise FromApiError(
                    f"{ref}: spec.podSets[{i}].template.spec.priorityClassName: PriorityClass {name!r} not found"
                )
            return ctx.priority_classes[name]
    return ctx.default_priority


def _claim_devices(spec: ResourceClaimSpec) -> tuple[dict[str, Fraction], bool]:
    """Expected device charges of a claim, and whether a plan charges exactly these (every request
    ``ExactCount`` of one DeviceClass, no adminAccess, no alternatives)."""
    out: dict[str, Fraction] = {}
    exact = True
    for r in spec.devices.requests or []:
        if r.exactly is not None:
            e = r.exactly
            if (e.allocation_mode or "ExactCount") == "ExactCount" and not e.admin_access:
                out[e.device_class_name] = out.get(e.device_class_name, Fraction(0)) + (e.count or 1)
            else:
                exact = False
        elif r.first_available:
            s = r.first_available[0]
            exact = exact and len(r.first_available) == 1
            if (s.allocation_mode or "ExactCount") == "ExactCount":
                out[s.device_class_name] = out.get(s.device_class_name, Fraction(0)) + (s.count or 1)
            else:
                exact = False
    return out, exact


def _pod_set_info(
    wl: Workload, i: int, ps: PodSet, ctx: ApiContext, extended: Mapping[str, str]
) -> tuple[PodSetInfo, DraPodSet]:
    """The scheduler's view of pod set ``i`` of ``wl`` (the general computation): it reads the
    Workload's namespace and of the pod set its name, count, minCount, ``resourceClaims`` and
    template spec, and ``ctx`` (what ``_PodSetMemo`` keys on); the rest only for error messages."""
    ns = wl.namespace or "default"
    ref = f"Workload {wl.key}"
    spec = ps.template.spec
    try:
        ext = spec_extended_requests(spec, extended, ref) if extended else {}
    except AllocationError as e:
        raise FromApiError(f"{ref}: spec.podSets[{i}].template.{e.field}: {e.message}") from None
    requests = {r: v for r, v in spec_requests(spec).items() if v and r != "pods" and r not in ext}
    devices: dict[str, Fraction] = {}
    for r, n in ext.items():
        cls = extended[r]
        devices[cls] = devices.get(cls, Fraction(0)) + n
    refs = ps.claim_refs()
    exact = True
    for c in refs:
        if c.resource_claim_template_name:
            t = ctx.templates.get(f"{ns}/{c.resource_claim_template_name}")
            if t is None:
                exact = False
                continue
            got, ok = _claim_devices(t.spec.spec)
            exact = exact and ok
            for k, v in got.items():
                devices[k] = devices.get(k, Fraction(0)) + v
        elif c.resource_claim_name and ps.count:
            exact = False  # a shared claim is charged once, to the workload owning it
            claim = ctx.claims.get(f"{ns}/{c.resource_claim_name}")
            if claim is not None:
                for k, v in _claim_devices(claim.spec)[0].items():
                    devices[k] = devices.get(k, Fraction(0)) + v / ps.count
    info = PodSetInfo(
        name=ps.name,
        count=ps.count,
        requests=requests,
        device_requests=devices,
        min_count=ps.min_count,
        node_selector=dict(spec.node_selector or {}),
        tolerations=tuple(
            Toleration(t.key or "", t.operator or "Equal", t.value or "", t.effect or "")
            for t in spec.tolerations or []
        ),
        devices_exact=exact,
    )
    claims = tuple(
        ClaimRef(c.name, c.resource_claim_name, c.resource_claim_template_name)
        for c in (ps.resource_claims or [])
    )
    return info, DraPodSet(ps.name, ps.template, claims)


def workload_info(
    wl: Workload,
    ctx: ApiContext,
    *,
    creation_time: float = 0.0,
    requeue_time: float | None = None,
    backoff_until: float | None = None,
) -> WorkloadInfo:
    """The scheduler's view of a Workload. Times are the caller's (seconds on its clock)."""
    ext = ctx.extended
    memo = ctx.memo
    infos, dps, remembered = [], [], []
    for i, ps in enumerate(wl.spec.pod_sets):
        info, d, r = memo.pod_set_info(wl, i, ps, ctx, ext)
        infos.append(info)
        dps.append(d)
        remembered.append(r)
    return WorkloadInfo(
        namespace=wl.namespace or "default",
        name=wl.name,
        queue_name=wl.spec.queue_name or "",
        pod_sets=tuple(infos),
        priority=workload_priority(wl, ctx),
        creation_time=creation_time,
        uid=wl.metadata.uid or "",
        requeue_time=requeue_time,
        backoff_until=backoff_until,
        active=wl.spec.active,
        placement_request=memo.request(tuple(dps), remembered, ctx.verify),
    )


# ------------------------------------------------------------------------------------ the memo
@dataclass(frozen=True, slots=True)
class _PodSetFacts:
    """What ``_pod_set_info`` derives from a pod set apart from its name and minCount, and the label
    keys its template's selectors read (``placement_selector_keys``)."""

    requests: Mapping[str, Fraction]
    device_requests: Mapping[str, Fraction]
    node_selector: Mapping[str, str]
    tolerations: tuple[Toleration, ...]
    devices_exact: bool
    selector_keys: frozenset[str]


#: a pod set's key in ``_PodSetMemo.facts`` and its facts
_Remembered = tuple[tuple[Any, ...], _PodSetFacts]

#: entries each table of ``_PodSetMemo`` keeps (the oldest go first): distinct pod-set shapes
MEMO_LIMIT = 4096


class _PodSetMemo:
    """Pod sets of equal specs get equal ``PodSetInfo`` parts and fit signatures: Jobs of one shape
    differ in their names, labels and uids, which neither reads. Kept per :class:`ApiContext` (the
    templates, shared claims and extended resources they also read are the context's).

    * ``facts``: ``(namespace, count, spec, resourceClaims)`` -> ``_PodSetFacts``, where ``spec`` is
      the template spec's wire form as JSON (``model_dump_json`` of the fields that were set: equal
      text, equal ``to_dict()`` and equal field values) and ``resourceClaims`` the pod set's own
      claims (None: the template's); everything ``_pod_set_info`` reads but the pod set's name and
      minCount, which are copied;
    * ``signatures``: per pod set ``(name, spec, resourceClaims, metadata)`` -> the ``DraRequest``
      signature, where ``metadata`` is the JSON of the template's ``placement_metadata`` (the labels
      its selectors read, topology annotations): with the spec everything ``placement_view`` reads.

    A spec that cannot be written as JSON is not remembered. In verify mode (``ApiContext.verify``)
    every answer is also computed afresh and a difference raises ``VerifyError``."""

    def __init__(self, limit: int = MEMO_LIMIT) -> None:
        self.limit = limit
        self.facts: dict[tuple[object, ...], _PodSetFacts] = {}
        self.signatures: dict[tuple[object, ...], str] = {}

    def _keep(self, table: dict[tuple[object, ...], Any], key: tuple[object, ...], value: object) -> None:
        if len(table) >= self.limit:
            del table[next(iter(table))]
        table[key] = value

    def pod_set_info(
        self, wl: Workload, i: int, ps: PodSet, ctx: ApiContext, extended: Mapping[str, str]
    ) -> tuple[PodSetInfo, DraPodSet, _Remembered | None]:
        """``_pod_set_info``, and the pod set's key in ``facts`` with its facts (None: not
        remembered)."""
        try:
            pod_spec = ps.template.spec  # its serializer directly: model_dump_json without the decode
            spec = pod_spec.__pydantic_serializer__.to_json(pod_spec, by_alias=True, exclude_unset=True)
        except PydanticSerializationError:
            info, d = _pod_set_info(wl, i, ps, ctx, extended)
            return info, d, None
        own = ps.resource_claims
        claims = (
            None
            if own is None
            else tuple((c.name, c.resource_claim_name, c.resource_claim_template_name) for c in own)
        )
        key = (wl.namespace or "default", ps.count, spec, claims)
        f = self.facts.get(key)
        if f is None:
            info, d = _pod_set_info(wl, i, ps, ctx, extended)
            f = _PodSetFacts(
                dict(info.requests),
                dict(info.device_requests),
                dict(info.node_selector),
                info.tolerations,
                info.devices_exact,
                placement_selector_keys(ps.template),
            )
            self._keep(self.facts, key, f)
            return info, d, (key, f)
        info = PodSetInfo(
            name=ps.name,
            count=ps.count,
            requests=dict(f.requests),
            device_requests=dict(f.device_requests),
            min_count=ps.min_count,
            node_selector=dict(f.node_selector),
            tolerations=f.tolerations,
            devices_exact=f.devices_exact,
        )
        d = DraPodSet(ps.name, ps.template, tuple(ClaimRef(*c) for c in claims or ()))
        if ctx.verify:
            general = _pod_set_info(wl, i, ps, ctx, extended)
            if (info, _dra_pod_set_value(d)) != (general[0], _dra_pod_set_value(general[1])):
                raise VerifyError(
                    "workload_info (pod-set memo)", info, general[0], f"Workload {wl.key} podSet {ps.name}"
                )
            if placement_selector_keys(ps.template) != f.selector_keys:
                raise VerifyError(
                    "workload_info (pod-set memo: selector keys)",
                    f.selector_keys,
                    placement_selector_keys(ps.template),
                    f"Workload {wl.key} podSet {ps.name}",
                )
        return info, d, (key, f)

    def request(
        self, pod_sets: tuple[DraPodSet, ...], remembered: Sequence[_Remembered | None], verify: bool
    ) -> DraRequest:
        """``DraRequest(pod_sets)``, its signature from ``signatures`` when every pod set was
        remembered (``pod_set_info``)."""
        parts = []
        for d, r in zip(pod_sets, remembered, strict=True):
            if r is None:
                return DraRequest(pod_sets)
            (_, _, spec, claims), f = r
            meta = placement_metadata(d.template, f.selector_keys)
            parts.append((d.name, spec, claims, json.dumps(meta, sort_keys=True) if meta else ""))
        sig_key = tuple(parts)
        sig = self.signatures.get(sig_key)
        if sig is None:
            req = DraRequest(pod_sets)
            self._keep(self.signatures, sig_key, req.signature)
            return req
        if verify:
            general = DraRequest(pod_sets).signature
            if sig != general:
                raise VerifyError("workload_info (signature memo)", sig, general)
        return DraRequest(pod_sets, sig)


def _dra_pod_set_value(d: DraPodSet) -> tuple[object, ...]:
    return (d.name, id(d.template), d.claims)


def queued_since(wl: Workload, owner_created: str | None = None) -> str | None:
    """Since when the Workload waits (RFC 3339), the one definition the ledger's ``queued_at``,
    ``queueing explain`` and the wait-time metrics use: its last requeue after an eviction (the
    ``Requeued`` condition turning True), else its owner's (the Job's) creation, else its own."""
    c = wl.status.condition("Requeued")
    if c is not None and c.status == "True" and c.last_transition_time:
        return c.last_transition_time
    return owner_created or wl.metadata.creation_timestamp


# ------------------------------------------------------------------------------------ admissions
def recorded_plan(adm: ApiAdmission) -> RecordedPlan:
    pods = []
    for psa in adm.pod_set_assignments:
        for pl in psa.placements or []:
            pods.append(
                RecordedPod(
                    psa.name,
                    pl.index,
                    pl.node_name,
                    tuple(
                        RecordedClaim(
                            c.name,
                            c.resource_claim_name,
                            tuple(
                                RecordedDevice(
                                    d.request,
                                    d.driver,
                                    d.pool,
                                    d.device,
                                    d.share_id,
                                    tuple(
                                        sorted((k, str(q)) for k, q in (d.consumed_capacity or {}).items())
                                    ),
                                    bool(d.admin_access),
                                )
                                for d in c.devices
                            ),
                        )
                        for c in pl.claims or []
                    ),
                )
            )
    return RecordedPlan(tuple(pods))


def admitted_workload(
    wl: Workload,
    ctx: ApiContext,
    *,
    admission_time: float,
    creation_time: float = 0.0,
    evicting: bool = False,
) -> AdmittedWorkload:
    """An admitted Workload (``status.admission`` set) as the scheduler sees it."""
    adm = wl.status.admission
    if adm is None:
        raise FromApiError(f"Workload {wl.key}: status.admission: not set (the workload is not admitted)")
    info = workload_info(wl, ctx, creation_time=creation_time)
    usage: dict[FlavorResource, Fraction] = {}
    counts: dict[str, int] = {}
    for j, psa in enumerate(adm.pod_set_assignments):
        ps = wl.pod_set(psa.name)
        if ps is None:
            raise FromApiError(
                f"Workload {wl.key}: status.admission.podSetAssignments[{j}].name: no podSet {psa.name!r}"
            )
        counts[psa.name] = psa.count if psa.count is not None else ps.count
        flavors = psa.flavors or {}
        for r, q in (psa.resource_usage or {}).items():
            f = flavors.get(r)
            if f is None:
                raise FromApiError(
                    f"Workload {wl.key}: status.admission.podSetAssignments[{j}].flavors: "
                    f"no flavor for resource {r!r} of resourceUsage"
                )
            usage[(f, r)] = usage.get((f, r), Fraction(0)) + q.value
    plan = recorded_plan(adm)
    nodes = tuple(p.node for p in plan.pods)
    return AdmittedWorkload(
        workload=info,
        cluster_queue=adm.cluster_queue,
        usage=usage,
        admission_time=admission_time,
        placement=Placement(nodes=nodes, device_charges={}, detail=plan),
        counts=counts,
        evicting=evicting,
    )


def _device(d: DeviceRequestAllocationResult) -> AllocatedDevice:
    kw: dict[str, object] = {"request": d.request, "driver": d.driver, "pool": d.pool, "device": d.device}
    if d.share_id is not None:
        kw["shareID"] = d.share_id
    if d.consumed_capacity:
        kw["consumedCapacity"] = {k: str(q) for k, q in d.consumed_capacity.items()}
    if d.admin_access:
        kw["adminAccess"] = True
    return AllocatedDevice.model_validate(kw)


def _q(v: Fraction, resource: str) -> Quantity:
    """An amount of ``resource`` as kubectl prints it (``16Gi`` of memory)."""
    return amount_quantity(v, resource)


def admission_status(adm: Admission) -> ApiAdmission:
    """``status.admission`` for an admission of the cycle: per podSet the flavors, the quota charged
    (the podSet's own requests × count, plus, on the first podSet, the device charges of the whole
    plan and anything not attributed otherwise) and the planned node and devices of every pod."""
    a = adm.assignment
    wl = adm.workload
    left: dict[FlavorResource, Fraction] = dict(a.usage)
    per_ps: list[tuple[dict[str, str], dict[str, Fraction]]] = []
    for ps in wl.pod_sets:
        fl = dict(a.flavors.get(ps.name, {}))
        n = a.counts.get(ps.name, ps.count)
        mine: dict[str, Fraction] = {}
        items = list(ps.requests.items())
        if "pods" in fl and "pods" not in ps.requests:
            items.append(("pods", Fraction(1)))
        for r, v in items:
            f = fl.get(r)
            if f is None or not v:
                continue
            k = (f, r)
            take = min(left.get(k, Fraction(0)), v * n)
            if take > 0:
                mine[r] = mine.get(r, Fraction(0)) + take
                left[k] -= take
        per_ps.append((fl, mine))
    if per_ps:
        fl, mine = per_ps[0]
        for (f, r), v in left.items():
            if v:
                mine[r] = mine.get(r, Fraction(0)) + v
                fl[r] = f
    plan = a.placement.detail
    by_ps: dict[str, list[PodPlacement]] = {}
    if isinstance(plan, DraPlan):
        for pp in plan.pods:
            by_ps.setdefault(pp.pod_set, []).append(
                PodPlacement(
                    index=pp.index,
                    node_name=pp.node,
                    claims=[
                        ClaimPlacement(
                            name=c.name,
                            resource_claim_name=c.resource_claim_name,
                            devices=[_device(d) for d in c.results],
                        )
                        for c in pp.claims
                    ]
                    or None,
                )
            )
    psas = []
    for ps, (fl, mine) in zip(wl.pod_sets, per_ps, strict=True):
        psas.append(
            PodSetAssignment(
                name=ps.name,
                flavors=fl or None,
                resource_usage={r: _q(v, r) for r, v in sorted(mine.items())} or None,
                count=a.counts.get(ps.name, ps.count),
                placements=by_ps.get(ps.name) or None,
            )
        )
    out = ApiAdmission(cluster_queue=adm.cluster_queue, pod_set_assignments=psas)
    out.planned_devices = out.count_planned_devices()
    return out
