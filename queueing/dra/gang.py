"""Gang placement: every pod of a gang gets a node and all its devices, or the gang gets nothing.

``place_gang(pods, state)`` searches depth first over pods → nodes with backtracking, so an earlier
pod's choice never blocks a later pod needlessly. For each (pod, node) it checks, cheapest first:
node unschedulable, ``spec.nodeName``, nodeSelector and required node affinity, taints (NoSchedule,
NoExecute) vs tolerations, that already allocated shared claims are usable from the node, allocatable
cpu/memory/pods minus what runs there and what the gang took so far, and finally the pod's
ResourceClaims through the structured allocator (claims from templates are per pod; a referenced
ResourceClaim is shared by all its pods and allocated once, on the first pod's node).

Identical pods (same requests, scheduling constraints and claim sources) are placed on nodes in
non-decreasing order: any placement can be reordered that way, so no solution is lost, and the
search does not revisit permutations of the same placement. Work is bounded (``max_node_checks``);
hitting the bound is reported, not hidden.

The result is tentative: ``GangResult.transaction`` holds the changes to the ``ClusterState`` until
``commit()`` (the claims' allocations become in-use) or ``discard()`` (everything is given back).

``place_simple(groups, state)`` answers where ``place_gang`` places a gang of simple pods (claims from
templates with plain ExactCount requests), without building per-pod objects and leaving the state as
it was, or says it cannot tell (then ``place_gang`` decides).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

from queueing.api.base import ObjectMeta
from queueing.api.core import FINISHED_POD_PHASES, Node, Pod, PodResourceClaim, PodSpec
from queueing.api.quantity import format_amount
from queueing.api.resource import DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice
from queueing.dra.allocator import (
    DEFAULT_MAX_STEPS,
    Allocator,
    Alternative,
    ClaimAllocation,
    DeviceOrder,
    PreparedClaim,
    SelectorCache,
    Shortfall,
)
from queueing.dra.errors import AllocationError
from queueing.dra.explain import ObjRef, Part, render
from queueing.dra.extended import (
    ExtendedRequestMapping,
    ImplicitClaim,
    extended_resource_classes,
    implicit_claim,
    pod_extended_requests,
)
from queueing.dra.features import Features
from queueing.dra.inventory import Inventory, Pick, Usage
from queueing.dra.verify import VerifyError

__all__ = [
    "ClusterState",
    "GangExplanation",
    "GangResult",
    "NodeMiss",
    "PodPlacement",
    "SimpleGang",
    "SimplePodSet",
    "Transaction",
    "place_gang",
    "place_simple",
    "spec_requests",
]

DEFAULT_MAX_NODE_CHECKS = 50_000
_ZERO = Fraction(0)
_RESOURCES = ("cpu", "memory", "pods")
MissKind = Literal[
    "devices",
    "cpu",
    "memory",
    "pods",
    "resource",
    "shared-claim",
    "taints",
    "node-selector",
    "node-name",
    "unschedulable",
]
# how close a miss of each kind is to a fit, for choosing the "best node" (lower is closer)
_KIND_RANK: dict[str, int] = {
    "devices": 0,
    "cpu": 0,
    "memory": 0,
    "pods": 0,
    "resource": 0,
    "shared-claim": 1,
    "taints": 2,
    "node-selector": 3,
    "node-name": 4,
    "unschedulable": 5,
}


def _pod_requests(pod: Pod) -> dict[str, Fraction]:
    """Effective requests of every resource of the pod (``spec_requests`` of its spec)."""
    return spec_requests(pod.spec)


def spec_requests(spec: PodSpec) -> dict[str, Fraction]:
    """Effective requests of every resource (cpu, memory, extended resources, ...) of a pod of this
    spec: the sum over containers and sidecars, at least the largest plain init container; one pod
    slot."""
    total: dict[str, Fraction] = {"cpu": Fraction(0), "memory": Fraction(0)}
    for c in spec.containers:
        for r, q in c.requests.items():
            total[r] = total.get(r, Fraction(0)) + q.value
    init_max: dict[str, Fraction] = {}
    for c in spec.init_containers or []:
        sidecar = (c.model_extra or {}).get("restartPolicy") == "Always"
        for r, q in c.requests.items():
            if sidecar:
                total[r] = total.get(r, Fraction(0)) + q.value
            elif q.value > init_max.get(r, Fraction(0)):
                init_max[r] = q.value
    for r, v in init_max.items():
        if v > total.get(r, Fraction(0)):
            total[r] = v
    total["pods"] = Fraction(1)
    return total


# ------------------------------------------------------------------ results
@dataclass(frozen=True, slots=True)
class PodPlacement:
    pod: str  # namespace/name
    node: str
    claims: tuple[ClaimAllocation, ...]  # allocated for this pod (per-pod claims, shared ones on first use)
    shared: tuple[str, ...]  # keys of shared claims the pod uses (allocated now or before)
    # the implicit claim for extended resources served through DRA on this node (also in ``claims``)
    extended: ClaimAllocation | None = None
    extended_mappings: tuple[ExtendedRequestMapping, ...] = ()
    extended_resources: tuple[str, ...] = ()  # extended resources served through DRA here
    node_resources: tuple[tuple[str, Fraction], ...] = ()  # what the pod takes from node allocatable

    @property
    def extended_devices(self) -> tuple[tuple[str, str, str], ...]:
        """(driver, pool, device) of every device the implicit claim got."""
        if self.extended is None:
            return ()
        return tuple((p.device.key[0], p.device.key[1], p.device.key[2]) for p in self.extended.picks)


@dataclass(frozen=True, slots=True)
class NodeMiss:
    node: str
    kind: MissKind
    message: str
    short_by: Fraction = Fraction(0)  # how much is missing, in the unit of ``kind``
    claim: str | None = None  # namespace/name
    request: str | None = None
    detail: str = ""  # devices: what the message says after the claim and request
    device_class: str | None = None  # devices: the class of the request
    in_class: int | None = None  # devices: devices of that class on the node

    @property
    def parts(self) -> tuple[Part, ...]:
        """``message`` with the claim as a reference (see ``queueing.dra.explain``)."""
        if self.kind == "devices" and self.claim is not None and self.request is not None:
            return ("claim ", ObjRef("ResourceClaim", self.claim), f", request {self.request}: {self.detail}")
        return (self.message,)


@dataclass(frozen=True, slots=True)
class GangExplanation:
    """Why a gang does not fit: the pod that could not be placed and its closest node. ``parts``
    is ``message`` with the gang's pods and claims as references (``queueing.dra.explain``)."""

    pod: str
    message: str
    best: NodeMiss | None
    nodes_checked: int
    bound_hit: bool = False
    parts: tuple[Part, ...] = ()

    @classmethod
    def of(
        cls, pod: str, parts: tuple[Part, ...], best: NodeMiss | None, checks: int, bound_hit: bool = False
    ) -> GangExplanation:
        return cls(pod, render(parts), best, checks, bound_hit, parts)

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True, slots=True)
class GangResult:
    placed: bool
    placements: tuple[PodPlacement, ...] = ()
    explanation: GangExplanation | None = None
    transaction: Transaction | None = None  # open (tentative) when placed
    node_checks: int = 0

    @property
    def nodes(self) -> dict[str, str]:
        return {p.pod: p.node for p in self.placements}


# ------------------------------------------------------------------ state and transactions
class ClusterState:
    """What placement needs, built once per scheduling cycle: nodes, device inventory, classes, claims in
    use, claim templates and the pods that already run (for cpu/memory/pods). Changed only through
    transactions (one open at a time)."""

    def __init__(
        self,
        nodes: Iterable[Node],
        slices: Iterable[ResourceSlice],
        classes: Iterable[DeviceClass] | Mapping[str, DeviceClass],
        claims: Iterable[ResourceClaim] = (),
        templates: Iterable[ResourceClaimTemplate] = (),
        pods: Iterable[Pod] = (),
        *,
        features: Features | None = None,
        cache: SelectorCache | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
        previous: ClusterState | None = None,
        verify: bool = False,
    ) -> None:
        """``previous``: an earlier state of the cluster, whose inventory pools built from the same
        slices (see ``Inventory``) and the allocatable of the same Node objects are taken over."""
        self.features = features or Features()
        self.verify = verify  # verify mode (``queueing.dra.verify``): fast paths run the general one too
        self.nodes: tuple[Node, ...] = tuple(sorted(nodes, key=lambda n: n.name))
        self.node_index = {n.name: i for i, n in enumerate(self.nodes)}
        self.node_names: list[str] = [n.name for n in self.nodes]
        self.inventory: Inventory = Inventory(
            slices,
            partitionable_devices=self.features.partitionable_devices,
            previous=previous.inventory if previous is not None else None,
        )
        classes = dict(classes) if isinstance(classes, Mapping) else list(classes)
        self.allocator = Allocator(
            self.inventory, classes, features=self.features, cache=cache, max_steps=max_steps, verify=verify
        )
        self.claims: dict[str, ResourceClaim] = {c.key: c for c in claims}
        self.templates: dict[str, ResourceClaimTemplate] = {t.key: t for t in templates}
        self.usage: Usage = self.inventory.usage([c for c in self.claims.values() if c.status.allocation])
        self.inventory.index_free(self.usage, self.nodes)  # blocks of nodes by free devices
        # per node: its devices when ``Inventory.free_on`` counts them as total minus
        # ``Usage.node_taken`` (simple nodes without multi-allocation devices), else None
        self.simple_devices: list[int | None] = [self.inventory.simple_devices(n) for n in self.nodes]
        # node allocatable of every resource (None: the node publishes none; then cpu/memory/pods are
        # not checked, but extended resources count as 0)
        self.allocatable: list[dict[str, Fraction] | None] = []  # never changed in place: shared
        known: dict[int, tuple[Node, dict[str, Fraction] | None]] = (
            {id(n): (n, a) for n, a in zip(previous.nodes, previous.allocatable, strict=True)}
            if previous is not None
            else {}
        )
        for n in self.nodes:
            hit = known.get(id(n))
            if hit is not None and hit[0] is n:
                self.allocatable.append(hit[1])
                continue
            alloc = n.allocatable
            self.allocatable.append({r: q.value for r, q in alloc.items()} if alloc else None)
        self.used: list[dict[str, Fraction]] = [dict.fromkeys(_RESOURCES, Fraction(0)) for _ in self.nodes]
        self.pods: dict[str, Pod] = {p.key: p for p in pods}  # pods already bound (running)
        for p in self.pods.values():
            self._charge_pod(p, 1)
        class_list = list(classes.values()) if isinstance(classes, Mapping) else list(classes)
        # extended resource name -> DeviceClass (empty when DRAExtendedResource is off)
        self.extended_classes: dict[str, str] = (
            extended_resource_classes(class_list) if self.features.extended_resource else {}
        )
        self._open: Transaction | None = None
        # id(pod) -> (pod, templates used, its plan without shared claims) (see ``_Gang._plan``)
        self._pod_plans: dict[int, tuple[Pod, tuple[ResourceClaimTemplate, ...], _PodPlan]] = {}
        # (id(pod spec), namespace) -> what placement derives from the spec alone
        self._spec_static: dict[tuple[int, str], _SpecStatic] = {}
        # (DeviceClass, node index) -> whether the node has devices of the class (explanations)
        self._class_on: dict[tuple[str, int], bool] = {}
        # template key -> (template, a claim validated from it) (see ``_Gang._plan_full``)
        self._claim_protos: dict[str, tuple[ResourceClaimTemplate, ResourceClaim]] = {}

    def _charge_pod(self, p: Pod, sign: int) -> None:
        """Add (``sign`` 1) or take back (-1) what a running pod takes from its node's allocatable."""
        i = self.node_index.get(p.spec.node_name or "")
        if i is None or p.status.phase in FINISHED_POD_PHASES:
            return
        cap = self.allocatable[i] or {}
        used = self.used[i]
        for r, v in _pod_requests(p).items():
            # an extended resource the node does not publish was served through DRA (its
            # implicit claim is among ``claims``)
            if r in _RESOURCES or cap.get(r):
                left = used.get(r, _ZERO) + sign * v
                if left or r in _RESOURCES:
                    used[r] = left
                else:  # as if never taken
                    used.pop(r, None)

    def set_pod(self, key: str, pod: Pod | None) -> None:
        """A running pod added, changed (``pod``) or gone (None), in place: its node's used
        resources follow (no transaction may be open)."""
        self._check_closed()
        old = self.pods.pop(key, None)
        if old is not None:
            self._charge_pod(old, -1)
        if pod is not None:
            self.pods[key] = pod
            self._charge_pod(pod, 1)

    def set_template(self, key: str, template: ResourceClaimTemplate | None) -> None:
        """A ResourceClaimTemplate added, changed or gone, in place (what is derived from a template
        is checked against it by identity)."""
        self._check_closed()
        if template is None:
            self.templates.pop(key, None)
        else:
            self.templates[key] = template

    def _check_closed(self) -> None:
        if self._open is not None and self._open.status == "tentative":
            raise RuntimeError("a transaction is open on this ClusterState")

    def begin(self) -> Transaction:
        if self._open is not None and self._open.status == "tentative":
            raise RuntimeError("a transaction is already open on this ClusterState")
        self._open = Transaction(self)
        return self._open


@dataclass(slots=True)
class _Step:
    """What placing one pod on one node changed (undone on backtrack or discard)."""

    node: int
    requests: tuple[tuple[str, Fraction], ...]  # non-zero
    claims: tuple[ClaimAllocation, ...]
    new_shared: tuple[str, ...]


class Transaction:
    """Tentative changes to a ClusterState: device picks, node usage, shared claim allocations."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.status: Literal["tentative", "committed", "discarded"] = "tentative"
        self._steps: list[_Step] = []
        self.shared: dict[str, ClaimAllocation] = {}  # shared claims allocated in this transaction

    # ---- changes ---------------------------------------------------------------------------
    def _apply(self, step: _Step) -> None:
        used = self.state.used[step.node]
        for r, v in step.requests:
            used[r] = used.get(r, _ZERO) + v
        self._steps.append(step)

    def _undo_last(self) -> None:
        step = self._steps.pop()
        used = self.state.used[step.node]
        for r, v in step.requests:
            used[r] -= v
        for ca in step.claims:
            for p in ca.picks:
                self.state.usage.give_back(p)
        for key in step.new_shared:
            del self.shared[key]

    @property
    def picks(self) -> tuple[Pick, ...]:
        return tuple(p for s in self._steps for ca in s.claims for p in ca.picks)

    def claims(self) -> tuple[ResourceClaim, ...]:
        """Every claim allocated in this transaction, with ``status.allocation`` set."""
        return tuple(ca.allocated_claim() for s in self._steps for ca in s.claims)

    def commit(self) -> tuple[ResourceClaim, ...]:
        """Make the placement part of the state; returns the newly allocated claims."""
        self._check_open()
        out = self.claims()
        for c in out:
            self.state.claims[c.key] = c
        self.status = "committed"
        return out

    def discard(self) -> None:
        """Give everything back, as if the placement had never been tried."""
        self._check_open()
        while self._steps:
            self._undo_last()
        self.status = "discarded"

    def _check_open(self) -> None:
        if self.status != "tentative":
            raise RuntimeError(f"transaction already {self.status}")


# ------------------------------------------------------------------ the search
@dataclass(slots=True)
class _PodPlan:
    pod: Pod
    key: str
    requests: tuple[tuple[str, Fraction], ...]  # the non-zero ones, in the pod's order
    resources: tuple[tuple[str, Fraction], ...]  # ``requests`` sorted (``PodPlacement.node_resources``)
    own: tuple[PreparedClaim, ...]  # per-pod claims from templates
    shared: tuple[tuple[str, PreparedClaim | None], ...]  # key, prepared (None: allocated before the gang)
    shape: tuple[object, ...]
    static_ok: dict[int, NodeMiss | None] = field(default_factory=dict)
    # extended resources a DeviceClass backs -> pod-level count; served through DRA on nodes that do
    # not publish them in allocatable
    extended: dict[str, int] = field(default_factory=dict)
    # per set of resources served through DRA: the implicit claim (prepared) or None
    implicit: dict[frozenset[str], tuple[ImplicitClaim, PreparedClaim] | None] = field(default_factory=dict)
    # devices the pod's own claims need at least on any node (0: no bound); only used when the pod
    # has no extended resources (whose implicit claim is prepared per node)
    need: int = 0


@dataclass(slots=True)
class _SpecStatic:
    """What ``_Gang._plan`` derives from a pod's spec and namespace and the templates it uses alone:
    the same for every pod of that spec (the pods of a pod set share one spec object). The pods'
    claims from templates differ only in their names: ``protos`` holds, per such claim, its name in
    the pod spec and the first pod's claim prepared."""

    spec: PodSpec
    templates: tuple[ResourceClaimTemplate, ...]  # the templates used, in claim order
    protos: tuple[tuple[str, PreparedClaim], ...]
    requests: tuple[tuple[str, Fraction], ...]
    resources: tuple[tuple[str, Fraction], ...]
    shape: tuple[object, ...]
    extended: dict[str, int]
    need: int
    static_ok: dict[int, NodeMiss | None]


def _with_shared(plan: _PodPlan, shared: tuple[tuple[str, PreparedClaim | None], ...]) -> _PodPlan:
    """The plan with other shared claims (everything else is shared with ``plan``)."""
    return _PodPlan(
        plan.pod,
        plan.key,
        plan.requests,
        plan.resources,
        plan.own,
        shared,
        plan.shape,
        plan.static_ok,
        plan.extended,
        plan.implicit,
        plan.need,
    )


_BLOCKS = "free-device index (Usage.block_free)"
_COUNTS = "free devices by count (ClusterState.simple_devices, Usage.node_taken)"


def _verify_short(state: ClusterState, lo: int, hi: int, need: int, what: str) -> None:
    """Verify mode: every node in ``lo..hi-1`` has fewer than ``need`` free devices as
    ``Inventory.free_on`` counts them, as the index that skips them claims."""
    for x in range(lo, hi):
        free = state.inventory.free_on(state.nodes[x], state.usage)
        if free is not None and free >= need:
            raise VerifyError(
                what,
                f"nodes {lo}..{hi - 1} have fewer than {need} free",
                f"node {state.nodes[x].name}: {free} free",
            )


def _same(a: Sequence[object], b: Sequence[object]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


class _BoundHit(Exception):
    pass


def _static_miss(
    state: ClusterState, spec: PodSpec, static_ok: dict[int, NodeMiss | None], i: int
) -> NodeMiss | None:
    """Why a pod of this spec cannot go to node i whatever is taken there (None: it may),
    remembered in ``static_ok`` (per spec: ``_PodPlan.static_ok``)."""
    if i in static_ok:
        return static_ok[i]
    node = state.nodes[i]
    miss: NodeMiss | None = None
    if spec.node_name and spec.node_name != node.name:
        miss = NodeMiss(node.name, "node-name", f"the pod is bound to node {spec.node_name}")
    elif node.spec.unschedulable:
        miss = NodeMiss(node.name, "unschedulable", "the node is unschedulable")
    elif not spec.fits_node_labels(node.labels, node.name):
        miss = NodeMiss(node.name, "node-selector", "the pod's nodeSelector/affinity does not match the node")
    elif node.spec.taints and not spec.tolerates(node.spec.taints):
        bad = [
            t.key
            for t in node.spec.taints
            if t.effect in ("NoSchedule", "NoExecute")
            and not any(x.tolerates(t) for x in spec.tolerations or [])
        ]
        miss = NodeMiss(node.name, "taints", f"untolerated node taints: {', '.join(bad)}")
    static_ok[i] = miss
    return miss


class _Gang:
    def __init__(
        self,
        pods: Sequence[Pod],
        state: ClusterState,
        txn: Transaction,
        max_node_checks: int,
        node_order: Sequence[int] | None = None,
        device_order: DeviceOrder | None = None,
    ) -> None:
        self.state = state
        # a placement score's order of the nodes (indexes into ``state.nodes``) and of each
        # request's devices (``queueing.dra.scoring``); None: cluster and inventory order
        self.node_order = node_order
        self.device_order = device_order
        self.txn = txn
        self.budget = max_node_checks
        self.checks = 0
        self.plans = [self._plan(p) for p in pods]
        self.placements: list[PodPlacement] = []

    # ---- preparation ----------------------------------------------------------------------
    def _plan(self, pod: Pod) -> _PodPlan:
        """The pod's claims prepared. What depends only on the pod and its templates is computed
        once per Pod object and ClusterState (pods are immutable here; a changed template is seen
        by identity), what depends only on the spec once per spec object and namespace; shared
        claims are looked up every time (their allocation may change)."""
        state = self.state
        ns = pod.namespace or "default"
        spec = pod.spec
        hit = state._pod_plans.get(id(pod))
        if hit is not None and hit[0] is not pod:
            hit = None
        ss = state._spec_static.get((id(spec), ns))
        if ss is not None and ss.spec is not spec:
            ss = None
        if hit is None and ss is None:
            return self._plan_full(pod, ns)
        shared: list[tuple[str, PreparedClaim | None]] = []
        templates: list[ResourceClaimTemplate] = []
        for i, prc in enumerate(spec.resource_claims or []):
            src = self._source(pod, ns, i, prc)
            if isinstance(src, ResourceClaimTemplate):
                templates.append(src)
            else:
                shared.append(src)
        if hit is not None and _same(hit[1], templates):
            plan = hit[2]
        elif ss is not None and _same(ss.templates, templates):
            own = tuple(
                state.allocator.prepare_renamed(proto, self._own_claim(proto.claim, pod, ns, name))
                for name, proto in ss.protos
            )
            plan = _PodPlan(
                pod,
                pod.key,
                ss.requests,
                ss.resources,
                own,
                (),
                ss.shape,
                ss.static_ok,
                extended=ss.extended,
                need=ss.need,
            )
            self._remember(pod, ss.templates, plan)
        else:  # a template changed
            return self._plan_full(pod, ns)
        if not shared:
            return plan
        return _with_shared(plan, tuple(shared))

    def _remember(self, pod: Pod, templates: tuple[ResourceClaimTemplate, ...], plan: _PodPlan) -> None:
        """Keep the pod's plan without shared claims (a value of the pod and its templates)."""
        cache = self.state._pod_plans
        if len(cache) > 100_000:
            cache.clear()
        cache[id(pod)] = (pod, templates, _with_shared(plan, ()) if plan.shared else plan)

    def _source(
        self, pod: Pod, ns: str, i: int, prc: PodResourceClaim
    ) -> tuple[str, PreparedClaim | None] | ResourceClaimTemplate:
        """The i-th claim of the pod: a shared claim (key, prepared; None when allocated before the
        gang) or the template of a per-pod claim."""
        if prc.resource_claim_name:
            key = f"{ns}/{prc.resource_claim_name}"
            c = self.state.claims.get(key)
            if c is None:
                raise AllocationError(
                    f"Pod {pod.key}",
                    f"spec.resourceClaims[{i}].resourceClaimName",
                    f"ResourceClaim {key} not found",
                )
            return key, None if c.status.allocation is not None else self.state.allocator.prepare_claim(c)
        if prc.resource_claim_template_name:
            tkey = f"{ns}/{prc.resource_claim_template_name}"
            t = self.state.templates.get(tkey)
            if t is None:
                raise AllocationError(
                    f"Pod {pod.key}",
                    f"spec.resourceClaims[{i}].resourceClaimTemplateName",
                    f"ResourceClaimTemplate {tkey} not found",
                )
            return t
        raise AllocationError(
            f"Pod {pod.key}",
            f"spec.resourceClaims[{i}]",
            "one of resourceClaimName or resourceClaimTemplateName is required",
        )

    @staticmethod
    def _own_claim(proto: ResourceClaim, pod: Pod, ns: str, name: str) -> ResourceClaim:
        """The pod's claim from a template: ``proto`` (a claim validated from the template) renamed;
        the spec is a value shared between them, never changed."""
        return proto.model_copy(
            update={"metadata": ObjectMeta.model_validate({"name": f"{pod.name}-{name}", "namespace": ns})}
        )

    def _plan_full(self, pod: Pod, ns: str) -> _PodPlan:
        ref = f"Pod {pod.key}"
        own: list[PreparedClaim] = []
        protos: list[tuple[str, PreparedClaim]] = []
        shared: list[tuple[str, PreparedClaim | None]] = []
        sources: list[tuple[str, str, str]] = []
        templates: list[ResourceClaimTemplate] = []
        for i, prc in enumerate(pod.spec.resource_claims or []):
            src = self._source(pod, ns, i, prc)
            if not isinstance(src, ResourceClaimTemplate):
                shared.append(src)
                sources.append(("claim", prc.name, src[0]))
                continue
            t = src
            tkey = f"{ns}/{prc.resource_claim_template_name}"
            proto = self.state._claim_protos.get(tkey)
            if proto is None or proto[0] is not t:
                # validated once per template
                proto = (
                    t,
                    ResourceClaim.model_validate(
                        {
                            "apiVersion": "resource.k8s.io/v1",
                            "kind": "ResourceClaim",
                            "metadata": {"name": "proto", "namespace": ns},
                            "spec": t.spec.spec.model_dump(by_alias=True, exclude_unset=True, mode="json"),
                        }
                    ),
                )
                self.state._claim_protos[tkey] = proto
            prepared = self.state.allocator.prepare_claim(self._own_claim(proto[1], pod, ns, prc.name))
            own.append(prepared)
            protos.append((prc.name, prepared))
            sources.append(("template", prc.name, tkey))
            templates.append(t)
        names = {prc.name for prc in pod.spec.resource_claims or []}
        for kind, cs in (
            ("initContainers", pod.spec.init_containers or []),
            ("containers", pod.spec.containers),
        ):
            for ci, ctr in enumerate(cs):
                for j, cc in enumerate((ctr.resources.claims if ctr.resources else None) or []):
                    if cc.name not in names:
                        raise AllocationError(
                            ref,
                            f"spec.{kind}[{ci}].resources.claims[{j}].name",
                            f"{cc.name!r} is not in spec.resourceClaims",
                        )
        extended = (
            pod_extended_requests(pod, self.state.extended_classes) if self.state.extended_classes else {}
        )
        spec = pod.spec
        requests = _pod_requests(pod)
        shape: tuple[object, ...] = (
            tuple(sorted(requests.items())),
            spec.node_name,
            tuple(sorted((spec.node_selector or {}).items())),
            spec.affinity.model_dump_json() if spec.affinity else None,
            tuple(t.model_dump_json() for t in spec.tolerations or []),
            tuple(sources),
        )
        need = 0
        if not extended:
            for pc in own:
                for alts in pc.requests:
                    if not any(a.all_mode or a.admin_access for a in alts):
                        need += min(a.count for a in alts)
        static_ok: dict[int, NodeMiss | None] = {}
        nonzero = tuple((r, v) for r, v in requests.items() if v)
        resources = tuple(sorted(nonzero))
        ss = _SpecStatic(
            spec, tuple(templates), tuple(protos), nonzero, resources, shape, extended, need, static_ok
        )
        cache = self.state._spec_static
        if len(cache) > 10_000:
            cache.clear()
        cache[(id(spec), ns)] = ss
        plan = _PodPlan(
            pod,
            pod.key,
            nonzero,
            resources,
            tuple(own),
            tuple(shared),
            shape,
            static_ok,
            extended=extended,
            need=need,
        )
        self._remember(pod, ss.templates, plan)
        return plan

    def _routed(self, plan: _PodPlan, i: int) -> frozenset[str]:
        """The pod's extended resources served through DRA on node i (the node does not publish them)."""
        if not plan.extended:
            return frozenset()
        cap = self.state.allocatable[i] or {}
        return frozenset(r for r in plan.extended if not cap.get(r))

    def _implicit(self, plan: _PodPlan, i: int) -> tuple[ImplicitClaim, PreparedClaim] | None:
        routed = self._routed(plan, i)
        if not routed:
            return None
        if routed not in plan.implicit:
            ic = implicit_claim(plan.pod, routed, self.state.extended_classes)
            if ic is not None and ic.claim.key in {c.key for c in plan.own}:
                raise AllocationError(
                    f"Pod {plan.key}",
                    "spec.resourceClaims",
                    f"claim name {ic.claim.name} clashes with the implicit claim for extended resources",
                )
            plan.implicit[routed] = None if ic is None else (ic, self.state.allocator.prepare_claim(ic.claim))
        return plan.implicit[routed]

    def _node_requests(self, plan: _PodPlan, i: int) -> tuple[tuple[str, Fraction], ...]:
        """The pod's non-zero requests of node allocatable on node i."""
        routed = self._routed(plan, i)
        if not routed:
            return plan.requests
        return tuple((r, v) for r, v in plan.requests if r not in routed)

    # ---- checks ---------------------------------------------------------------------------
    def _static_miss(self, plan: _PodPlan, i: int) -> NodeMiss | None:
        return _static_miss(self.state, plan.pod.spec, plan.static_ok, i)

    def _dynamic_miss(self, plan: _PodPlan, i: int) -> NodeMiss | None:
        node = self.state.nodes[i]
        for key, prepared in plan.shared:
            alloc = None
            if prepared is None:
                alloc = self.state.claims[key].status.allocation
            elif key in self.txn.shared:
                alloc = self.txn.shared[key].allocation
            if (
                alloc is not None
                and alloc.node_selector is not None
                and not alloc.node_selector.matches(node.labels, node.name)
            ):
                return NodeMiss(
                    node.name,
                    "shared-claim",
                    f"shared claim {key} is allocated on devices not reachable from this node",
                    claim=key,
                )
        cap = self.state.allocatable[i]
        used = self.state.used[i]
        for r, need in self._node_requests(plan, i):
            if "/" not in r:  # cpu, memory, pods, ephemeral-storage, hugepages-*: if published
                if cap is None or r not in cap:
                    continue
                have = cap[r]
            else:  # extended resources: a node that does not publish one has none
                have = (cap or {}).get(r, _ZERO)
            free = have - used.get(r, _ZERO)
            if need > free:
                return NodeMiss(
                    node.name,
                    r if r in _RESOURCES else "resource",  # type: ignore[arg-type]
                    f"{r}: needs {format_amount(need, r)}, {format_amount(max(free, _ZERO), r)} free"
                    + (
                        ""
                        if have or "/" not in r
                        else " (the node does not publish it and no DeviceClass backs it)"
                    ),
                    short_by=need - free,
                )
        return None

    def _claims_for(
        self, plan: _PodPlan, i: int | None = None
    ) -> tuple[list[PreparedClaim], list[str], ImplicitClaim | None]:
        """Claims to allocate for the pod on node i: its own (from templates), the implicit claim for
        extended resources served through DRA there, then shared claims not allocated yet."""
        claims = list(plan.own)
        implicit = self._implicit(plan, i) if i is not None else None
        if implicit is not None:
            claims.append(implicit[1])
        new_shared = []
        for key, prepared in plan.shared:
            if prepared is not None and key not in self.txn.shared and key not in new_shared:
                claims.append(prepared)
                new_shared.append(key)
        return claims, new_shared, implicit[0] if implicit is not None else None

    def _try(self, plan: _PodPlan, i: int) -> bool:
        self.checks += 1
        if self.checks > self.budget:
            raise _BoundHit()
        if self._static_miss(plan, i) is not None or self._dynamic_miss(plan, i) is not None:
            return False
        claims, new_shared, implicit = self._claims_for(plan, i)
        node = self.state.nodes[i]
        if claims:
            got = self.state.allocator.allocate_on(
                claims, node, self.state.usage, explain=False, order=self.device_order
            )
            if not isinstance(got, tuple):
                if got is not None and got.bound_hit:
                    raise _BoundHit()
                return False
        else:
            got = ()
        extended: ClaimAllocation | None = None
        if new_shared or implicit is not None:
            shared_keys = set(new_shared)
            for ca in got:
                if ca.claim.key in shared_keys:
                    self.txn.shared[ca.claim.key] = ca
                elif implicit is not None and ca.claim.key == implicit.claim.key:
                    extended = ca
        requests = self._node_requests(plan, i)
        self.txn._apply(_Step(i, requests, got, tuple(new_shared)))
        self.placements.append(
            PodPlacement(
                plan.key,
                node.name,
                got,
                tuple(k for k, _ in plan.shared),
                extended,
                implicit.mappings if implicit is not None else (),
                implicit.resources if implicit is not None else (),
                plan.resources if requests is plan.requests else tuple(sorted(requests)),
            )
        )
        return True

    def _undo(self) -> None:
        self.txn._undo_last()
        self.placements.pop()

    # ---- search -----------------------------------------------------------------------------
    def search(self, k: int = 0, floor: int = 0) -> bool:
        if k == len(self.plans):
            return True
        if self.node_order is not None:
            return self._search_ordered(k, floor)
        plan = self.plans[k]
        start = floor if k > 0 and self.plans[k - 1].shape == plan.shape else 0
        need = plan.need
        nodes = self.state.nodes
        end = len(nodes)
        free_on = self.state.inventory.free_on
        usage = self.state.usage
        taken = usage.node_taken
        simple = self.state.simple_devices
        # blocks of nodes whose free devices sum to less than ``need`` (``Usage.block_free``):
        # every node of such a block is skipped below anyway
        blocks = usage.block_free if need and usage.node_block is not None else None
        shift = usage.block_shift
        mask = (1 << shift) - 1
        i = start
        while i < end:
            if blocks is not None and (i == start or not i & mask) and blocks[i >> shift] < need:
                j = min(((i >> shift) + 1) << shift, end)
                if self.state.verify:
                    _verify_short(self.state, i, j, need, _BLOCKS)
                self._skip(j - i)
                i = j
                continue
            if need:
                # a node with fewer free devices than the pod's own claims need fails in ``_try``
                # anyway (at the allocator's count check); skip it, counted as a check all the same
                total = simple[i]
                free = total - taken.get(nodes[i].name, 0) if total is not None else free_on(nodes[i], usage)
                if free is not None and free < need:
                    if self.state.verify and total is not None:
                        _verify_short(self.state, i, i + 1, need, _COUNTS)
                    self._skip(1)
                    i += 1
                    continue
            if self._try(plan, i):
                if self.search(k + 1, i):
                    return True
                self._undo()
            i += 1
        return False

    def _search_ordered(self, k: int, floor: int) -> bool:
        """``search`` over ``node_order`` (``floor``: a position in it): the same depth-first search
        with the same per-node checks, nodes tried in the score's order instead of cluster order
        (identical pods in non-decreasing positions of that order; every placement can be reordered
        so, whatever the order). Without the block skip, which follows cluster order."""
        if k == len(self.plans):
            return True
        plan = self.plans[k]
        order = self.node_order
        assert order is not None
        start = floor if k > 0 and self.plans[k - 1].shape == plan.shape else 0
        need = plan.need
        nodes = self.state.nodes
        free_on = self.state.inventory.free_on
        usage = self.state.usage
        taken = usage.node_taken
        simple = self.state.simple_devices
        # a pod whose claims on every node are its own (no shared claims, no extended resources
        # served through DRA): where the allocator's failure memo already says they do not fit,
        # ``_try`` answers no whatever its other checks say; skip the node, counted as a check
        # (verify mode tries it and raises if it fits)
        shapes = (
            tuple(pc.shape_id for pc in plan.own)
            if plan.own and not plan.shared and not plan.extended
            else None
        )
        misfit = self.state.allocator.known_misfit
        verify = self.state.verify
        for pos in range(start, len(order)):
            i = order[pos]
            if need:
                total = simple[i]
                free = total - taken.get(nodes[i].name, 0) if total is not None else free_on(nodes[i], usage)
                if free is not None and free < need:
                    self._skip(1)
                    continue
            if shapes is not None and misfit(shapes, nodes[i], usage):
                if not verify:
                    self._skip(1)
                    continue
                if self._try(plan, i):
                    raise VerifyError(
                        "_Gang._search_ordered (known misfit)", "no fit", "fits", f"node {nodes[i].name}"
                    )
                continue
            if self._try(plan, i):
                if self._search_ordered(k + 1, pos):
                    return True
                self._undo()
        return False

    def _skip(self, n: int) -> None:
        """Count ``n`` nodes skipped without a try as node checks, one by one as far as the bound."""
        if self.checks + n > self.budget:
            self.checks = self.budget + 1  # where counting them one by one stops
            raise _BoundHit()
        self.checks += n

    # ---- explanation ------------------------------------------------------------------------
    def explain(self, bound_hit: bool) -> GangExplanation:
        """Greedy pass up to the first pod that fits nowhere, then that pod's closest node."""
        self.budget = self.checks + len(self.plans) * len(self.state.nodes) + 1
        stuck: _PodPlan | None = None
        where = range(len(self.state.nodes)) if self.node_order is None else self.node_order
        for plan in self.plans:
            try:
                placed_here = any(self._try(plan, i) for i in where)
            except _BoundHit:
                placed_here, bound_hit = False, True
            if not placed_here:
                stuck = plan
                break
        if stuck is None:  # a greedy pass fits: only the bound stopped the search
            return GangExplanation.of(
                self.plans[0].key if self.plans else "",
                (f"search stopped after {self.checks} node checks (work bound); the gang may fit",),
                None,
                self.checks,
                bound_hit=True,
            )
        misses = [self._miss(stuck, i) for i in where]
        placed = len(self.placements)
        pod = ObjRef("Pod", stuck.key)
        if not misses:
            return GangExplanation.of(stuck.key, ("pod ", pod, ": no nodes"), None, self.checks, bound_hit)
        # the closest node, among those with devices of the classes the pod asks for when one has
        # them; among device misses one that has devices of the request's class
        classes = _classes(stuck)
        with_class = {i for i in range(len(self.state.nodes)) if self._has_classes(classes, i)}
        best = min(
            misses,
            key=lambda m: (
                self.state.node_index[m.node] not in with_class if with_class else False,
                _KIND_RANK[m.kind],
                1 if m.in_class == 0 else 0,
                m.short_by,
                self.state.node_index[m.node],
            ),
        )
        parts: tuple[Part, ...] = (
            "pod ",
            pod,
            f" (pod {placed + 1} of {len(self.plans)}) fits on none of {len(misses)} nodes after "
            f"{placed} placed; best node {best.node}: ",
            *best.parts,
        )
        if bound_hit:
            parts += (f" (search stopped after {self.checks} node checks)",)
        return GangExplanation.of(stuck.key, parts, best, self.checks, bound_hit)

    def _has_classes(self, classes: tuple[frozenset[str], ...], i: int) -> bool:
        """Whether node i has, for each request (its alternatives' classes), devices of one of them."""
        node = self.state.nodes[i]
        has = self.state._class_on
        for alts in classes:
            ok = False
            for c in sorted(alts):
                got = has.get((c, i))
                if got is None:
                    got = has[(c, i)] = self.state.allocator.devices_in_class(c, node) > 0
                if got:
                    ok = True
                    break
            if not ok:
                return False
        return True

    def _miss(self, plan: _PodPlan, i: int) -> NodeMiss:
        miss = self._static_miss(plan, i) or self._dynamic_miss(plan, i)
        if miss is not None:
            return miss
        node = self.state.nodes[i]
        claims, _, _ = self._claims_for(plan, i)
        got = self.state.allocator.allocate_on(claims, node, self.state.usage, explain=True)
        if isinstance(got, tuple):  # fits now (only reachable when an earlier search was cut short)
            for ca in got:
                for p in ca.picks:
                    self.state.usage.give_back(p)
            return NodeMiss(node.name, "devices", "fits on its own", Fraction(0))
        assert isinstance(got, Shortfall)
        return NodeMiss(
            node.name,
            "devices",
            f"claim {got.claim}, request {got.request}: {got.detail}",
            Fraction(got.short_by),
            claim=got.claim,
            request=got.request,
            detail=got.detail,
            device_class=got.device_class,
            in_class=got.in_class,
        )


def _classes(plan: _PodPlan) -> tuple[frozenset[str], ...]:
    """Per device request of the pod's own claims, its alternatives' DeviceClasses (extended
    resources are left out: a node may serve them through its device plugin, without devices)."""
    return tuple(frozenset(a.class_name for a in alts) for pc in plan.own for alts in pc.requests)


def place_gang(
    pods: Sequence[Pod],
    state: ClusterState,
    *,
    max_node_checks: int = DEFAULT_MAX_NODE_CHECKS,
    node_order: Sequence[int] | None = None,
    device_order: DeviceOrder | None = None,
    explain: bool = True,
) -> GangResult:
    """Place every pod of the gang or none. On success the result's transaction is open (tentative):
    commit or discard it. On failure the state is unchanged and the result explains why.

    ``node_order`` (a permutation of node indexes, or a subset: a topology domain) and
    ``device_order`` (see ``Allocator.allocate_on``) come from a placement score
    (``queueing.dra.scoring``): the same exact search, trying nodes and devices in that order.
    ``explain=False``: a failure's explanation only says whether the bound stopped the search.

    Raises ``AllocationError`` for input errors that abort allocation (unknown class or claim,
    CEL errors, ...)."""
    txn = state.begin()
    try:
        gang = _Gang(pods, state, txn, max_node_checks, node_order, device_order)
        try:
            ok = gang.search()
            bound_hit = False
        except _BoundHit:
            ok, bound_hit = False, True
            while txn._steps:
                gang._undo()
        if ok:
            return GangResult(True, tuple(gang.placements), None, txn, gang.checks)
        if explain:
            explanation = gang.explain(bound_hit)
        else:  # the caller explains otherwise: only whether the bound stopped the search
            explanation = GangExplanation.of("", ("not placed",), None, gang.checks, bound_hit)
        checks = gang.checks
    except BaseException:
        if txn.status == "tentative":
            txn.discard()
        raise
    txn.discard()
    return GangResult(False, (), explanation, None, checks)


# ------------------------------------------------------------------ gangs of simple pods
@dataclass(frozen=True, slots=True)
class SimplePodSet:
    """What ``place_simple`` derived from one (spec, namespace) group of a gang."""

    # the pods' claims (all from templates), in spec order: name in the pod spec, and a claim
    # from the template (named for some pod; the same spec as every pod's claim of that name)
    claims: tuple[tuple[str, ResourceClaim], ...]
    resources: tuple[tuple[str, Fraction], ...]  # each pod's ``PodPlacement.node_resources``


@dataclass(frozen=True, slots=True)
class SimpleGang:
    """Where ``place_gang`` places a gang of simple pods (see ``place_simple``), without its
    per-pod objects: pods in order (groups in order, then index in the group)."""

    pod_sets: tuple[SimplePodSet, ...]  # per group
    nodes: tuple[int, ...]  # per pod: index in ``ClusterState.nodes``
    picks: tuple[tuple[tuple[Pick, ...], ...], ...]  # per pod: per claim (spec order) its picks
    node_checks: int


_NO_BOUND = 1 << 62


def _room(
    state: ClusterState,
    i: int,
    requests: Sequence[tuple[str, Fraction]],
    extra: Mapping[str, Fraction] | None,
) -> int:
    """How many pods with these (positive) requests ``_Gang._dynamic_miss`` lets onto node i one
    after the other, with ``extra`` taken there besides ``ClusterState.used`` (no shared claims,
    no extended resources served through DRA): pod m+1 fits when m+1 pods' requests fit in what is
    free, resource by resource, so the number is the least ``free // request``."""
    cap = state.allocatable[i]
    used = state.used[i]
    room = _NO_BOUND
    for r, need in requests:
        if "/" not in r:
            if cap is None or r not in cap:
                continue
            have = cap[r]
        else:
            have = (cap or {}).get(r, _ZERO)
        u = used.get(r, _ZERO)
        e = extra.get(r, _ZERO) if extra else _ZERO
        if have.denominator == 1 == u.denominator == e.denominator == need.denominator:
            # whole amounts (most of them): the same floor in integers, without Fraction arithmetic
            room = min(room, (have.numerator - u.numerator - e.numerator) // need.numerator)
            continue
        free = have - u
        if extra:
            free -= e
        room = min(room, free // need)
    return room


def place_simple(
    groups: Sequence[tuple[PodSpec, str, int]],
    state: ClusterState,
    *,
    max_node_checks: int = DEFAULT_MAX_NODE_CHECKS,
) -> SimpleGang | None:
    """``place_gang`` for a gang of ``count`` pods per (spec, namespace, count) group, groups in
    order (pods that differ only in their names), when every pod is *simple*: where it places
    each pod and the picks of each pod's claims, with none of the per-pod objects, or None when
    this cannot tell (then ``place_gang`` decides, and explains a failure). The state is left as
    it was.

    Simple: ``_Gang._plan`` prepared the spec before (``ClusterState._spec_static`` for this spec
    object and namespace) with the templates it names now; every claim is from a template, has
    no constraints, and each of its requests has one ExactCount alternative without admin access
    or tolerations; no extended resource is served through DRA; every request of node allocatable
    is positive; the count is positive.

    Why this is ``place_gang``'s placement: ``_Gang.search`` is depth first; its first descent puts
    each pod on the first node ``_try`` accepts, from where the search starts for it (the previous
    pod's node when the pods are alike, else the first node), skipping nodes as it does; when that
    descent places every pod, the search returns it. This follows that descent only, each step as
    the search and ``_try`` take it: the same node skips and node-check count (None where the
    count passes the bound), ``_static_miss``, ``_dynamic_miss`` (as ``_room``), and for the claims
    ``Allocator.greedy_fill``, which is ``allocate_on`` (pod after pod on one node) wherever it
    decides; the picks are taken in the state's usage as ``_try`` takes them, for the pods after.
    It gives up (None) where the descent would backtrack (a pod fits nowhere), where
    ``allocate_on`` would need its backtracking search, and at the bound. At the end every pick is
    given back as ``Transaction.discard`` does.
    """
    if state._open is not None and state._open.status == "tentative":
        return None  # ``place_gang`` raises
    alloc = state.allocator
    prepared: list[
        tuple[_SpecStatic, int, list[tuple[int, tuple[Alternative, ...]]], list[PreparedClaim]]
    ] = []
    for spec, ns, n in groups:
        ss = state._spec_static.get((id(spec), ns))
        if n < 1 or ss is None or ss.spec is not spec or ss.extended:
            return None
        if any(v <= 0 for _, v in ss.requests):
            return None
        templates: list[ResourceClaimTemplate] = []
        for prc in spec.resource_claims or []:
            if prc.resource_claim_name or not prc.resource_claim_template_name:
                return None
            t = state.templates.get(f"{ns}/{prc.resource_claim_template_name}")
            if t is None:
                return None
            templates.append(t)
        if not _same(ss.templates, templates):
            return None
        steps: list[tuple[int, tuple[Alternative, ...]]] = []
        claims = [pc for _, pc in ss.protos]
        for ci, pc in enumerate(claims):
            if pc.constraints:
                return None
            for alts in pc.requests:
                if len(alts) != 1 or alts[0].all_mode or alts[0].admin_access or alts[0].tolerations:
                    return None
                steps.append((ci, alts))
        prepared.append((ss, n, steps, claims))

    nodes = state.nodes
    names = state.node_names
    end = len(nodes)
    usage = state.usage
    node_taken = usage.node_taken
    simple = state.simple_devices
    free_on = state.inventory.free_on
    shift = usage.block_shift
    mask = (1 << shift) - 1
    checks = 0
    out_nodes: list[int] = []
    out_picks: list[tuple[tuple[Pick, ...], ...]] = []
    taken: list[tuple[tuple[Pick, ...], ...]] = []  # per pod placed: its picks per claim (as taken)
    extra: dict[int, dict[str, Fraction]] = {}  # node allocatable taken by earlier groups
    # (node, requests) per group and node it placed pods on
    placed_on: list[tuple[int, tuple[tuple[str, Fraction], ...]]] = []
    prev: _SpecStatic | None = None
    floor = 0
    try:
        for ss, n, steps, claims in prepared:
            need = ss.need
            blocks = usage.block_free if need and usage.node_block is not None else None
            nblocks = len(usage.block_free)
            room: dict[int, int] = {}
            here: dict[int, int] = {}
            alike = prev is not None and prev.shape == ss.shape
            dead: set[int] = set()  # nodes where the next pod's claims are known not to fit
            k = 0
            while k < n:
                start = floor if k > 0 or alike else 0
                i = start
                while True:
                    if i >= end:
                        return None  # the search would backtrack
                    if blocks is not None and (i == start or not i & mask) and blocks[i >> shift] < need:
                        # this block and the next ones short as well, one after the other (the
                        # checks add up as skipping them one by one; at the bound or the end the
                        # descent gives up either way)
                        b = (i >> shift) + 1
                        while b < nblocks and blocks[b] < need:
                            b += 1
                        j = min(b << shift, end)
                        if state.verify:
                            _verify_short(state, i, j, need, _BLOCKS)
                        checks += j - i
                        if checks > max_node_checks:
                            return None
                        i = j
                        continue
                    if need:
                        total = simple[i]
                        free = (
                            total - node_taken.get(names[i], 0)
                            if total is not None
                            else free_on(nodes[i], usage)
                        )
                        if free is not None and free < need:
                            if state.verify and total is not None:
                                _verify_short(state, i, i + 1, need, _COUNTS)
                            checks += 1
                            if checks > max_node_checks:
                                return None
                            i += 1
                            continue
                    checks += 1
                    if checks > max_node_checks:
                        return None
                    if _static_miss(state, ss.spec, ss.static_ok, i) is not None:
                        i += 1
                        continue
                    r = room.get(i)
                    if r is None:
                        r = room[i] = _room(state, i, ss.requests, extra.get(i))
                    if r <= 0 or i in dead:
                        i += 1
                        continue
                    limit = min(r, n - k)
                    if steps:
                        # the next pods, as long as they fit here: each starts here (it is alike
                        # the one before) and fits, so its search tries this node, one check
                        got, after = alloc.greedy_fill(claims, steps, nodes[i], usage, limit)
                        taken.extend(got)
                        if after is True:
                            return None  # ``allocate_on`` would search (for this pod or a later one)
                        if after is False:
                            dead.add(i)
                        if not got:
                            i += 1
                            continue
                        m = len(got)
                        out_picks.extend(got)
                    else:
                        m = limit
                        out_picks.extend(() for _ in range(m))
                    checks += m - 1
                    if checks > max_node_checks:
                        return None
                    room[i] = r - m
                    here[i] = here.get(i, 0) + m
                    out_nodes.extend(i for _ in range(m))
                    k += m
                    break
                floor = i
            for i, cnt in here.items():
                acc = extra.setdefault(i, {})
                for rname, v in ss.requests:
                    have = acc.get(rname)
                    acc[rname] = v * cnt if have is None else have + v * cnt
                placed_on.append((i, ss.requests))
            prev = ss
        pod_sets = tuple(
            SimplePodSet(tuple((name, pc.claim) for name, pc in ss.protos), ss.resources)
            for ss, _, _, _ in prepared
        )
        return SimpleGang(pod_sets, tuple(out_nodes), tuple(out_picks), checks)
    finally:
        # as ``Transaction.discard``: pod by pod from the last
        usage.give_back_all(p for per_claim in reversed(taken) for picks in per_claim for p in picks)
        # what ``Transaction._apply`` and ``_undo_last`` leave: a zero for a resource new to the node
        for i, requests in placed_on:
            used = state.used[i]
            for rname, v in requests:
                if rname not in used:
                    used[rname] = _ZERO + v - v
