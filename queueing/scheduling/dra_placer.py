"""A :class:`~queueing.scheduling.placer.Placer` over the DRA gang allocator (``queueing.dra``).

The scheduling core asks the placer whether a workload's pods fit, all or nothing, on the cluster
as it is with everything admitted or planned so far. :class:`DraPlacer` answers with
:func:`queueing.dra.gang.place_gang` and charges quota with :func:`queueing.dra.charges.charge_gang`:

* ``WorkloadInfo.placement_request`` is a :class:`DraRequest`: per pod set the pod template and the
  claims of each pod (from a ResourceClaimTemplate: one claim per pod; a ResourceClaim: shared).
  ``queueing.scheduling.from_api.workload_info`` builds it from a v1beta1 Workload.
* ``place`` builds ``counts[pod set]`` pods per pod set (``<workload>-<podset>-<index>``) whose
  node selector also carries the labels of every flavor assigned to the pod set and whose
  tolerations include the flavors' tolerations, places them with ``place_gang`` and returns a
  :class:`~queueing.scheduling.placer.Placement`: one node per pod (pod sets in order),
  ``device_charges`` from ``charge_gang`` (DeviceClass name -> device count, ``<class>/<capacity>``
  -> summed capacity; a claim shared with another workload is charged to none and listed in
  :attr:`DraPlan.unowned`) and as ``detail`` a :class:`DraPlan` (per pod: node, devices per claim,
  node resources, extended-resource mappings).
* Gangs of simple pods (claims from templates with plain ExactCount requests, no shared claims, no
  extended resources served through DRA) whose pod specs were placed before go through
  :func:`queueing.dra.gang.place_simple` and :func:`queueing.dra.charges.charge_own_claims`
  instead: the same placement, plan and charges, without the gang's pods, claims and per-claim
  charges; when it cannot tell (the search would backtrack, a failure to explain, ...) the general
  path above decides.
* Before either path a necessary condition (``_quick_miss``: enough free devices per node for
  what each pod needs at least) may reject the gang at once. With ``verify=True`` (verify mode,
  ``queueing.dra.verify``) every such fast path and cache also runs the general path and raises
  ``VerifyError`` on a difference.
* On failure the :class:`~queueing.scheduling.placer.PlacementFailure` message is the gang
  allocator's explanation: which pod (and claim/request) could not be placed, its best node and how
  short it is. Input errors that abort allocation (unknown template, CEL error, ...) are failures
  too, with the allocator's message naming the object and the field: they never abort a cycle.
  The workload's own pods and claims in either are references (``PlacementFailure.why``, see
  ``queueing.scheduling.reasons``): a pod by pod set and index, a claim by its name in the pod spec
  (``claim gpus of pod ns/w-main-0 (from ResourceClaimTemplate ns/t): <field>: <message>``), so
  the text is right for every workload of the shape it is given to.

States are values (:class:`DraState`: workload key -> plans held). The placer keeps one mutable
:class:`~queueing.dra.gang.ClusterState` and brings it in step with whatever state it is asked
about (the difference to the last one: plans are compared by identity), so trying alternatives in
the eviction planner costs only what changes. A plan added twice for one key (a preemptor's
reservation overlapping its victims') simply holds its devices twice: "not free".

A shared ResourceClaim (``resourceClaimName``) is allocated by the first plan that needs it and
stays allocated while any held plan uses it.

Plans recorded in a Workload's ``status.admission`` (after a restart) come in as
:class:`RecordedPlan` details; ``initial_state`` resolves them against the device inventory.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Collection, ItemsView, Iterator, KeysView, Mapping, Sequence, ValuesView
from dataclasses import MISSING, dataclass, field, fields
from fractions import Fraction
from functools import cached_property
from math import isqrt
from operator import countOf
from typing import Any

from queueing.api.base import ObjectMeta
from queueing.api.core import (
    Node,
    Pod,
    PodResourceClaim,
    PodSpec,
    PodTemplateSpec,
)
from queueing.api.core import Toleration as CoreToleration
from queueing.api.quantity import Quantity
from queueing.api.resource import (
    AllocationResult,
    DeviceAllocationResult,
    DeviceClass,
    DeviceRequestAllocationResult,
    ResourceClaim,
    ResourceClaimStatus,
    ResourceClaimTemplate,
    ResourceSlice,
)
from queueing.dra.allocator import ClaimAllocation, SelectorCache
from queueing.dra.charges import charge_gang, charge_own_claims
from queueing.dra.errors import AllocationError
from queueing.dra.explain import Part as DraPart
from queueing.dra.extended import (
    EXTENDED_RESOURCE_CLAIM_SUFFIX,
    ExtendedRequestMapping,
    is_extended_resource_claim,
    pod_extended_requests,
)
from queueing.dra.features import Features
from queueing.dra.gang import (
    DEFAULT_MAX_NODE_CHECKS,
    ClusterState,
    GangExplanation,
    place_gang,
    place_simple,
)
from queueing.dra.gang import _pod_requests as pod_requests  # one definition of a pod's requests
from queueing.dra.inventory import Pick
from queueing.dra.scoring import FIRST_FIT, LEAST_FRAGMENTATION, PlacementPolicy, Scorer, place_scored
from queueing.dra.topology import ANNOTATIONS as TOPOLOGY_ANNOTATIONS
from queueing.dra.topology import (
    PREFERRED,
    PREFERRED_ANNOTATION,
    REQUIRED,
    REQUIRED_ANNOTATION,
    SLICE_REQUIRED_ANNOTATION,
    SLICE_SIZE_ANNOTATION,
    Level,
    TopologyMode,
    place_in_topology,
)
from queueing.dra.verify import VerifyError, picks_value
from queueing.scheduling.placer import Placement, PlacementFailure
from queueing.scheduling.reasons import Part, PodClaimRef, PodRef, Why, pod_name
from queueing.scheduling.snapshot import AdmittedWorkload, FlavorSpec, Toleration, WorkloadInfo
from queueing.scheduling.verify import placement_value

__all__ = [
    "ClaimRef",
    "DraPlacer",
    "DraPlan",
    "DraPodSet",
    "DraRequest",
    "DraState",
    "PlannedClaim",
    "PodPlan",
    "RecordedClaim",
    "RecordedDevice",
    "RecordedPlan",
    "RecordedPod",
    "placement_metadata",
    "placement_selector_keys",
    "placement_view",
    "pod_name",
]


# ------------------------------------------------------------------------------------ requests
@dataclass(frozen=True)
class ClaimRef:
    """A pod's claim: ``name`` in the pod spec, from a template (per pod) or a shared claim."""

    name: str
    resource_claim_name: str | None = None
    resource_claim_template_name: str | None = None


# What decides where a pod of a template may go (and what the placer copies into a plan), in the
# wire form of a pod spec: ``placement_view`` keeps these and nothing else.
PLACEMENT_SPEC_FIELDS = (
    "nodeName",
    "nodeSelector",
    "affinity",
    "tolerations",
    "topologySpreadConstraints",
    "resourceClaims",
    "priority",
    "priorityClassName",
    "preemptionPolicy",
    "overhead",
    "resources",  # pod-level resources
)
# per container (and init container): its name (named in extended-resource mappings), requests,
# limits and claims, and ``restartPolicy`` (an init container with ``Always`` is a sidecar)
PLACEMENT_CONTAINER_FIELDS = ("name", "resources", "restartPolicy")


def _selected_keys(selector: object, out: set[str]) -> None:
    """Label keys a LabelSelector (wire form) reads."""
    if not isinstance(selector, dict):
        return
    out.update((selector.get("matchLabels") or {}).keys())
    for e in selector.get("matchExpressions") or []:
        if isinstance(e, dict) and isinstance(e.get("key"), str):
            out.add(e["key"])


def _pod_selector_keys(spec: Mapping[str, object]) -> set[str]:
    """Keys of the pod's own labels that its selectors read: the label selectors and
    ``matchLabelKeys`` / ``mismatchLabelKeys`` of pod (anti-)affinity terms and of topology spread
    constraints (a workload's pods may select each other, so these labels decide placement)."""
    keys: set[str] = set()
    terms: list[object] = []
    affinity = spec.get("affinity")
    if isinstance(affinity, dict):
        for kind in ("podAffinity", "podAntiAffinity"):
            a = affinity.get(kind)
            if not isinstance(a, dict):
                continue
            terms.extend(a.get("requiredDuringSchedulingIgnoredDuringExecution") or [])
            for w in a.get("preferredDuringSchedulingIgnoredDuringExecution") or []:
                if isinstance(w, dict):
                    terms.append(w.get("podAffinityTerm"))
    tsc = spec.get("topologySpreadConstraints")
    terms.extend(tsc if isinstance(tsc, list) else [])
    for t in terms:
        if not isinstance(t, dict):
            continue
        _selected_keys(t.get("labelSelector"), keys)
        for k in (*(t.get("matchLabelKeys") or ()), *(t.get("mismatchLabelKeys") or ())):
            if isinstance(k, str):
                keys.add(k)
    return keys


def placement_view(template: PodTemplateSpec) -> dict[str, Any]:
    """The part of a pod template that decides fit and placement (wire form): the fields of
    ``PLACEMENT_SPEC_FIELDS``, per container ``PLACEMENT_CONTAINER_FIELDS``, and of the labels only
    those that the template's own selectors read (``_pod_selector_keys``). Labels and annotations
    the API server or the Job controller add (``controller-uid``, ``job-name``,
    ``batch.kubernetes.io/*``), images, commands and the rest do not decide placement: templates
    that differ only there have one view."""
    spec = template.spec.to_dict()
    out: dict[str, Any] = {k: spec[k] for k in PLACEMENT_SPEC_FIELDS if spec.get(k) is not None}
    for kind in ("initContainers", "containers"):
        cs = spec.get(kind)
        if cs:
            out[kind] = [{k: c[k] for k in PLACEMENT_CONTAINER_FIELDS if c.get(k) is not None} for c in cs]
    view: dict[str, Any] = {"spec": out}
    meta = placement_metadata(template, _pod_selector_keys(spec))
    if meta:
        view["metadata"] = meta
    return view


def placement_selector_keys(template: PodTemplateSpec) -> frozenset[str]:
    """The keys of the template's own labels that its selectors read (``_pod_selector_keys``): the
    labels ``placement_view`` keeps. A function of ``template.spec`` alone."""
    return frozenset(_pod_selector_keys(template.spec.to_dict()))


def placement_metadata(template: PodTemplateSpec, selector_keys: Collection[str]) -> dict[str, Any]:
    """The ``metadata`` of ``placement_view`` (empty: the view has none): the template's labels
    among ``selector_keys`` (``placement_selector_keys``) and its topology annotations."""
    meta: dict[str, Any] = {}
    if selector_keys:
        labels = (template.metadata or {}).get("labels") or {}
        kept = {k: v for k, v in labels.items() if k in selector_keys}
        if kept:
            meta["labels"] = kept
    # the topology annotations decide placement too
    notes = (template.metadata or {}).get("annotations") or {}
    topo = {k: notes[k] for k in TOPOLOGY_ANNOTATIONS if k in notes}
    if topo:
        meta["annotations"] = topo
    return meta


@dataclass(frozen=True, eq=False)
class DraPodSet:
    name: str
    template: PodTemplateSpec
    claims: tuple[ClaimRef, ...] = ()  # empty: the template's own spec.resourceClaims

    @cached_property
    def placement(self) -> PodTemplateSpec:
        """The template as far as it decides placement (``placement_view``): what the placer builds
        its pods from, so that pods shared between workloads of one signature carry nothing of
        another workload."""
        return PodTemplateSpec.model_validate(placement_view(self.template))


@dataclass(frozen=True, eq=False)
class DraRequest:
    """What :class:`DraPlacer` needs to place a workload: its namespace's pods per pod set.
    Equal (and hashed) by what decides placement (the pod sets' names, ``placement_view`` of
    their templates and their claims), so workloads that differ only in labels, annotations or
    images share fit signatures."""

    pod_sets: tuple[DraPodSet, ...]
    signature: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not self.signature:
            sig = json.dumps(
                [
                    [
                        ps.name,
                        placement_view(ps.template),
                        [[c.name, c.resource_claim_name, c.resource_claim_template_name] for c in ps.claims],
                    ]
                    for ps in self.pod_sets
                ],
                sort_keys=True,
                separators=(",", ":"),
            )
            object.__setattr__(self, "signature", sig)

    def __hash__(self) -> int:
        return hash(self.signature)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DraRequest) and other.signature == self.signature

    def __repr__(self) -> str:
        return f"DraRequest({self.signature})"

    def pod_set(self, name: str) -> DraPodSet | None:
        return next((p for p in self.pod_sets if p.name == name), None)


# ------------------------------------------------------------------------------------ plans
@dataclass(frozen=True)
class PlannedClaim:
    """Devices planned for one claim of one pod (for the Workload's status.admission)."""

    name: str  # the claim's name in the pod spec (implicit extended-resource claim: its claim name)
    resource_claim_name: str | None  # shared claim (or the implicit claim's generated name)
    results: tuple[DeviceRequestAllocationResult, ...]
    extended: bool = False  # the implicit claim for extended resources (never written by us)


@dataclass(frozen=True, eq=False)
class PodPlan:
    pod_set: str
    index: int
    pod: str  # pod name in the plan
    node: str
    picks: tuple[Pick, ...]  # devices of the pod's own claims (template and implicit claims)
    shared: tuple[str, ...] = ()  # keys of shared claims the pod uses
    # shared claims allocated with this pod: (key, allocated claim or a ClaimAllocation)
    shared_new: tuple[tuple[str, ClaimAllocation | ResourceClaim], ...] = ()
    node_resources: tuple[tuple[str, Fraction], ...] = ()
    claims: tuple[PlannedClaim, ...] = ()
    extended_mappings: tuple[ExtendedRequestMapping, ...] = ()

    @property
    def devices(self) -> tuple[tuple[str, str, str], ...]:
        """(driver, pool, device) of every device the pod's own and newly allocated claims got."""
        out = [p.device.key for p in self.picks if not p.admin_access]
        for _, c in self.shared_new:
            if isinstance(c, ClaimAllocation):
                out.extend(p.device.key for p in c.picks if not p.admin_access)
        return tuple(out)


# ``_pod_plan``: the fields it sets; every other field of PodPlan keeps its (plain) default
_POD_PLAN_ARGS = ("pod_set", "index", "pod", "node", "picks", "node_resources", "claims")
_POD_PLAN_DEFAULTS = {f.name: f.default for f in fields(PodPlan) if f.name not in _POD_PLAN_ARGS}
assert all(v is not MISSING for v in _POD_PLAN_DEFAULTS.values()), "PodPlan: a field without a plain default"
assert {f.name for f in fields(PodPlan)} == {*_POD_PLAN_ARGS, *_POD_PLAN_DEFAULTS}
_new_object = object.__new__


def _pod_plan(
    pod_set: str,
    index: int,
    pod: str,
    node: str,
    picks: tuple[Pick, ...],
    node_resources: tuple[tuple[str, Fraction], ...],
    claims: tuple[PlannedClaim, ...],
) -> PodPlan:
    """``PodPlan(pod_set, index, pod, node, picks, node_resources=..., claims=...)``, the same
    object made without the frozen dataclass's ``__init__`` (one ``object.__setattr__`` per field,
    half of a simple placement's cost per pod): its ``__dict__`` filled at once."""
    p = _new_object(PodPlan)
    d = p.__dict__
    d.update(_POD_PLAN_DEFAULTS)
    d["pod_set"], d["index"], d["pod"], d["node"] = pod_set, index, pod, node
    d["picks"], d["node_resources"], d["claims"] = picks, node_resources, claims
    return p


@dataclass(frozen=True, eq=False)
class DraPlan:
    """The placer's plan for one workload (``Placement.detail``)."""

    pods: tuple[PodPlan, ...]
    unowned: tuple[str, ...] = ()  # claims used across workloads: charged to none (to report)
    # (driver, pool, device) -> DeviceClass it was allocated through (devices this plan allocated)
    device_classes: Mapping[tuple[str, str, str], str] = field(default_factory=dict)

    def value(self) -> tuple[object, ...]:
        """The plan as a value (plans compare by identity; verify mode compares them by this)."""
        return (
            tuple(
                (
                    p.pod_set,
                    p.index,
                    p.pod,
                    p.node,
                    picks_value(p.picks),
                    p.shared,
                    tuple(
                        (k, picks_value(c.picks) if isinstance(c, ClaimAllocation) else c.key)
                        for k, c in p.shared_new
                    ),
                    p.node_resources,
                    p.claims,
                    p.extended_mappings,
                )
                for p in self.pods
            ),
            self.unowned,
            tuple(sorted(self.device_classes.items())),
        )


@dataclass(frozen=True)
class RecordedDevice:
    request: str
    driver: str
    pool: str
    device: str
    share_id: str | None = None
    consumed_capacity: tuple[tuple[str, str], ...] = ()  # (name, quantity text)
    admin_access: bool = False


@dataclass(frozen=True)
class RecordedClaim:
    name: str
    resource_claim_name: str | None
    devices: tuple[RecordedDevice, ...]


@dataclass(frozen=True)
class RecordedPod:
    pod_set: str
    index: int
    node: str
    claims: tuple[RecordedClaim, ...]


@dataclass(frozen=True)
class RecordedPlan:
    """A plan as recorded in a Workload's status.admission (values only; resolved by the placer)."""

    pods: tuple[RecordedPod, ...]


@dataclass(frozen=True)
class DraState:
    """Which plans hold devices and node resources: workload key -> plans (usually one). A value:
    ``holds`` is never changed in place (states derived from this one share it)."""

    holds: Mapping[str, tuple[DraPlan, ...]] = field(default_factory=dict)
    # a state this one was derived from by ``DraPlacer.add``/``remove`` (the one before, or for
    # every ``_CHECKPOINT``-th state of a chain the checkpoint before) and the keys that may differ
    # from it, ``depth`` derivations from the root of the chain: lets the placer bring its
    # ClusterState in step by the difference only
    parent: DraState | None = field(default=None, compare=False, repr=False)
    changed: frozenset[str] = field(default=frozenset(), compare=False, repr=False)
    depth: int = field(default=0, compare=False, repr=False)


class _Holds(Mapping[str, tuple[DraPlan, ...]]):
    """Holds derived from others by setting or deleting keys, as ``dict(holds)`` changed in place
    would be (same items, same order), without copying every hold: a base dict shared with the
    holds it was derived from (never changed), the operations since (replayed in order when all
    items are needed) and the latest value of each key they touched. The base is rebuilt when the
    operations outgrow the square root of its size, so a change costs O(sqrt n), not O(n)."""

    __slots__ = ("_base", "_full_dict", "_latest", "_ops")

    def __init__(
        self,
        base: dict[str, tuple[DraPlan, ...]],
        ops: tuple[tuple[str, tuple[DraPlan, ...] | None], ...] = (),
        latest: dict[str, tuple[DraPlan, ...] | None] | None = None,
    ) -> None:
        self._base = base
        self._ops = ops  # (key, value); None deletes
        self._latest = latest if latest is not None else {}
        self._full_dict: dict[str, tuple[DraPlan, ...]] | None = None if ops else base

    @staticmethod
    def derive(
        holds: Mapping[str, tuple[DraPlan, ...]], key: str, value: tuple[DraPlan, ...] | None
    ) -> _Holds:
        """``holds`` with ``key`` set to ``value`` (None: deleted; the key must be there)."""
        if isinstance(holds, _Holds):
            base, ops, latest = holds._base, holds._ops, dict(holds._latest)
        elif isinstance(holds, dict):  # a state's holds are never changed in place: shared
            base, ops, latest = holds, (), {}
        else:
            base, ops, latest = dict(holds), (), {}
        ops = (*ops, (key, value))
        latest[key] = value
        if len(ops) > max(32, isqrt(len(base))):
            return _Holds(_replay(base, ops))
        return _Holds(base, ops, latest)

    def _full(self) -> dict[str, tuple[DraPlan, ...]]:
        if self._full_dict is None:
            self._full_dict = _replay(self._base, self._ops)
        return self._full_dict

    def __getitem__(self, key: str) -> tuple[DraPlan, ...]:
        if key in self._latest:
            v = self._latest[key]
            if v is None:
                raise KeyError(key)
            return v
        return self._base[key]

    def get(  # type: ignore[override]
        self, key: str, default: tuple[DraPlan, ...] | None = None
    ) -> tuple[DraPlan, ...] | None:
        if key in self._latest:
            v = self._latest[key]
            return v if v is not None else default
        return self._base.get(key, default)

    def __contains__(self, key: object) -> bool:
        if key in self._latest:
            return self._latest[key] is not None
        return key in self._base

    def __iter__(self) -> Iterator[str]:
        return iter(self._full())

    def __len__(self) -> int:
        return len(self._full())

    def keys(self) -> KeysView[str]:
        return self._full().keys()

    def items(self) -> ItemsView[str, tuple[DraPlan, ...]]:
        return self._full().items()

    def values(self) -> ValuesView[tuple[DraPlan, ...]]:
        return self._full().values()

    def __repr__(self) -> str:
        return repr(self._full())


def _replay(
    base: dict[str, tuple[DraPlan, ...]], ops: tuple[tuple[str, tuple[DraPlan, ...] | None], ...]
) -> dict[str, tuple[DraPlan, ...]]:
    out = dict(base)
    for k, v in ops:
        if v is None:
            del out[k]
        else:
            out[k] = v
    return out


_ZERO = Fraction(0)
_CHECKPOINT = 64  # see ``DraState.parent``: walks up a chain take at most this many steps per checkpoint
_MAX_DEPTH = 2048  # derivation chains longer than this are cut (the placer then compares all keys)


def _derived(state: DraState, holds: Mapping[str, tuple[DraPlan, ...]], key: str) -> DraState:
    depth = state.depth + 1
    if depth > _MAX_DEPTH:
        return DraState(holds)
    if depth % _CHECKPOINT:
        return DraState(holds, state, frozenset((key,)), depth)
    # a checkpoint: derived from the checkpoint (or root) before, with every key changed since;
    # the states in between are no longer kept alive by the chain
    changed = {key}
    x = state
    while x.depth % _CHECKPOINT and x.parent is not None:
        changed.update(x.changed)
        x = x.parent
    return DraState(holds, x, frozenset(changed), depth)


# ------------------------------------------------------------------------------------ the placer
@dataclass(slots=True)
class _FreeCounts:
    """The placer's necessary-condition check: an upper bound of free exclusive devices per node
    (devices blocked only by shared counters count as free, devices reachable from several nodes
    count on each, a plan held twice takes its devices twice): an over-estimate, never less. Nodes
    that reach a device allowing multiple allocations are unbounded. Kept per node name and as a
    histogram (free devices -> nodes), so a check costs the number of distinct values."""

    names: list[str]  # every node, cluster order
    # ``names`` by length, cluster order among names as long (its first with a property is the
    # shortest of the first ones, as ``min(..., key=len)`` over ``names`` finds it)
    by_length: list[str] = field(default_factory=list)
    caps: dict[str, tuple[int, int]] = field(default_factory=dict)  # bounded: devices, nodes named so
    by_name: dict[str, int] = field(default_factory=dict)  # bounded: free devices
    hist: dict[int, int] = field(default_factory=dict)  # free devices -> bounded nodes with as many
    unbounded: int = 0

    def update(self, name: str, taken: int) -> None:
        slot = self.caps.get(name)
        if slot is None:
            return
        cap, mult = slot
        v = cap - taken if taken < cap else 0
        old = self.by_name[name]
        if v != old:
            self.by_name[name] = v
            self.hist[old] -= mult
            self.hist[v] = self.hist.get(v, 0) + mult


_Pods = tuple[list[Pod], dict[str, tuple[Pod, str, int]]]  # see ``DraPlacer._pods``


@dataclass(slots=True)
class _PlanInfo:
    """What applying a held plan changes (``DraPlacer._info``)."""

    totals: list[tuple[dict[str, Fraction], list[tuple[str, Fraction]]]]  # node's used, its additions
    picks: tuple[Pick, ...]  # the pods' own picks, pod by pod
    taken: tuple[tuple[str, int], ...]  # node -> its picks ``_counted`` (the nodes whose counts change)
    shared: bool  # a pod uses or allocates a shared claim (then applied pod by pod)


# the key under which a plan keeps its ``_PlanInfo`` (with the placer's token) in its ``__dict__``
_PLAN_INFO = "_plan_info"


def _counted(p: Pick) -> bool:
    """Whether a pick may change ``Usage.node_taken``: an exclusive node-local device."""
    return not p.admin_access and not p.device.multi and p.device.node_name is not None


def _core_toleration(t: Toleration) -> CoreToleration:
    return CoreToleration(
        key=t.key or None, operator=t.operator, value=t.value or None, effect=t.effect or None
    )


class DraPlacer:
    """Gang placement with the exact DRA allocator. Build once per cluster view (nodes, slices,
    classes, claims, templates, pods not managed by queueing) and reuse it across cycles while that
    view does not change."""

    def __init__(
        self,
        nodes: Sequence[Node],
        slices: Sequence[ResourceSlice],
        classes: Sequence[DeviceClass] | Mapping[str, DeviceClass],
        claims: Sequence[ResourceClaim] = (),
        templates: Sequence[ResourceClaimTemplate] = (),
        pods: Sequence[Pod] = (),
        *,
        features: Features | None = None,
        cache: SelectorCache | None = None,
        max_node_checks: int | None = None,
        previous: DraPlacer | None = None,
        verify: bool = False,
    ) -> None:
        """``previous``: a placer of an earlier view of the cluster: what its ClusterState built from
        the same objects is taken over (see ``queueing.dra.gang.ClusterState``). ``verify``: verify
        mode (``queueing.dra.verify``): ``_quick_miss``, ``place_simple``, the free-device counts and
        the pods cache are checked against the general computation, and the allocator's greedy paths
        against its search; a difference raises ``VerifyError``."""
        self.verify = verify
        self.cluster: ClusterState = ClusterState(
            nodes,
            slices,
            classes,
            claims=claims,
            templates=templates,
            pods=pods,
            features=features,
            cache=cache if cache is not None else SelectorCache(),  # an empty one is falsy (len)
            previous=previous.cluster if previous is not None else None,
            verify=verify,
        )
        self.max_node_checks = max_node_checks
        self._scorer_obj: Scorer | None = None  # see ``_scorer``
        self._base_claims: dict[str, ResourceClaim] = dict(self.cluster.claims)
        self._applied: dict[str, tuple[DraPlan, ...]] = {}
        self._synced: DraState | None = None
        self._shared_users: dict[str, int] = {}
        self._shared_ours: dict[str, tuple[Pick, ...]] = {}  # shared claims allocated by held plans
        self._pods_cache: OrderedDict[tuple[object, ...], _Pods] = OrderedDict()
        self._resolved: dict[RecordedPlan, DraPlan] = {}
        self._specs: dict[tuple[object, ...], PodSpec] = {}  # see ``_spec``
        self._free: _FreeCounts | None = None  # built on first use, then kept in step
        # see ``_info``: kept on the plan itself under this placer's token (so that it goes with the
        # plan: most plans are tried and dropped within a cycle), as ``cached_property`` keeps a value
        self._plan_token = object()
        self._published: frozenset[str] | None = None  # see ``_published_resources``
        # (namespace, pod set, fit signature) -> ``_demand``
        self._demand_cache: dict[tuple[str, str, str], tuple[int, str, tuple[str, ...]]] = {}
        # DeviceClass names -> nodes (cluster order) that have devices of every one of them
        self._class_nodes: dict[tuple[str, ...], frozenset[str]] = {}
        # (claim name, (request, device) picked) -> plan of a pod's claim (see ``_planned``)
        self._planned_cache: dict[tuple[str, tuple[tuple[str, tuple[str, str, str]], ...]], PlannedClaim] = {}
        self._unit_cache: (
            tuple[
                dict[tuple[str, str, str], list[tuple[tuple[str, str, str, str], Fraction]]],
                set[tuple[str, str, str]],
            ]
            | None
        ) = None

    # ---- the cluster changing in place (see ``queueing.cache``) -----------------------------
    def set_claim(self, key: str, claim: ResourceClaim | None) -> None:
        """One of the cluster's own claims (not held by a plan) added, changed (``claim``) or gone
        (None), in place: what it takes is given back and what it takes now is taken, so the placer
        answers as one built with the new claims would. A claim that held plans use as a shared
        claim first takes every plan back (the next ``sync`` applies them again, in order)."""
        old = self._base_claims.get(key)
        if old is claim:
            return
        if key in self._shared_users or key in self._shared_ours:
            self.sync(DraState())
        cs = self.cluster
        if (old is not None and old.status.allocation is not None) != (
            claim is not None and claim.status.allocation is not None
        ):
            self._resolved = {}  # recorded plans resolve shared claims by whether they are allocated
        if old is not None:
            del self._base_claims[key]
            cs.claims.pop(key, None)
            self._base_take(cs.inventory.picks_of(old), -1)
        if claim is not None:
            self._base_claims[key] = claim
            cs.claims[key] = claim
            self._base_take(cs.inventory.picks_of(claim), 1)

    def _base_take(self, picks: Sequence[Pick], sign: int) -> None:
        cs = self.cluster
        if sign > 0:
            cs.usage.take_all(picks)
        else:
            cs.usage.give_back_all(picks)
        self._count_taken(picks)

    def set_pod(self, key: str, pod: Pod | None) -> None:
        """A pod not managed by queueing added, changed or gone, in place (its node's resources)."""
        self.cluster.set_pod(key, pod)

    def set_template(self, key: str, template: ResourceClaimTemplate | None) -> None:
        """A ResourceClaimTemplate added, changed or gone, in place."""
        self.cluster.set_template(key, template)
        self._demand_cache.clear()

    # ---- Placer protocol ---------------------------------------------------------------------
    def initial_state(self, admitted: Sequence[AdmittedWorkload]) -> DraState:
        holds: dict[str, tuple[DraPlan, ...]] = {}
        resolved: dict[RecordedPlan, DraPlan] = {}
        for a in admitted:
            pl = a.placement
            if not isinstance(pl, Placement):
                continue
            d = pl.detail
            if isinstance(d, RecordedPlan):
                plan = self._resolved.get(d) or resolved.get(d) or self._resolve(a.workload, d)
                resolved[d] = plan
                d = plan
            if isinstance(d, DraPlan):
                holds[a.key] = (*holds.get(a.key, ()), d)
        self._resolved = resolved
        return DraState(holds)

    def add(self, state: DraState, key: str, placement: Placement) -> DraState:
        d = placement.detail
        if not isinstance(d, DraPlan):
            return state
        return _derived(state, _Holds.derive(state.holds, key, (*state.holds.get(key, ()), d)), key)

    def remove(self, state: DraState, key: str) -> DraState:
        if key not in state.holds:
            return state
        return _derived(state, _Holds.derive(state.holds, key, None), key)

    def place(
        self,
        workload: WorkloadInfo,
        counts: Mapping[str, int],
        flavors: Mapping[str, Sequence[FlavorSpec]],
        state: DraState,
    ) -> Placement | PlacementFailure:
        req = workload.placement_request
        if not isinstance(req, DraRequest):
            return Placement(nodes=(), device_charges={}, detail=DraPlan(()))
        try:
            groups = self._groups(workload, req, counts, flavors)
        except AllocationError as e:
            return PlacementFailure(str(e))
        if not groups:
            return Placement(nodes=(), device_charges={}, detail=DraPlan(()))
        self.sync(state)
        quick = self._quick_miss(workload, req, counts)
        if quick is not None:
            if self.verify:
                general = self._place_gang(workload, req, counts, flavors)
                if isinstance(general, Placement):
                    raise VerifyError(
                        "DraPlacer._quick_miss", quick, placement_value(general), f"workload {workload.key}"
                    )
            return PlacementFailure(quick)
        policy = _policy(flavors)
        topo = _topology(req, flavors)
        if isinstance(topo, str):
            return PlacementFailure(topo)
        if topo is not None:
            return self._place_gang(workload, req, counts, flavors, policy, topo)
        if policy != FIRST_FIT:
            # a score's order: ``place_simple`` follows first fit's descent only
            return self._place_gang(workload, req, counts, flavors, policy)
        simple = self._place_simple(workload, groups)
        if simple is not None:
            if self.verify:
                general = self._place_gang(workload, req, counts, flavors)
                fast, want = placement_value(simple), placement_value(general)
                if fast != want:
                    raise VerifyError(
                        "DraPlacer._place_simple (place_simple)", fast, want, f"workload {workload.key}"
                    )
            return simple
        return self._place_gang(workload, req, counts, flavors)

    def _place_gang(
        self,
        workload: WorkloadInfo,
        req: DraRequest,
        counts: Mapping[str, int],
        flavors: Mapping[str, Sequence[FlavorSpec]],
        policy: PlacementPolicy = FIRST_FIT,
        topology: tuple[tuple[Level, ...], int, TopologyMode] | None = None,
    ) -> Placement | PlacementFailure:
        """``place``'s general path: the gang's pods placed by :func:`place_gang` (the state synced),
        under the flavors' placement ``policy`` (:func:`queueing.dra.scoring.place_scored`)."""
        try:
            pods, slots = self._pods(workload, req, counts, flavors)
        except AllocationError as e:
            return PlacementFailure(str(e))
        try:
            bound = DEFAULT_MAX_NODE_CHECKS if self.max_node_checks is None else self.max_node_checks
            if topology is not None:
                levels, level, mode = topology
                result = place_in_topology(
                    pods,
                    self.cluster,
                    levels,
                    level,
                    mode,
                    policy,
                    scorer=self._scorer(),
                    max_node_checks=bound,
                ).result
            elif policy == FIRST_FIT:
                result = place_gang(pods, self.cluster, max_node_checks=bound)
            else:
                result = place_scored(
                    pods, self.cluster, policy, scorer=self._scorer(), max_node_checks=bound
                )
        except AllocationError as e:
            return _failure("allocation-error", slots, error=e)
        if not result.placed:
            expl = result.explanation
            if expl is None:
                return PlacementFailure("the gang does not fit")
            return _failure("placement", slots, expl=expl)
        txn = result.transaction
        assert txn is not None
        try:
            key = workload.key
            charges = charge_gang(result, self.cluster, pods, workload_of=lambda _p: key)
            plans: list[PodPlan] = []
            for pp in result.placements:
                pod, ps_name, i = slots[pp.pod]
                shared = set(pp.shared)
                own: list[Pick] = []
                shared_new: list[tuple[str, ClaimAllocation | ResourceClaim]] = []
                planned: list[PlannedClaim] = []
                prefix = f"{pod.name}-"
                for ca in pp.claims:
                    devices = ca.allocation.devices
                    results = tuple((devices.results or []) if devices else [])
                    if shared and ca.claim.key in shared:
                        shared_new.append((ca.claim.key, ca))
                    else:
                        own.extend(ca.picks)
                        ext = is_extended_resource_claim(ca.claim)
                        name = ca.claim.name
                        if not ext and name.startswith(prefix):
                            name = name[len(prefix) :]
                        planned.append(PlannedClaim(name, None, results, ext))
                for prc in pod.spec.resource_claims or []:
                    if prc.resource_claim_name:
                        skey = f"{pod.namespace}/{prc.resource_claim_name}"
                        alloc = self._shared_results(skey, txn.shared.get(skey))
                        planned.append(PlannedClaim(prc.name, prc.resource_claim_name, alloc))
                plans.append(
                    PodPlan(
                        ps_name,
                        i,
                        pod.name,
                        pp.node,
                        tuple(own),
                        tuple(pp.shared),
                        tuple(shared_new),
                        pp.node_resources,
                        tuple(planned),
                        pp.extended_mappings,
                    )
                )
            classes = {(d[1], d[2], d[3]): d[0] for c in charges.claims for d in c.devices}
            plan = DraPlan(tuple(plans), tuple(c.claim for c in charges.unowned), classes)
            dev = {k: Fraction(v) for k, v in charges.for_workload(key).items() if v}
        finally:
            txn.discard()
        return Placement(nodes=tuple(p.node for p in plans), device_charges=dev, detail=plan)

    def _scorer(self) -> Scorer:
        """The placement scorer of this placer's cluster state (built on first use)."""
        if self._scorer_obj is None:
            self._scorer_obj = Scorer(self.cluster, verify=self.verify)
        return self._scorer_obj

    def _groups(
        self,
        workload: WorkloadInfo,
        req: DraRequest,
        counts: Mapping[str, int],
        flavors: Mapping[str, Sequence[FlavorSpec]],
    ) -> list[tuple[str, int, PodSpec]]:
        """The pod sets ``_pods`` makes pods of (pod set, pods, their spec), in order."""
        out: list[tuple[str, int, PodSpec]] = []
        for ps in workload.pod_sets:
            dps = req.pod_set(ps.name)
            if dps is None:
                continue
            n = counts.get(ps.name, ps.count)
            spec = self._spec(req, dps, flavors.get(ps.name, ()))
            if n > 0:
                out.append((ps.name, n, spec))
        return out

    def _place_simple(
        self, workload: WorkloadInfo, groups: Sequence[tuple[str, int, PodSpec]]
    ) -> Placement | None:
        """``place`` through :func:`queueing.dra.gang.place_simple` (the same placement and plan,
        built without the gang's pods, claims and charges per claim), or None when it cannot tell."""
        cs = self.cluster
        ns = workload.namespace or "default"
        got = place_simple(
            [(spec, ns, n) for _, n, spec in groups],
            cs,
            max_node_checks=DEFAULT_MAX_NODE_CHECKS if self.max_node_checks is None else self.max_node_checks,
        )
        if got is None:
            return None
        plans: list[PodPlan] = []
        owned: list[tuple[ResourceClaim, Sequence[Pick]]] = []
        names = cs.node_names
        wname = workload.name
        planned_of = self._planned
        # for the plan's ``_PlanInfo`` (what ``_info`` computes): pods per node and pod set, the
        # pods' picks in order and the counted ones per node
        per: dict[int, list[int]] = {}
        all_picks: list[Pick] = []
        taken: dict[str, int] = {}
        k = 0
        ng = len(groups)
        for g, ((ps_name, n, _), sps) in enumerate(zip(groups, got.pod_sets, strict=True)):
            one = len(sps.claims) == 1
            first = sps.claims[0][0] if one else ""
            start = len(all_picks)
            for i in range(n):
                per_claim = got.picks[k]
                node_i = got.nodes[k]
                if one:
                    own = per_claim[0]
                    planned: tuple[PlannedClaim, ...] = (planned_of(first, own),)
                else:
                    own = tuple(p for c in per_claim for p in c)
                    planned = tuple(
                        planned_of(name, picks)
                        for (name, _), picks in zip(sps.claims, per_claim, strict=True)
                    )
                    owned.extend(
                        (claim, picks) for (_, claim), picks in zip(sps.claims, per_claim, strict=True)
                    )
                all_picks.extend(own)
                plans.append(
                    _pod_plan(
                        ps_name, i, pod_name(wname, ps_name, i), names[node_i], own, sps.resources, planned
                    )
                )
                row = per.get(node_i)
                if row is None:
                    row = per[node_i] = [0] * ng
                row[g] += 1
                k += 1
            if one:
                owned.append((sps.claims[0][1], all_picks[start:]))
        charges, classes = charge_own_claims(owned)
        plan = DraPlan(tuple(plans), (), classes)
        dev = {r: v if type(v) is Fraction else Fraction(v) for r, v in charges.items() if v}
        # a pod set's requests times its pods on a node: the sum ``_info`` adds up pod by pod
        totals: list[tuple[dict[str, Fraction], list[tuple[str, Fraction]]]] = []
        for i, by_group in per.items():
            acc: dict[str, Fraction] = {}
            for cnt, sps in zip(by_group, got.pod_sets, strict=True):
                if cnt:
                    for r, v in sps.resources:
                        have = acc.get(r)
                        acc[r] = v * cnt if have is None else have + v * cnt
            totals.append((cs.used[i], [(r, v) for r, v in acc.items() if v]))
        for p in all_picks:
            if _counted(p):
                name = p.device.node_name
                assert name is not None
                taken[name] = taken.get(name, 0) + 1
        self._keep_info(plan, _PlanInfo(totals, tuple(all_picks), tuple(taken.items()), False))
        return Placement(nodes=tuple(p.node for p in plans), device_charges=dev, detail=plan)

    def _planned(self, name: str, picks: tuple[Pick, ...]) -> PlannedClaim:
        """The plan of a pod's claim from a template allocated with these picks (a value: shared)."""
        if len(picks) == 1:
            p = picks[0]
            key: tuple[str, tuple[tuple[str, tuple[str, str, str]], ...]] = (
                name,
                ((p.request, p.device.key),),
            )
        else:
            key = (name, tuple((p.request, p.device.key) for p in picks))
        hit = self._planned_cache.get(key)
        if hit is None:
            if len(self._planned_cache) >= 65_536:
                self._planned_cache.clear()
            hit = self._planned_cache[key] = PlannedClaim(
                name, None, self.cluster.allocator.plain_results(picks), False
            )
        return hit

    # ---- queries ---------------------------------------------------------------------------
    def free_devices(self, state: DraState) -> int:
        """Devices not taken (exclusive use) in ``state`` (for utilisation figures)."""
        self.sync(state)
        taken = self.cluster.usage.devices
        return sum(1 for d in self.cluster.inventory.devices.values() if not taken.get(d.key))

    def busy_units(self, state: DraState) -> float:
        """How many physical devices are in use in ``state``, fractionally: a device that consumes
        shared counters (a partitionable GPU and its MIG slices) counts per counter set as the largest
        used fraction of its counters; other devices count 1 when taken (exclusively or, on a device
        with multiple allocations, by any consumed capacity)."""
        self.sync(state)
        sets, lone = self._units()
        u = self.cluster.usage
        busy = 0.0
        for counters in sets.values():
            frac = 0.0
            for ck, cap in counters:
                used = u.counters.get(ck)
                if used:
                    frac = max(frac, float(used / cap))
            busy += min(frac, 1.0)
        taken = u.devices
        # the taken lone devices with a count that is not zero, at C speed (a count is a number)
        inter = lone.intersection(taken)
        busy += len(inter) - countOf(map(taken.__getitem__, inter), 0)
        multi = {k for k, _ in u.capacity}
        busy += sum(1 for k in multi if k in lone)
        return busy

    def total_units(self) -> int:
        """Physical devices: counter sets plus devices that consume no counters."""
        sets, lone = self._units()
        return len(sets) + len(lone)

    def _units(
        self,
    ) -> tuple[
        dict[tuple[str, str, str], list[tuple[tuple[str, str, str, str], Fraction]]],
        set[tuple[str, str, str]],
    ]:
        if self._unit_cache is None:
            inv = self.cluster.inventory
            sets: dict[tuple[str, str, str], list[tuple[tuple[str, str, str, str], Fraction]]] = {}
            for ck, cap in inv.counters.items():
                if cap > 0:
                    sets.setdefault(ck[:3], []).append((ck, cap))
            lone = {d.key for d in inv.devices.values() if not d.consumes}
            self._unit_cache = (sets, lone)
        return self._unit_cache

    def used_devices(self, state: DraState) -> set[tuple[str, str, str]]:
        self.sync(state)
        return {k for k, n in self.cluster.usage.devices.items() if n > 0}

    # ---- a cheap necessary condition before the search ----------------------------------------
    def _free_counts(self) -> _FreeCounts:
        """Upper bound of free exclusive devices per node, kept in step by ``_count_taken``: the
        devices reachable from the node minus its node-local devices taken (``Usage.node_taken``
        counts devices, not picks: a device held by two plans is taken once)."""
        if self._free is None:
            self._free = self._build_free_counts()
        elif self.verify:
            kept, fresh = self._free, self._build_free_counts()
            a = (kept.by_name, {v: c for v, c in kept.hist.items() if c}, kept.unbounded)
            b = (fresh.by_name, {v: c for v, c in fresh.hist.items() if c}, fresh.unbounded)
            if a != b:
                raise VerifyError("DraPlacer._free_counts (_FreeCounts)", a, b)
        return self._free

    def _build_free_counts(self) -> _FreeCounts:
        cs = self.cluster
        names = [n.name for n in cs.nodes]
        fc = _FreeCounts(names=names, by_length=sorted(names, key=len))
        for n in cs.nodes:
            devs = cs.inventory.devices_on(n)
            if any(d.multi for d in devs):
                fc.unbounded += 1
                continue
            slot = fc.caps.get(n.name)
            fc.caps[n.name] = (len(devs), slot[1] + 1 if slot is not None else 1)
        taken = cs.usage.node_taken
        for name, (cap, mult) in fc.caps.items():
            v = max(0, cap - taken.get(name, 0))
            fc.by_name[name] = v
            fc.hist[v] = fc.hist.get(v, 0) + mult
        return fc

    def _count_taken(self, picks: Sequence[Pick]) -> None:
        """Bring the free counts of the nodes of these picks (taken or given back) in step."""
        fc = self._free
        if fc is None:
            return
        taken = self.cluster.usage.node_taken
        for p in picks:
            if _counted(p):
                name = p.device.node_name
                assert name is not None
                fc.update(name, taken.get(name, 0))

    def _count_nodes(self, per_node: Sequence[tuple[str, int]]) -> None:
        """``_count_taken`` for picks counted per node (``_PlanInfo.taken``)."""
        fc = self._free
        if fc is None:
            return
        taken = self.cluster.usage.node_taken
        for name, _ in per_node:
            fc.update(name, taken.get(name, 0))

    def _published_resources(self) -> frozenset[str]:
        """The resources some node publishes in its allocatable (computed once: a placer's node
        allocatable never changes in place; a changed Node makes a new placer)."""

        def published() -> frozenset[str]:
            return frozenset(r for cap in self.cluster.allocatable if cap for r, v in cap.items() if v)

        if self._published is None:
            self._published = published()
        elif self.verify:
            fresh = published()
            if fresh != self._published:
                raise VerifyError("DraPlacer._published_resources", sorted(self._published), sorted(fresh))
        return self._published

    def _demand(self, namespace: str, dps: DraPodSet, signature: str) -> tuple[int, str, tuple[str, ...]]:
        """Devices each pod of the pod set needs at least on any node (ExactCount requests of its
        per-pod claims, and extended resources backed by DRA that no node publishes in allocatable:
        a node that publishes one serves it through its device plugin, with no device of ours), the
        claim asking for most (for messages) and the DeviceClasses counted.

        Kept per namespace, pod set name and ``signature`` (the ``DraRequest.signature`` the pod set
        is of): it reads only what the signature is made of (the claims, the templates' resource
        claims and containers' requests, fields of ``placement_view``), so the pod sets of every
        workload of one fit signature share one entry, whatever their labels, names and commands;
        verify mode checks a kept entry against the pod set's own computation."""
        key = (namespace, dps.name, signature)
        hit = self._demand_cache.get(key)
        if hit is not None:
            if self.verify:
                fresh = self._compute_demand(namespace, dps)
                if fresh != hit:
                    raise VerifyError("DraPlacer._demand (by signature)", hit, fresh, f"pod set {dps.name}")
            return hit
        got = self._demand_cache[key] = self._compute_demand(namespace, dps)
        return got

    def _compute_demand(self, namespace: str, dps: DraPodSet) -> tuple[int, str, tuple[str, ...]]:
        """``_demand`` of this very pod set."""
        cs = self.cluster
        total, most, what = 0, 0, ""
        counted: set[str] = set()
        refs = dps.claims or tuple(
            ClaimRef(c.name, c.resource_claim_name, c.resource_claim_template_name)
            for c in dps.template.spec.resource_claims or []
        )
        for ref in refs:
            if not ref.resource_claim_template_name:
                continue
            t = cs.templates.get(f"{namespace}/{ref.resource_claim_template_name}")
            if t is None:
                continue
            n = 0
            classes: list[str] = []
            for r in t.spec.spec.devices.requests or []:
                e = r.exactly
                if (
                    e is not None
                    and (e.allocation_mode or "ExactCount") == "ExactCount"
                    and not e.admin_access
                ):
                    n += e.count or 1
                    classes.append(e.device_class_name)
            total += n
            counted.update(classes)
            if n > most:
                most, what = n, f"claim {ref.name}: {n} x {', '.join(sorted(set(classes)))}"
        if cs.extended_classes:
            pod = Pod(metadata=ObjectMeta(name="demand", namespace=namespace), spec=dps.template.spec)
            try:
                ext = pod_extended_requests(pod, cs.extended_classes)
            except AllocationError:
                ext = {}
            published = self._published_resources()
            for res, n in sorted(ext.items()):
                if res in published:
                    continue  # served by a device plugin there: no device of ours needed
                total += n
                counted.add(cs.extended_classes[res])
                if n > most:
                    most, what = n, f"extended resource {res}: {n} x {cs.extended_classes[res]}"
        return total, what, tuple(sorted(counted))

    def _with_classes(self, classes: tuple[str, ...]) -> frozenset[str]:
        """Nodes that have devices of every one of these DeviceClasses (computed once per set)."""
        got = self._class_nodes.get(classes)
        if got is None:
            alloc = self.cluster.allocator
            got = self._class_nodes[classes] = frozenset(
                n.name for n in self.cluster.nodes if all(alloc.devices_in_class(c, n) for c in classes)
            )
        return got

    def _quick_miss(self, workload: WorkloadInfo, req: DraRequest, counts: Mapping[str, int]) -> str | None:
        """A necessary condition before any search: whether each pod set's pods can have the devices
        they need at least (``_demand``) on the nodes' free devices (``_free_counts``, an upper
        bound); a message when not (the gang cannot fit), else None (the search decides)."""
        free: _FreeCounts | None = None
        for ps in workload.pod_sets:
            n = counts.get(ps.name, ps.count)
            dps = req.pod_set(ps.name)
            if not n or dps is None:
                continue
            k, what, classes = self._demand(workload.namespace, dps, req.signature)
            if not k:
                continue
            if free is None:
                free = self._free_counts()
            if free.unbounded:
                continue  # a node with unbounded room takes all n pods
            fit = sum(c * (v // k) for v, c in free.hist.items() if c and v >= k)
            if fit >= n:
                continue
            if not free.names:
                return f"pod set {ps.name}: {n} pods x {k} devices needed ({what}), no node to place them on"
            by_name = free.by_name
            # the node with most free devices among those with devices of the classes (any node
            # when none has): of the shortest name, the first in cluster order among names as long
            with_class = self._with_classes(classes)
            if not with_class or len(with_class) == len(by_name):
                have = max(v for v, c in free.hist.items() if c)
                best = next(nm for nm in free.by_length if by_name[nm] == have)
            else:
                have = max(by_name[nm] for nm in with_class)
                best = next(nm for nm in free.by_length if by_name[nm] == have and nm in with_class)
            return (
                f"pod set {ps.name}: {n} pods x {k} devices needed ({what}), at most {fit} fit; "
                f"best node {best} has {have} free ({max(0, k - have)} short)"
            )
        return None

    # ---- the mutable ClusterState in step with a DraState ------------------------------------
    def _delta(self, state: DraState) -> set[str] | None:
        """Keys whose holds may differ between ``state`` and the synced state (None: unknown): the
        keys changed on the way up from both to their nearest common ancestor (the deeper one
        steps up first: a parent is always less deep)."""
        x: DraState | None = state
        y: DraState | None = self._synced
        keys: set[str] = set()
        while x is not y:
            if x is None or y is None:
                return None
            if x.depth >= y.depth:
                keys.update(x.changed)
                x = x.parent
            else:
                keys.update(y.changed)
                y = y.parent
        return keys if x is not None else None

    def sync(self, state: DraState) -> None:
        if state is self._synced:
            return
        want = state.holds
        keys = self._delta(state)
        if keys is not None:
            # only these keys can differ; the plans involved must not use shared claims (their
            # allocation depends on the order plans are applied in: the full pass below keeps it)
            redo: list[str] = []
            for k in keys:
                cur = want.get(k)
                plans = self._applied.get(k)
                if cur is plans:
                    continue
                if plans is not None and (
                    cur is None
                    or len(cur) != len(plans)
                    or any(a is not b for a, b in zip(cur, plans, strict=True))
                ):
                    redo.append(k)
                elif plans is None and cur is None:
                    continue
                elif plans is None:
                    redo.append(k)
            if not any(
                self._info(plan).shared
                for k in redo
                for plans in (self._applied.get(k, ()), want.get(k, ()))
                for plan in plans
            ):
                for k in redo:
                    old = self._applied.pop(k, None)
                    if old is not None:
                        for p in old:
                            self._unapply(p)
                for k in redo:
                    cur = want.get(k)
                    if cur is not None:
                        for p in cur:
                            self._apply(p)
                        self._applied[k] = cur
                self._synced = state
                return
        # what differs, found at C speed (plans compare by identity); without shared claims the
        # order of applying does not matter, as in the pass by keys above
        stale = self._applied.items() - want.items()
        fresh = want.items() - self._applied.items()
        if not any(self._info(p).shared for d in (stale, fresh) for _, ps in d for p in ps):
            for k, plans in stale:
                for p in plans:
                    self._unapply(p)
                del self._applied[k]
            for k, plans in fresh:
                for p in plans:
                    self._apply(p)
                self._applied[k] = plans
            self._synced = state
            return
        for k, plans in list(self._applied.items()):
            cur = want.get(k)
            if cur is not plans and (
                cur is None
                or len(cur) != len(plans)
                or any(a is not b for a, b in zip(cur, plans, strict=True))
            ):
                for p in plans:
                    self._unapply(p)
                del self._applied[k]
        for k, plans in want.items():
            if k not in self._applied:
                for p in plans:
                    self._apply(p)
                self._applied[k] = plans
        self._synced = state

    def _info(self, plan: DraPlan) -> _PlanInfo:
        """What applying the plan changes, computed once per plan: what its pods take from each
        node's allocatable, summed per node (exact sums: adding them at once equals adding them pod
        by pod); its pods' own picks, pod by pod; the node-local exclusive devices they take, per node
        (``_count_taken`` over them in one step per node ends where counting pick by pick ends)."""
        hit: tuple[object, _PlanInfo] | None = plan.__dict__.get(_PLAN_INFO)
        if hit is not None and hit[0] is self._plan_token:
            return hit[1]
        cs = self.cluster
        per: dict[int, dict[str, Fraction]] = {}
        for pp in plan.pods:
            i = cs.node_index.get(pp.node)
            if i is None:
                continue
            acc = per.setdefault(i, {})
            for r, v in pp.node_resources:
                if v:
                    have = acc.get(r)
                    acc[r] = v if have is None else have + v
        totals = [(cs.used[i], [(r, v) for r, v in acc.items() if v]) for i, acc in per.items()]
        picks = tuple(p for pp in plan.pods for p in pp.picks)
        taken: dict[str, int] = {}
        for p in picks:
            d = p.device
            if _counted(p):
                assert d.node_name is not None
                taken[d.node_name] = taken.get(d.node_name, 0) + 1
        shared = any(pp.shared or pp.shared_new for pp in plan.pods)
        return self._keep_info(plan, _PlanInfo(totals, picks, tuple(taken.items()), shared))

    def _keep_info(self, plan: DraPlan, info: _PlanInfo) -> _PlanInfo:
        plan.__dict__[_PLAN_INFO] = (self._plan_token, info)
        return info

    def _kept_info(self, plan: DraPlan) -> _PlanInfo | None:
        """What ``_info`` has kept for ``plan`` (None: nothing), dropping it (for tests)."""
        hit: tuple[object, _PlanInfo] | None = plan.__dict__.pop(_PLAN_INFO, None)
        return hit[1] if hit is not None and hit[0] is self._plan_token else None

    def _apply(self, plan: DraPlan) -> None:
        cs = self.cluster
        info = self._info(plan)
        for used, res in info.totals:
            for r, v in res:
                have = used.get(r, _ZERO)
                # whole amounts (most of them) add as integers: the same Fraction, made faster
                used[r] = (
                    Fraction(have.numerator + v.numerator)
                    if have.denominator == 1 == v.denominator
                    else have + v
                )
        if not info.shared:
            cs.usage.take_all(info.picks)
            self._count_nodes(info.taken)
            return
        for pp in plan.pods:
            for p in pp.picks:
                cs.usage.take(p)
            self._count_taken(pp.picks)
            for skey, c in pp.shared_new:
                if skey in self._shared_ours or self._base_allocated(skey):
                    continue
                claim = c.allocated_claim() if isinstance(c, ClaimAllocation) else c
                picks = tuple(c.picks) if isinstance(c, ClaimAllocation) else tuple(cs.inventory.picks_of(c))
                for p in picks:
                    cs.usage.take(p)
                self._count_taken(picks)
                cs.claims[skey] = claim
                self._shared_ours[skey] = picks
            for skey in set(pp.shared):
                self._shared_users[skey] = self._shared_users.get(skey, 0) + 1

    def _unapply(self, plan: DraPlan) -> None:
        cs = self.cluster
        info = self._info(plan)
        for used, res in info.totals:
            for r, v in res:
                have = used.get(r, _ZERO)
                # whole amounts (most of them) add as integers: the same Fraction, made faster
                used[r] = (
                    Fraction(have.numerator - v.numerator)
                    if have.denominator == 1 == v.denominator
                    else have - v
                )
        if not info.shared:
            cs.usage.give_back_all(info.picks)
            self._count_nodes(info.taken)
            return
        for pp in plan.pods:
            for p in pp.picks:
                cs.usage.give_back(p)
            self._count_taken(pp.picks)
            for skey in set(pp.shared):
                n = self._shared_users.get(skey, 0) - 1
                if n > 0:
                    self._shared_users[skey] = n
                    continue
                self._shared_users.pop(skey, None)
                picks = self._shared_ours.pop(skey, None)
                if picks is not None:
                    for p in picks:
                        cs.usage.give_back(p)
                    self._count_taken(picks)
                    base = self._base_claims.get(skey)
                    if base is not None:
                        cs.claims[skey] = base
                    else:
                        cs.claims.pop(skey, None)

    def _base_allocated(self, key: str) -> bool:
        c = self._base_claims.get(key)
        return c is not None and c.status.allocation is not None

    def _shared_results(
        self, key: str, new: ClaimAllocation | None
    ) -> tuple[DeviceRequestAllocationResult, ...]:
        alloc: AllocationResult | None
        if new is not None:
            alloc = new.allocation
        else:
            c = self.cluster.claims.get(key)
            alloc = c.status.allocation if c is not None else None
        if alloc is None or alloc.devices is None:
            return ()
        return tuple(alloc.devices.results or [])

    # ---- pods of a workload --------------------------------------------------------------------
    def _pods(
        self,
        workload: WorkloadInfo,
        req: DraRequest,
        counts: Mapping[str, int],
        flavors: Mapping[str, Sequence[FlavorSpec]],
    ) -> _Pods:
        """The workload's pods (pod sets in order) and per pod key the pod, its pod set and index;
        kept per workload, request, counts and the flavors' contents (names, node labels and
        tolerations: what ``_spec`` reads of them)."""
        ck = (
            workload.key,
            req.signature,
            tuple(sorted(counts.items())),
            tuple((k, _flavors_key(v)) for k, v in sorted(flavors.items())),
        )
        hit = self._pods_cache.get(ck)
        if hit is not None:
            self._pods_cache.move_to_end(ck)  # least recently used first out
            if self.verify:
                fresh = self._build_pods(workload, req, counts, flavors)
                a = [(p.key, p.to_dict()) for p in hit[0]]
                b = [(p.key, p.to_dict()) for p in fresh[0]]
                if a != b or hit[1].keys() != fresh[1].keys():
                    raise VerifyError("DraPlacer._pods (pods cache)", a, b, f"workload {workload.key}")
            return hit
        while len(self._pods_cache) >= 8192:
            self._pods_cache.popitem(last=False)
        out = self._pods_cache[ck] = self._build_pods(workload, req, counts, flavors)
        return out

    def _build_pods(
        self,
        workload: WorkloadInfo,
        req: DraRequest,
        counts: Mapping[str, int],
        flavors: Mapping[str, Sequence[FlavorSpec]],
    ) -> _Pods:
        pods: list[Pod] = []
        slots: dict[str, tuple[Pod, str, int]] = {}
        for ps in workload.pod_sets:
            dps = req.pod_set(ps.name)
            if dps is None:
                continue
            n = counts.get(ps.name, ps.count)
            spec = self._spec(req, dps, flavors.get(ps.name, ()))
            # the labels that decide placement (the signature covers them), not the workload's others
            labels = dict((dps.placement.metadata or {}).get("labels") or {})
            for i in range(n):
                pod = Pod(
                    api_version="v1",
                    kind="Pod",
                    metadata=ObjectMeta(
                        name=pod_name(workload.name, ps.name, i),
                        namespace=workload.namespace,
                        labels=labels or None,
                    ),
                    spec=spec,
                )
                pods.append(pod)
                slots[pod.key] = (pod, ps.name, i)
        return pods, slots

    def _spec(self, req: DraRequest, dps: DraPodSet, flavors: Sequence[FlavorSpec]) -> PodSpec:
        """The pods' spec for a pod set and its flavors: one object per content (the request's
        signature covers the pod set's ``placement`` view, the spec is built from that view alone),
        so what placement derives from a spec is shared between workloads of the same shape and
        carries nothing of the workload that built it."""
        key = (req.signature, dps.name, _flavors_key(flavors))
        spec = self._specs.get(key)
        if spec is None:
            if len(self._specs) >= 4096:
                self._specs.clear()
            spec = self._specs[key] = _pod_spec(dps, flavors)
        elif self.verify:
            fresh = _pod_spec(dps, flavors)
            if spec != fresh:
                raise VerifyError("DraPlacer._spec (specs cache)", spec, fresh, f"pod set {dps.name}")
        return spec

    def _resolve(self, workload: WorkloadInfo, rec: RecordedPlan) -> DraPlan:
        """Picks for a recorded plan (devices no longer published still count as taken)."""
        req = workload.placement_request
        cs = self.cluster
        out: list[PodPlan] = []
        allocated_here: set[str] = set()
        for rp in rec.pods:
            dps = req.pod_set(rp.pod_set) if isinstance(req, DraRequest) else None
            own: list[Pick] = []
            shared: list[str] = []
            shared_new: list[tuple[str, ClaimAllocation | ResourceClaim]] = []
            planned: list[PlannedClaim] = []
            for rc in rp.claims:
                claim = _allocated_claim(workload.namespace, rc)
                results = tuple(
                    (claim.status.allocation.devices.results or [])
                    if claim.status.allocation and claim.status.allocation.devices
                    else []
                )
                is_shared = rc.resource_claim_name is not None
                if is_shared:
                    skey = f"{workload.namespace}/{rc.resource_claim_name}"
                    shared.append(skey)
                    if skey not in allocated_here and not self._base_allocated(skey):
                        shared_new.append((skey, claim))
                        allocated_here.add(skey)
                else:
                    own.extend(cs.inventory.picks_of(claim))
                planned.append(
                    PlannedClaim(
                        rc.name,
                        rc.resource_claim_name,
                        results,
                        rc.resource_claim_name is None and rc.name.endswith("-extended-resources"),
                    )
                )
            node_res: tuple[tuple[str, Fraction], ...] = ()
            if dps is not None:
                pod = Pod(
                    metadata=ObjectMeta(name="recorded", namespace=workload.namespace), spec=dps.template.spec
                )
                i = cs.node_index.get(rp.node)
                cap = (cs.allocatable[i] if i is not None else None) or {}
                ext = set(cs.extended_classes)
                node_res = tuple(
                    sorted(
                        (r, v)
                        for r, v in pod_requests(pod).items()
                        if v and not (r in ext and not cap.get(r))
                    )
                )
            out.append(
                PodPlan(
                    rp.pod_set,
                    rp.index,
                    pod_name(workload.name, rp.pod_set, rp.index),
                    rp.node,
                    tuple(own),
                    tuple(shared),
                    tuple(shared_new),
                    node_res,
                    tuple(planned),
                )
            )
        return DraPlan(tuple(out))


# ---- failures as data (``queueing.scheduling.reasons``) ------------------------------------------
_Slots = Mapping[str, tuple[Pod, str, int]]  # pod key -> pod, pod set, index (``DraPlacer._pods``)


def _own_refs(slots: _Slots, only: str | None = None) -> dict[tuple[str, str], tuple[Part, str]]:
    """(kind, key) -> reference and where it comes from, for the pods of a workload (``only``: that
    pod) and their own claims: from templates (``<pod>-<name in the pod spec>``, from
    ``ResourceClaimTemplate ns/t``) and the implicit claim for extended resources."""
    out: dict[tuple[str, str], tuple[Part, str]] = {}
    keys = list(slots) if only is None else [only] if only in slots else []
    for key in keys:
        pod, ps, i = slots[key]
        ns = pod.namespace or "default"
        out[("Pod", key)] = (PodRef(ps, i), "")
        for prc in pod.spec.resource_claims or []:
            if prc.resource_claim_template_name:
                origin = f"ResourceClaimTemplate {ns}/{prc.resource_claim_template_name}"
                out[("ResourceClaim", f"{key}-{prc.name}")] = (PodClaimRef(ps, i, prc.name), origin)
        ext = EXTENDED_RESOURCE_CLAIM_SUFFIX
        out[("ResourceClaim", f"{key}{ext}")] = (PodClaimRef(ps, i, ext.lstrip("-")), "")
    return out


def _error_parts(e: AllocationError, refs: Mapping[tuple[str, str], tuple[Part, str]]) -> tuple[Part, ...]:
    """An allocation error's text, its object a reference when it is the workload's pod or claim
    (``claim gpus of pod ns/w-main-0 (from ResourceClaimTemplate ns/t): <field>: <message>``)."""
    kind, _, key = e.obj.partition(" ")
    ref, origin = refs.get((kind, key), (None, ""))
    tail = (f" (from {origin})" if origin else "") + (
        f": {e.field}: {e.message}" if e.field else f": {e.message}"
    )
    if isinstance(ref, PodClaimRef):
        return ("claim ", ref, " of pod ", PodRef(ref.pod_set, ref.index), tail)
    if isinstance(ref, PodRef):
        return ("Pod ", ref, tail)
    return (str(e),)


def _failure(
    kind: str, slots: _Slots, error: AllocationError | None = None, expl: GangExplanation | None = None
) -> PlacementFailure:
    """A placement failure (an allocation error or the gang's explanation) whose pods and claims of
    the workload are references (a ``Why``), so that it reads right for any workload of the shape."""
    parts: tuple[Part, ...]
    if error is not None:
        parts = _error_parts(error, _own_refs(slots))
    else:
        assert expl is not None
        refs = _own_refs(slots, expl.pod)  # an explanation names the pod that fits nowhere, its claims
        dra: tuple[DraPart, ...] = expl.parts or (expl.message,)
        parts = tuple(p if isinstance(p, str) else refs.get((p.kind, p.key), (p.key, ""))[0] for p in dra)
    best = expl.best if expl is not None else None
    why = Why(
        kind,
        parts,
        best.device_class if best is not None else None,
        best.node if best is not None else None,
        (("short", best.short_by),) if best is not None and best.short_by else (),
    )
    return PlacementFailure(why.render(), why)


def _policy(flavors: Mapping[str, Sequence[FlavorSpec]]) -> PlacementPolicy:
    """The placement policy of a workload's flavors: ``LeastFragmentation`` when any flavor
    assigned to it asks for it, else ``FirstFit``."""
    for fl in flavors.values():
        for f in fl:
            if f.placement_policy == LEAST_FRAGMENTATION:
                return LEAST_FRAGMENTATION
    return FIRST_FIT


def _topology(
    req: DraRequest, flavors: Mapping[str, Sequence[FlavorSpec]]
) -> tuple[tuple[Level, ...], int, TopologyMode] | str | None:
    """The workload's topology request (the first pod set that has a topology annotation asks for
    the whole gang; Kueue asks per pod set), as (levels, level, mode), or a message naming the
    annotation or flavor that is wrong, or None."""
    for dps in req.pod_sets:
        notes = (dps.template.metadata or {}).get("annotations") or {}
        if SLICE_REQUIRED_ANNOTATION in notes or SLICE_SIZE_ANNOTATION in notes:
            name = SLICE_REQUIRED_ANNOTATION if SLICE_REQUIRED_ANNOTATION in notes else SLICE_SIZE_ANNOTATION
            return f"pod set {dps.name}: annotation {name}: slice topology is not implemented yet"
        mode: TopologyMode
        if REQUIRED_ANNOTATION in notes:
            key, mode, ann = notes[REQUIRED_ANNOTATION], REQUIRED, REQUIRED_ANNOTATION
        elif PREFERRED_ANNOTATION in notes:
            key, mode, ann = notes[PREFERRED_ANNOTATION], PREFERRED, PREFERRED_ANNOTATION
        else:
            continue
        fl = [f for f in flavors.get(dps.name, ()) if f.topology_name]
        if not fl:
            names = ", ".join(f.name for f in flavors.get(dps.name, ())) or "none"
            return f"pod set {dps.name}: annotation {ann}: its flavor ({names}) has no topologyName"
        f = fl[0]
        if not f.topology_levels:
            return f"ResourceFlavor {f.name}: spec.topologyName: Topology {f.topology_name} not found"
        levels = tuple(Level(k, dev) for k, dev in f.topology_levels)
        keys = [lv.key for lv in levels]
        if key not in keys:
            return (
                f"pod set {dps.name}: annotation {ann}: level {key!r} is not a level of Topology "
                f"{f.topology_name} ({', '.join(keys)})"
            )
        return levels, keys.index(key), mode
    return None


def _flavors_key(flavors: Sequence[FlavorSpec]) -> tuple[object, ...]:
    """What a pod spec depends on of the flavors assigned to its pod set (see ``_pod_spec``)."""
    return tuple((f.name, tuple(sorted(f.node_labels.items())), f.tolerations) for f in flavors)


def _pod_spec(dps: DraPodSet, flavors: Sequence[FlavorSpec]) -> PodSpec:
    spec = dps.placement.spec  # only what decides placement: shared by the signature's workloads
    update: dict[str, object] = {"node_name": None, "scheduling_gates": None}
    if dps.claims:
        update["resource_claims"] = [
            PodResourceClaim(
                name=c.name,
                resource_claim_name=c.resource_claim_name,
                resource_claim_template_name=c.resource_claim_template_name,
            )
            for c in dps.claims
        ]
    labels: dict[str, str] = {}
    tols: list[CoreToleration] = []
    for f in flavors:
        labels.update(f.node_labels)
        tols.extend(_core_toleration(t) for t in f.tolerations)
    if labels:
        update["node_selector"] = {**(spec.node_selector or {}), **labels}
    if tols:
        update["tolerations"] = [*(spec.tolerations or []), *tols]
    return spec.model_copy(update=update)


def _allocated_claim(namespace: str, rc: RecordedClaim) -> ResourceClaim:
    results = [
        DeviceRequestAllocationResult(
            request=d.request,
            driver=d.driver,
            pool=d.pool,
            device=d.device,
            admin_access=d.admin_access or None,
            share_id=d.share_id,
            consumed_capacity={k: Quantity.parse(v) for k, v in d.consumed_capacity} or None,
        )
        for d in rc.devices
    ]
    return ResourceClaim(
        api_version="resource.k8s.io/v1",
        kind="ResourceClaim",
        metadata=ObjectMeta(name=rc.resource_claim_name or rc.name, namespace=namespace),
        status=ResourceClaimStatus(
            allocation=AllocationResult(devices=DeviceAllocationResult(results=results))
        ),
    )
