"""The structured DRA allocator: claims → requests → devices on one node, as upstream decides.

Search: depth first with backtracking over claims, their requests (for ``firstAvailable`` the
subrequests in order) and the devices of each request, trying combinations, not permutations (the
devices of one request are picked in increasing inventory order). Everything that does not depend on
what else is allocated (class and request selectors, taints vs tolerations, capacity requests vs
request policy, pool completeness) is computed once per (request shape, node) and cached; the search
only checks availability, shared counters, consumable capacity and constraints.

Before it searches a node, upstream validates every request (and subrequest) of every claim
(``Allocate`` and ``validateDeviceRequest`` in structured/internal/incubating/allocator_incubating.go,
k8s.io/dynamic-resource-allocation v0.36.2); so does ``allocate_on`` (``_validate``): an ``All``
request takes every device of the node's pools that its selectors and capacity requests match, so an
incomplete or invalid pool the node sees (any driver's, ``Inventory.unusable_pools_on``) or a CEL
error on any device aborts, and the claim's results (``All`` counted with all its devices) must stay
within 32. An ``All`` request fails on a node where one of its devices has a NoSchedule/NoExecute
taint it does not tolerate (upstream's ``allocateDevice`` rejects that device, and ``All`` has no
other choice). docs/allocator.md lists the known differences from upstream.

Errors that abort the allocation upstream raise ``AllocationError`` (unknown class, CEL compile or
runtime error, more than 32 results in one claim, ``All`` on a node that sees an incomplete or invalid
pool, a feature used while its gate is off, malformed requests). "Does not fit" is a returned
``Shortfall``.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from queueing.api.core import Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm
from queueing.api.quantity import Quantity
from queueing.api.resource import (
    AllocationResult,
    DeviceAllocationConfiguration,
    DeviceAllocationResult,
    DeviceCapacity,
    DeviceClass,
    DeviceRequestAllocationResult,
    DeviceSelector,
    DeviceToleration,
    ResourceClaim,
    ResourceClaimStatus,
)
from queueing.dra.cel import CELError, CELRuntimeError, CompiledSelector, SelectorCompiler
from queueing.dra.errors import AllocationError
from queueing.dra.features import Features
from queueing.dra.inventory import (
    AttrValue,
    CounterKey,
    DeviceKey,
    Inventory,
    InventoryDevice,
    Pick,
    Usage,
    attribute_key,
)
from queueing.dra.verify import VerifyError, pick_value, picks_value

__all__ = [
    "MAX_RESULTS_PER_CLAIM",
    "AllocationOutcome",
    "Allocator",
    "Alternative",
    "ClaimAllocation",
    "PreparedClaim",
    "SelectorCache",
    "Shortfall",
]

MAX_RESULTS_PER_CLAIM = 32  # resourceapi.AllocationResultsMaxSize
DEFAULT_MAX_STEPS = 200_000  # device checks per node attempt before the search gives up
_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
_DRIVER_RE = re.compile(r"""device\.driver\s*==\s*(?:"([^"]+)"|'([^']+)')""")
_SHARE_NAMESPACE = uuid.UUID("6c1a3f0e-5b7e-4c52-9a51-0d2f6b1f9e3a")


# ------------------------------------------------------------------ selectors, compiled once
@dataclass(frozen=True, slots=True)
class BoundSelector:
    """A compiled selector and where it came from (for error messages)."""

    compiled: CompiledSelector
    obj: str
    field: str


class SelectorCache:
    """Compiles each CEL expression once and evaluates each (selector, device) once per generation.

    The memo is keyed by (expression, driver, pool, generation, device), so one cache may be kept
    across inventories rebuilt from new slices. Runtime errors are memoised too and re-raised.
    """

    def __init__(self, compiler: SelectorCompiler | None = None) -> None:
        self._compiler = compiler if compiler is not None else SelectorCompiler()
        self._compiled: dict[tuple[str, str | None], CompiledSelector | CELError] = {}
        self._memo: dict[tuple[str, str, str, int, str], bool | CELRuntimeError] = {}

    def compile(
        self, expression: str, obj: str, field_path: str, driver_hint: str | None = None
    ) -> BoundSelector:
        ck = (expression, driver_hint)
        hit = self._compiled.get(ck)
        if hit is None:
            try:
                hit = self._compiler.compile(expression, driver_hint=driver_hint)
            except CELError as e:
                hit = e
            self._compiled[ck] = hit
        if isinstance(hit, CELError):
            raise AllocationError(obj, field_path, f"CEL compile error: {hit.message}")
        return BoundSelector(hit, obj, field_path)

    def matches(self, sel: BoundSelector, dev: InventoryDevice) -> bool:
        k = (sel.compiled.expression, dev.key[0], dev.key[1], dev.generation, dev.key[2])
        hit = self._memo.get(k)
        if hit is None:
            try:
                hit = bool(sel.compiled.matches(dev.cel))
            except CELRuntimeError as e:
                hit = e
            self._memo[k] = hit
        if isinstance(hit, CELRuntimeError):
            raise AllocationError(
                sel.obj,
                sel.field,
                f"CEL runtime error on device {dev.key[0]}/{dev.key[1]}/{dev.key[2]}: {hit.message}",
            )
        return hit

    def __len__(self) -> int:
        return len(self._memo)


# ------------------------------------------------------------------ prepared claims
@dataclass(frozen=True, slots=True, eq=False)
class Alternative:
    """One way to satisfy a request: ``exactly`` itself, or one ``firstAvailable`` subrequest."""

    claim_ref: str
    request: str  # name in the result: "req" or "req/sub"
    parent: str  # the request's own name
    field: str  # path in the claim, for messages
    class_name: str
    device_class: DeviceClass
    selectors: tuple[BoundSelector, ...]  # the class's first, then the request's
    all_mode: bool
    count: int
    admin_access: bool
    tolerations: tuple[DeviceToleration, ...]
    capacity: tuple[tuple[str, Fraction], ...]  # fully qualified name -> requested amount
    signature: tuple[object, ...]  # what the static candidate list depends on


@dataclass(frozen=True, slots=True)
class Constraint:
    requests: frozenset[str] | None  # None: all requests of the claim
    attribute: str  # fully qualified
    distinct: bool

    def applies(self, alt: Alternative) -> bool:
        return self.requests is None or alt.parent in self.requests or alt.request in self.requests


@dataclass(frozen=True, slots=True, eq=False)
class PreparedClaim:
    claim: ResourceClaim
    ref: str  # "ResourceClaim ns/name"
    requests: tuple[tuple[Alternative, ...], ...]
    constraints: tuple[Constraint, ...]
    shape: tuple[object, ...] = ()  # what the outcome depends on (not the claim's name)
    shape_id: int = 0  # the allocator's number for ``shape`` (equal shapes, equal numbers)
    # some choice of subrequests, or an ``All`` request, could take more than 32 results: the search
    # checks the limit as it goes (upstream: ``errAllocationResultMaxSizeExceeded``, not a fit)
    may_exceed: bool = False

    @property
    def key(self) -> str:
        return self.claim.key


# ------------------------------------------------------------------ outcomes
@dataclass(frozen=True, slots=True)
class ClaimAllocation:
    claim: ResourceClaim
    allocation: AllocationResult
    picks: tuple[Pick, ...]

    @property
    def namespace(self) -> str | None:
        return self.claim.namespace

    @property
    def name(self) -> str:
        return self.claim.name

    def allocated_claim(self) -> ResourceClaim:
        """A copy of the claim with ``status.allocation`` set (for use as an in-use claim)."""
        c = self.claim.model_copy(deep=True)
        status = c.status.model_copy() if c.status is not None else ResourceClaimStatus()
        status.allocation = self.allocation
        c.status = status
        return c


@dataclass(frozen=True, slots=True)
class Shortfall:
    """Why claims did not fit on one node: the first request that could not be satisfied."""

    node: str | None
    claim: str  # namespace/name
    request: str
    needed: int
    available: int
    detail: str
    bound_hit: bool = False
    device_class: str | None = None  # the request's DeviceClass (when one request is short)
    in_class: int | None = None  # devices of that class on the node

    @property
    def short_by(self) -> int:
        return max(self.needed - self.available, 0)

    def __str__(self) -> str:
        where = f"node {self.node}" if self.node else "no node"
        return f"{where}: claim {self.claim}, request {self.request}: {self.detail}"


@dataclass(frozen=True, slots=True)
class AllocationOutcome:
    node: str | None
    claims: tuple[ClaimAllocation, ...]
    misses: tuple[Shortfall, ...] = ()
    allocated: bool = False

    @property
    def best_miss(self) -> Shortfall | None:
        if not self.misses:
            return None
        return min(self.misses, key=lambda m: (m.bound_hit, m.short_by, m.node or ""))

    @property
    def bound_hit(self) -> bool:
        return any(m.bound_hit for m in self.misses)

    def reason(self) -> str:
        if self.allocated:
            return ""
        best = self.best_miss
        if best is None:
            return "no candidate nodes"
        n = len(self.misses)
        head = f"claims do not fit on any of {n} node{'s' if n != 1 else ''}"
        if n == 1:
            return f"claims do not fit: {best}"
        return f"{head}; best {best}"


class _BoundHit(Exception):
    pass


class _Faulted(Exception):
    """A selector's CEL runtime error on a device (see ``Allocator._selected``)."""

    def __init__(self, fault: CelFault) -> None:
        self.fault = fault


class _TooMany(Exception):
    """Upstream's ``errAllocationResultMaxSizeExceeded``: every alternative of a step would take the
    claim over 32 results, whatever devices its earlier steps picked (see ``Allocator._solve_limited``)."""


# ------------------------------------------------------------------ capacity policy
def consumed_capacity(requested: Fraction | None, cap: DeviceCapacity) -> Fraction | None:
    """What one allocation consumes of a capacity (requestPolicy rounding); None if not allowed."""
    total = cap.value.value
    policy = cap.request_policy
    if requested is None:
        if policy is not None and policy.default is not None:
            return policy.default.value
        return total
    if policy is None:
        return requested
    rng = policy.valid_range
    if rng is not None and rng.min is not None:
        lo = rng.min.value
        value = max(requested, lo)
        if rng.step is not None and rng.step.value > 0:
            step = rng.step.value
            n = (value - lo) / step
            steps = -((-n.numerator) // n.denominator)
            value = lo + steps * step
        if rng.max is not None and value > rng.max.value:
            return None
        return value
    if policy.valid_values:
        for v in sorted(q.value for q in policy.valid_values):
            if v >= requested:
                return v
        return None
    return requested


def _tolerated(dev: InventoryDevice, tolerations: tuple[DeviceToleration, ...]) -> bool:
    return all(
        any(t.tolerates(taint) for t in tolerations)
        for taint in dev.taints
        if taint.effect in _BLOCKING_EFFECTS
    )


# ------------------------------------------------------------------ the allocator
@dataclass(frozen=True, slots=True)
class CelFault:
    """A CEL runtime error of one selector on one device, kept with a candidate list. A list is
    shared by every request of the same shape (``Alternative.signature``), whichever claim built
    it: the fault names no claim; :meth:`error` names the one at hand."""

    selector: int  # index in ``Alternative.selectors`` (the same for every alternative of the shape)
    message: str  # "CEL runtime error on device ...: ..."

    def error(self, alt: Alternative) -> AllocationError:
        sel = alt.selectors[self.selector]
        return AllocationError(sel.obj, sel.field, self.message)


_NO_COUNTER = Fraction(0)  # the total of a counter the inventory does not have


@dataclass(slots=True)
class _Candidate:
    dev: InventoryDevice
    capacity: tuple[tuple[str, Fraction], ...]  # consumption for multi-allocation devices
    # a CEL runtime error on this device: raised only if the search reaches the device (as upstream,
    # which evaluates selectors lazily), so a fit found earlier is not aborted by a later device;
    # ``All`` requests raise it before the search (``Allocator._validate``)
    error: CelFault | None = None
    # a NoSchedule/NoExecute taint the request does not tolerate: in the lists of ``All`` requests
    # only (the request fails on the node, as upstream); other requests never see the device
    tainted: bool = False


@dataclass(slots=True)
class _Search:
    """State of one node attempt."""

    usage: Usage
    node: Node | None
    steps_left: int
    # picks per (claim index, device): a claim never lists a device twice
    in_claim: dict[tuple[int, DeviceKey], int] = field(default_factory=dict)
    picks: list[tuple[int, Alternative, Pick]] = field(default_factory=list)
    # per claim, per constraint: values of the devices picked so far
    cvals: list[list[list[AttrValue]]] = field(default_factory=list)
    # a placement score's preferred order of a request's candidates (``queueing.dra.scoring``):
    # the search tries the same combinations, in that order (None: inventory order)
    order: DeviceOrder | None = None


# reorders a request's candidates on a node, given what is taken (``queueing.dra.scoring``); the
# result must hold the same candidates
DeviceOrder = Callable[[tuple[_Candidate, ...], Node | None, Usage], tuple[_Candidate, ...]]


class Allocator:
    """Allocates claims for one pod on one node at a time (see ``allocate`` / ``allocate_on``).

    ``usage`` arguments are the book of what is already taken; ``allocate_on`` leaves its picks in
    it on success (give them back with ``Usage.give_back``), ``allocate`` never changes it.
    """

    def __init__(
        self,
        inventory: Inventory,
        classes: Mapping[str, DeviceClass] | Iterable[DeviceClass],
        *,
        features: Features | None = None,
        cache: SelectorCache | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
        verify: bool = False,
    ) -> None:
        self.inventory = inventory
        # verify mode (``queueing.dra.verify``): the greedy paths also run the general search
        self.verify = verify
        self.classes: dict[str, DeviceClass] = (
            dict(classes) if isinstance(classes, Mapping) else {c.name: c for c in classes}
        )
        self.features = features or Features()
        self.cache = cache if cache is not None else SelectorCache()
        self.max_steps = max_steps
        self._class_selectors: dict[str, tuple[BoundSelector, ...]] = {}
        self._candidates: dict[tuple[tuple[object, ...], str], tuple[_Candidate, ...]] = {}
        self._in_class: dict[tuple[str, str], int] = {}  # (class, node) -> ``devices_in_class``
        # (claims' shape ids, node) -> (usage token, epoch) of a search that found no fit
        self._fail: dict[tuple[tuple[int, ...], str], tuple[object, ...]] = {}
        # claims shape -> (usage token, epoch, node sequence, index of the first node worth trying)
        self._skip: dict[tuple[object, ...], tuple[object, int, object, int]] = {}
        # see ``_results``: (node, requests and devices picked) -> allocation result (never mutated)
        self._result_cache: dict[tuple[object, ...], AllocationResult] = {}
        self._result_seen: set[tuple[object, ...]] = set()
        self._shape_ids: dict[tuple[object, ...], int] = {}  # see ``PreparedClaim.shape_id``
        # id(candidates) -> (candidates, clean: no CEL error, plain: see ``greedy_fill``)
        self._flags: dict[int, tuple[tuple[_Candidate, ...], bool, bool]] = {}
        # (id(plain candidates), request) -> (candidates, their device keys, their picks for the
        # request, in order): a pick is a value of (candidate, request), made once (``_fill_plain``)
        self._plain_picks: dict[
            tuple[int, str], tuple[tuple[_Candidate, ...], tuple[DeviceKey, ...], tuple[Pick, ...]]
        ] = {}
        # claims' shape ids -> ``_layout`` of claims of those shapes
        self._layouts: dict[tuple[int, ...], tuple[int, bool]] = {}
        # claims' shape ids -> whether ``allocate_on`` runs ``_validate`` for claims of those shapes
        self._validated: dict[tuple[int, ...], bool] = {}

    # ---- preparation (node independent) ---------------------------------------------------
    def _class(self, name: str, ref: str, field_path: str) -> tuple[DeviceClass, tuple[BoundSelector, ...]]:
        cls = self.classes.get(name)
        if cls is None:
            raise AllocationError(ref, field_path, f"DeviceClass {name!r} not found")
        sels = self._class_selectors.get(name)
        if sels is None:
            sels = self._compile_all(cls.spec.selectors, f"DeviceClass {name}", "spec.selectors")
            self._class_selectors[name] = sels
        return cls, sels

    def _compile_all(
        self, selectors: list[DeviceSelector] | None, obj: str, path: str
    ) -> tuple[BoundSelector, ...]:
        out = []
        hint = None
        for s in selectors or []:
            m = _DRIVER_RE.search(s.cel.expression) if s.cel is not None else None
            if m:
                hint = m.group(1) or m.group(2)
                break
        for i, s in enumerate(selectors or []):
            if s.cel is None:
                raise AllocationError(obj, f"{path}[{i}]", "selector has no cel expression")
            out.append(self.cache.compile(s.cel.expression, obj, f"{path}[{i}].cel.expression", hint))
        return tuple(out)

    def prepare(self, claims: Sequence[ResourceClaim]) -> tuple[PreparedClaim, ...]:
        return tuple(self.prepare_claim(c) for c in claims)

    def prepare_claim(self, claim: ResourceClaim) -> PreparedClaim:
        ref = f"ResourceClaim {claim.key}"
        reqs = claim.spec.devices.requests or []
        names: set[str] = set()
        prepared: list[tuple[Alternative, ...]] = []
        min_total = 0
        most = 0  # results the claim could take at most (All: more than the limit)
        for i, r in enumerate(reqs):
            path = f"spec.devices.requests[{i}]"
            if r.name in names:
                raise AllocationError(ref, f"{path}.name", f"duplicate request name {r.name!r}")
            names.add(r.name)
            if (r.exactly is None) == (r.first_available is None):
                raise AllocationError(ref, path, "exactly one of exactly or firstAvailable must be set")
            alts: list[Alternative] = []
            if r.exactly is not None:
                e = r.exactly
                if e.admin_access and not self.features.admin_access:
                    raise AllocationError(
                        ref, f"{path}.exactly.adminAccess", "admin access requested but DRAAdminAccess is off"
                    )
                alts.append(
                    self._alternative(
                        ref,
                        r.name,
                        r.name,
                        f"{path}.exactly",
                        e.device_class_name,
                        e.selectors,
                        e.allocation_mode,
                        e.count,
                        bool(e.admin_access),
                        e.tolerations,
                        e.capacity.requests if e.capacity else None,
                    )
                )
            else:
                subs = r.first_available or []
                if not self.features.prioritized_list:
                    raise AllocationError(
                        ref, f"{path}.firstAvailable", "subrequests given but DRAPrioritizedList is off"
                    )
                if not subs:
                    raise AllocationError(ref, f"{path}.firstAvailable", "must not be empty")
                sub_names: set[str] = set()
                for j, s in enumerate(subs):
                    if s.name in sub_names:
                        raise AllocationError(
                            ref, f"{path}.firstAvailable[{j}].name", f"duplicate subrequest name {s.name!r}"
                        )
                    sub_names.add(s.name)
                    alts.append(
                        self._alternative(
                            ref,
                            f"{r.name}/{s.name}",
                            r.name,
                            f"{path}.firstAvailable[{j}]",
                            s.device_class_name,
                            s.selectors,
                            s.allocation_mode,
                            s.count,
                            False,
                            s.tolerations,
                            s.capacity.requests if s.capacity else None,
                        )
                    )
            if len(alts) == 1:
                a = alts[0]
                min_total += 0 if a.all_mode else a.count
                most += MAX_RESULTS_PER_CLAIM + 1 if a.all_mode else a.count
            else:
                min_total += min((0 if a.all_mode else a.count) for a in alts)
                most += max((MAX_RESULTS_PER_CLAIM + 1 if a.all_mode else a.count) for a in alts)
            prepared.append(tuple(alts))
        if min_total > MAX_RESULTS_PER_CLAIM:
            raise AllocationError(
                ref,
                "spec.devices.requests",
                f"asks for {min_total} devices, more than the limit of {MAX_RESULTS_PER_CLAIM} per claim",
            )
        constraints: list[Constraint] = []
        for i, c in enumerate(claim.spec.devices.constraints or []):
            path = f"spec.devices.constraints[{i}]"
            if (c.match_attribute is None) == (c.distinct_attribute is None):
                raise AllocationError(
                    ref, path, "exactly one of matchAttribute or distinctAttribute must be set"
                )
            attr = c.match_attribute if c.match_attribute is not None else c.distinct_attribute
            assert attr is not None
            fname = f"{path}.{'matchAttribute' if c.match_attribute is not None else 'distinctAttribute'}"
            if "/" not in attr:
                raise AllocationError(ref, fname, f"{attr!r} must be a fully qualified name (domain/name)")
            for rn in c.requests or []:
                parent = rn.split("/", 1)[0]
                if parent not in names:
                    raise AllocationError(ref, f"{path}.requests", f"unknown request {rn!r}")
            constraints.append(
                Constraint(
                    frozenset(c.requests) if c.requests else None,
                    attr,
                    distinct=c.distinct_attribute is not None,
                )
            )
        shape = (
            tuple(tuple((a.signature, a.count, a.all_mode) for a in alts) for alts in prepared),
            tuple(constraints),
        )
        shape_id = self._shape_ids.setdefault(shape, len(self._shape_ids))
        return PreparedClaim(
            claim,
            ref,
            tuple(prepared),
            tuple(constraints),
            shape,
            shape_id,
            most > MAX_RESULTS_PER_CLAIM,
        )

    def prepare_renamed(self, pc: PreparedClaim, claim: ResourceClaim) -> PreparedClaim:
        """``prepare_claim(claim)`` for a claim that differs from ``pc.claim`` in its name only:
        preparing depends on the claim's identity only through the name its messages use (the
        ``claim_ref`` of its alternatives and the origin of the request's own selectors)."""
        ref = f"ResourceClaim {claim.key}"
        old = pc.ref
        requests = tuple(
            tuple(
                Alternative(
                    ref,
                    a.request,
                    a.parent,
                    a.field,
                    a.class_name,
                    a.device_class,
                    tuple(
                        BoundSelector(sel.compiled, ref, sel.field) if sel.obj == old else sel
                        for sel in a.selectors
                    ),
                    a.all_mode,
                    a.count,
                    a.admin_access,
                    a.tolerations,
                    a.capacity,
                    a.signature,
                )
                for a in alts
            )
            for alts in pc.requests
        )
        return PreparedClaim(claim, ref, requests, pc.constraints, pc.shape, pc.shape_id, pc.may_exceed)

    def _alternative(
        self,
        ref: str,
        request: str,
        parent: str,
        path: str,
        class_name: str,
        selectors: list[DeviceSelector] | None,
        mode: str | None,
        count: int | None,
        admin: bool,
        tolerations: list[DeviceToleration] | None,
        capacity: Mapping[str, Quantity] | None,
    ) -> Alternative:
        cls, class_sels = self._class(class_name, ref, f"{path}.deviceClassName")
        req_sels = self._compile_all(selectors, ref, f"{path}.selectors")
        all_mode = mode == "All"
        n = 1 if count is None else count
        if not all_mode and n < 1:
            raise AllocationError(ref, f"{path}.count", f"must be at least 1, got {n}")
        if not all_mode and n > MAX_RESULTS_PER_CLAIM:
            raise AllocationError(
                ref, f"{path}.count", f"{n} is more than the limit of {MAX_RESULTS_PER_CLAIM} per claim"
            )
        caps: list[tuple[str, Fraction]] = []
        if capacity:
            if not self.features.consumable_capacity:
                raise AllocationError(
                    ref, f"{path}.capacity", "capacity requests given but DRAConsumableCapacity is off"
                )
            for name, q in sorted(capacity.items()):
                caps.append((name, q.value))
        tols = tuple(tolerations or ()) if self.features.device_taints else ()
        signature: tuple[object, ...] = (
            class_name,
            tuple(s.compiled.expression for s in req_sels),
            admin,
            tuple((t.key, t.operator, t.value, t.effect) for t in tols),
            tuple(caps),
            all_mode,  # an All request's list differs: tainted devices stay in it (see ``_Candidate``)
        )
        return Alternative(
            claim_ref=ref,
            request=request,
            parent=parent,
            field=path,
            class_name=class_name,
            device_class=cls,
            selectors=class_sels + req_sels,
            all_mode=all_mode,
            count=n,
            admin_access=admin,
            tolerations=tols,
            capacity=tuple(caps),
            signature=signature,
        )

    # ---- static candidates per (request shape, node) ---------------------------------------
    def _selected(self, alt: Alternative, dev: InventoryDevice) -> bool:
        """Whether the device passes the feature gates and every selector of ``alt`` (in order).
        Raises :class:`CelFault` wrapped in ``_Faulted`` on a CEL runtime error."""
        if dev.uses_counters and not self.features.partitionable_devices:
            return False
        if dev.multi and not self.features.consumable_capacity:
            return False
        if dev.device.binding_conditions and not self.features.binding_conditions:
            return False  # upstream ``isSelectable``: not supported while the feature is off
        for i, sel in enumerate(alt.selectors):
            try:
                if not self.cache.matches(sel, dev):
                    return False
            except AllocationError as e:
                raise _Faulted(CelFault(i, e.message)) from None
        return True

    def _capacity_use(
        self, alt: Alternative, dev: InventoryDevice
    ) -> tuple[tuple[str, Fraction], ...] | None:
        requests: dict[str, Fraction] = {}
        for name, amount in alt.capacity:
            qn = attribute_key(name, dev.key[0])
            if qn not in dev.capacity:
                return None
            requests[qn] = amount
        if not dev.multi:
            for qn, amount in requests.items():
                if dev.capacity[qn][1].value.value < amount:
                    return None
            return ()
        out: list[tuple[str, Fraction]] = []
        for qn, (_, cap) in dev.capacity.items():
            use = consumed_capacity(requests.get(qn), cap)
            if use is None or use > cap.value.value:
                return None
            out.append((qn, use))
        return tuple(out)

    def candidates(self, alt: Alternative, node: Node | None) -> tuple[_Candidate, ...]:
        key = (alt.signature, node.name if node is not None else "")
        hit = self._candidates.get(key)
        if hit is not None:
            return hit
        result = self._candidates_of(alt, node)
        self._candidates[key] = result
        return result

    def _clean_candidates(self, alt: Alternative, node: Node) -> tuple[_Candidate, ...] | None:
        """``candidates(alt, node)`` when none has a CEL error, else None."""
        hit = self.candidates(alt, node)
        return hit if self._list_flags(hit)[1] else None

    def _list_flags(self, cands: tuple[_Candidate, ...]) -> tuple[tuple[_Candidate, ...], bool, bool]:
        """(``cands``, whether none has a CEL error, whether they are plain: see ``greedy_fill``),
        computed once per candidate list (kept by identity)."""
        flags = self._flags.get(id(cands))
        if flags is None or flags[0] is not cands:
            if len(self._flags) >= 100_000:
                self._flags.clear()
            clean = all(c.error is None for c in cands)
            flags = self._flags[id(cands)] = (
                cands,
                clean,
                clean
                and len(cands) <= self.max_steps
                and all(not c.dev.multi and not c.dev.consumes for c in cands),
            )
        return flags

    def _candidates_of(self, alt: Alternative, node: Node | None) -> tuple[_Candidate, ...]:
        if alt.all_mode:
            # upstream (``validateDeviceRequest``): "all" is undefined while any pool the node sees
            # is incomplete or invalid, whichever driver or class it serves
            bad = self.inventory.unusable_pools_on(node)
            if bad:
                pool = bad[0]
                why = "is being updated (incomplete)" if not pool.complete else f"is invalid: {pool.invalid}"
                raise AllocationError(
                    alt.claim_ref,
                    f"{alt.field}.allocationMode",
                    f"asks for all devices, but resource pool {pool.driver}/{pool.name} {why}",
                )
        out: list[_Candidate] = []
        taints = self.features.device_taints
        for dev in self.inventory.devices_on(node):
            if not dev.pool_ok:
                continue
            try:
                if not self._selected(alt, dev):
                    continue
            except _Faulted as f:
                out.append(_Candidate(dev, (), f.fault))
                continue
            tainted = bool(taints and dev.taints and not _tolerated(dev, alt.tolerations))
            if tainted and not alt.all_mode:
                continue
            use = self._capacity_use(alt, dev)
            if use is None:
                continue
            out.append(_Candidate(dev, use, tainted=tainted))
        return tuple(out)

    def warm(self, claims: Sequence[PreparedClaim], nodes: Iterable[Node | None]) -> int:
        """Evaluate the selectors of these request shapes on every device of ``nodes`` ahead of time
        (what a controller does when slices change); returns the number of candidate lists built."""
        n = 0
        for node in nodes:
            for pc in claims:
                for alts in pc.requests:
                    for a in alts:
                        self.candidates(a, node)
                        n += 1
        return n

    # ---- search ----------------------------------------------------------------------------
    def allocate(
        self,
        claims: Sequence[ResourceClaim] | Sequence[PreparedClaim],
        nodes: Sequence[Node | None],
        usage: Usage,
    ) -> AllocationOutcome:
        """Try ``nodes`` in order; the first where all claims fit wins. ``usage`` is left unchanged."""
        prepared = self._ensure_prepared(claims)
        # first fit over the same node sequence: nodes before the last fit (or all, after a miss) did
        # not fit claims of this shape at this usage epoch, and taking more cannot change that
        shape = tuple(pc.shape for pc in prepared)
        start = 0
        skip = self._skip.get(shape)
        if skip is not None and skip[0] is usage.token and skip[1] == usage.epoch and skip[2] is nodes:
            start = skip[3]
            if self.verify:  # the nodes skipped must not fit
                for node in nodes[:start]:
                    self._verify_no_fit("Allocator first-fit memo (allocate)", prepared, node, usage)
        for idx in range(start, len(nodes)):
            node = nodes[idx]
            got = self.allocate_on(prepared, node, usage, explain=False)
            if isinstance(got, tuple):
                for ca in got:
                    for p in ca.picks:
                        usage.give_back(p, backtrack=True)
                self._skip[shape] = (usage.token, usage.epoch, nodes, idx)
                return AllocationOutcome(node.name if node is not None else None, got, (), True)
            if got is not None and got.bound_hit:
                start = -1  # a node was not fully searched: do not remember the prefix
        if start >= 0:
            self._skip[shape] = (usage.token, usage.epoch, nodes, len(nodes))
        # nothing fits: now say why, node by node
        misses: list[Shortfall] = []
        for node in nodes:
            got = self.allocate_on(prepared, node, usage, explain=True)
            assert isinstance(got, Shortfall), "a node that did not fit a moment ago fits now"
            misses.append(got)
        return AllocationOutcome(None, (), tuple(misses), False)

    def known_misfit(self, shapes: tuple[int, ...], node: Node, usage: Usage) -> bool:
        """Whether ``allocate_on`` answers "does not fit" for claims of these shapes (their
        ``PreparedClaim.shape_id``, in order) on ``node`` from its failure memo alone, before any
        other check: a search may skip the node without preparing the call."""
        seen = self._fail.get((shapes, node.name))
        return seen is not None and seen == self._fail_stamp(node, usage)

    def _fail_stamp(self, node: Node | None, usage: Usage) -> tuple[object, ...]:
        """What a remembered "does not fit on this node" holds for: this usage (its token) with no
        release since that could make room there. Taking more never makes claims fit; a release
        does, but on a node that reaches only devices of pools wholly on it
        (``Inventory.node_scoped``) only a release on that node (or of a device on no node of its
        own) can, so releases elsewhere keep the memo (the allocator's failure memo, checked in
        verify mode by searching again)."""
        if self.inventory.node_scoped(node):
            assert node is not None
            return (usage.token, node.name, usage.node_epochs.get(node.name, 0), usage.loose_epoch)
        return (usage.token, usage.epoch)

    def _ensure_prepared(
        self, claims: Sequence[ResourceClaim] | Sequence[PreparedClaim]
    ) -> tuple[PreparedClaim, ...]:
        return tuple(c if isinstance(c, PreparedClaim) else self.prepare_claim(c) for c in claims)

    def allocate_on(
        self,
        claims: Sequence[PreparedClaim],
        node: Node | None,
        usage: Usage,
        *,
        explain: bool = True,
        order: DeviceOrder | None = None,
    ) -> tuple[ClaimAllocation, ...] | Shortfall | None:
        """All claims on ``node``, or why not (a Shortfall; None when ``explain`` is off, which is
        cheaper). On success the picks stay taken in ``usage``. ``order``: the candidates of each
        request tried in that order instead of inventory order (a placement score; whether the claims
        fit does not change, only which devices a fit takes)."""
        shapes = tuple(pc.shape_id for pc in claims)  # cheaper to hash than the shapes
        fail_key = (shapes, node.name if node is not None else "")
        if self.verify:
            seen = self._fail.get(fail_key)
            if seen is not None and seen == self._fail_stamp(node, usage):
                del self._fail[fail_key]  # the answer without the memo
                try:
                    self._verify_no_fit("Allocator failure memo (allocate_on)", claims, node, usage)
                finally:
                    self._fail[fail_key] = seen
        layout = self._layouts.get(shapes)
        if layout is None:
            layout = self._layouts[shapes] = _layout(claims)
        need, greedy = layout
        validate = self._validated.get(shapes)
        if validate is None:
            validate = self._validated[shapes] = any(
                a.all_mode or pc.may_exceed for pc in claims for alts in pc.requests for a in alts
            )
        if validate:
            self._validate(claims, node)
        steps = [(ci, alts) for ci, pc in enumerate(claims) for alts in pc.requests]
        single = self._pruned(fail_key, need, steps, node, usage)
        if single is None:
            return self._diagnose(claims, node, usage, bound_hit=False) if explain else None
        if (
            order is not None
            and greedy
            and not validate
            and len(steps) == 1
            and steps[0][1][0].count == 1
            and self._none_placeable(single[0], usage)
        ):
            # no device the request could take: a miss in any order, without ordering them
            if self.verify:
                self._verify_no_fit("Allocator._none_placeable (allocate_on)", claims, node, usage)
            self._fail[fail_key] = self._fail_stamp(node, usage)
            return self._diagnose(claims, node, usage, bound_hit=False) if explain else None
        search = _Search(usage=usage, node=node, steps_left=self.max_steps, order=order)
        if order is not None:
            single = [order(c, node, usage) for c in single]
        if greedy and self._greedy(steps, single, search):
            if self.verify:
                search = self._verify_greedy(claims, steps, node, search)
            return self._results(claims, node, search)
        search.cvals = [[[] for _ in pc.constraints] for pc in claims]
        try:
            ok = self._solve(claims, steps, 0, search)
        except _BoundHit:
            ok = False
            for _, _, p in reversed(search.picks):
                usage.give_back(p, backtrack=True)
            search.picks.clear()
            return self._diagnose(claims, node, usage, bound_hit=True)
        except AllocationError:
            # an error met deep in the search (a CEL runtime error on a device): what the search
            # took so far is given back, as for any attempt that does not allocate
            for _, _, p in reversed(search.picks):
                usage.give_back(p, backtrack=True)
            search.picks.clear()
            raise
        if not ok:
            self._fail[fail_key] = self._fail_stamp(node, usage)
            return self._diagnose(claims, node, usage, bound_hit=False) if explain else None
        return self._results(claims, node, search)

    def _validate(self, claims: Sequence[PreparedClaim], node: Node | None) -> None:
        """What upstream checks of every request of every claim before it searches the node
        (``Allocate`` / ``validateDeviceRequest``, allocator_incubating.go v0.36.2), claim by claim,
        request by request: an ``All`` request's devices on the node (``candidates`` raises for an
        incomplete or invalid pool the node sees; a CEL error on any of them is raised here, not when
        the search reaches it), then the claim's least number of results (per request the smallest
        over its subrequests, an ``All`` request counted with all its devices) against the limit of
        32. Depends only on the claims' shapes, the node and the inventory."""
        for pc in claims:
            least = 0
            for alts in pc.requests:
                fewest = MAX_RESULTS_PER_CLAIM + 1
                for a in alts:
                    if not a.all_mode:
                        fewest = min(fewest, a.count)
                        continue
                    cands = self.candidates(a, node)
                    for c in cands:
                        if c.error is not None:
                            # the list may have been built for another claim of the same shape:
                            # the error names the claim at hand
                            raise c.error.error(a)
                    fewest = min(fewest, len(cands))
                least += fewest
            if least > MAX_RESULTS_PER_CLAIM:
                raise AllocationError(
                    pc.ref,
                    "spec.devices.requests",
                    f"asks for at least {least} devices on node {node.name if node else '-'} (All "
                    f"requests with all their devices), more than the limit of {MAX_RESULTS_PER_CLAIM} per claim",
                )

    def _none_placeable(self, cands: tuple[_Candidate, ...], usage: Usage) -> bool:
        """Whether none of ``cands`` can be taken on its own in ``usage`` (taken, or its counters do
        not fit), so that a request for one of them (ExactCount 1, no constraints, no admin access)
        fails whatever order the search tries them in: ``_greedy`` and ``_solve`` try each of them
        once and take the first that can be taken. False whenever the search could answer
        otherwise than that: a device with a CEL error (raised when reached), one allowing multiple
        allocations (capacity), or more devices than the step bound."""
        if len(cands) > self.max_steps or not self._list_flags(cands)[1]:
            return False
        taken = usage.devices
        used = usage.counters
        total = self.inventory.counters
        # per counter what is left of it (the same for every candidate: ``usage`` does not change
        # here); ``used + a > total`` is ``a > left``, one Fraction subtraction per counter instead
        # of an addition per candidate and counter
        left: dict[CounterKey, Fraction] = {}
        for c in cands:
            dev = c.dev
            if dev.multi or c.capacity:
                return False
            if taken.get(dev.key, 0) > 0:
                continue
            for ck, a in dev.consumes:
                room = left.get(ck)
                if room is None:
                    u = used.get(ck)
                    t = total.get(ck, _NO_COUNTER)
                    room = left[ck] = t if u is None else t - u
                if a > room:
                    break
            else:
                return False
        return True

    def _verify_no_fit(
        self, memo: str, claims: Sequence[PreparedClaim], node: Node | None, usage: Usage
    ) -> None:
        """Verify mode: ``memo`` said the claims do not fit on ``node``; ``allocate_on`` must agree
        (what it takes to find out is given back as a backtrack: the usage state stays the same)."""
        try:
            got = self.allocate_on(claims, node, usage, explain=False)
        except AllocationError as e:
            raise VerifyError(memo, "no fit", f"error: {e}") from e
        if isinstance(got, tuple):
            for ca in reversed(got):
                for p in reversed(ca.picks):
                    usage.give_back(p, backtrack=True)
            raise VerifyError(
                memo,
                "no fit",
                [picks_value(ca.picks) for ca in got],
                f"node {node.name if node is not None else '-'}, claims {[pc.key for pc in claims]}",
            )

    def _verify_greedy(
        self,
        claims: Sequence[PreparedClaim],
        steps: list[tuple[int, tuple[Alternative, ...]]],
        node: Node | None,
        fast: _Search,
    ) -> _Search:
        """Verify mode: ``_solve`` from the state ``_greedy`` started from must pick what it picked
        (returns the general search, its picks taken as the greedy ones were)."""
        usage = fast.usage
        got = [(ci, pick_value(p)) for ci, _, p in fast.picks]
        for _, _, p in reversed(fast.picks):
            usage.give_back(p, backtrack=True)
        search = _Search(usage=usage, node=node, steps_left=self.max_steps, order=fast.order)
        search.cvals = [[[] for _ in pc.constraints] for pc in claims]
        try:
            ok = self._solve(claims, steps, 0, search)
        except _BoundHit:
            ok = False
        want = [(ci, pick_value(p)) for ci, _, p in search.picks] if ok else None
        if want != got:
            for _, _, p in reversed(search.picks):
                usage.give_back(p, backtrack=True)
            where = f"node {node.name if node is not None else '-'}, claims {[pc.key for pc in claims]}"
            raise VerifyError("Allocator._greedy (allocate_on)", got, want, where)
        return search

    def _pruned(
        self,
        fail_key: tuple[tuple[int, ...], str],
        need: int,
        steps: Sequence[tuple[int, tuple[Alternative, ...]]],
        node: Node | None,
        usage: Usage,
    ) -> list[tuple[_Candidate, ...]] | None:
        """``allocate_on``'s checks before any search: None when the claims (``steps``: their
        requests; ``need``: ``_layout``'s) cannot fit on the node (remembered per usage state), else
        the candidates of each step with one alternative."""
        seen = self._fail.get(fail_key)
        if seen is not None and seen == self._fail_stamp(node, usage):
            return None
        if need:
            # cheapest necessary condition, before any selector is evaluated on this node
            # (shared devices may serve every request once: no bound from counting)
            free = self.inventory.free_on(node, usage)
            if free is not None and free < need:
                self._fail[fail_key] = self._fail_stamp(node, usage)
                return None
        # early pruning: every request needs enough statically matching devices
        single: list[tuple[_Candidate, ...]] = []  # candidates of the steps with one alternative
        taken = usage.devices
        for _ci, alts in steps:
            if len(alts) != 1:
                if not any(self._statically_possible(a, node) for a in alts):
                    self._fail[fail_key] = self._fail_stamp(node, usage)
                    return None
                continue
            a = alts[0]
            cands = self.candidates(a, node)
            single.append(cands)
            if len(cands) < (1 if a.all_mode else a.count):  # ``_statically_possible``
                self._fail[fail_key] = self._fail_stamp(node, usage)
                return None
            if not a.all_mode and not a.admin_access:
                # cheap dynamic prune: enough devices not taken at all?
                free = 0
                for c in cands:
                    if c.dev.multi or not taken.get(c.dev.key, 0) > 0:
                        free += 1
                        if free >= a.count:
                            break
                if free < a.count:
                    self._fail[fail_key] = self._fail_stamp(node, usage)
                    return None
        return single

    def greedy_fill(
        self,
        claims: Sequence[PreparedClaim],
        steps: Sequence[tuple[int, tuple[Alternative, ...]]],
        node: Node,
        usage: Usage,
        limit: int,
    ) -> tuple[list[tuple[tuple[Pick, ...], ...]], bool | None]:
        """``allocate_on(claims, node, usage, explain=False)`` up to ``limit`` times in a row, for
        claims whose layout allows ``_greedy`` (``_layout``; ``steps``: their requests in order, as
        ``allocate_on`` lists them), as long as it is decided without the backtracking search and
        allocates: the picks of each allocation, per claim (``ClaimAllocation.picks``), taken in
        ``usage`` as it takes them (claim by claim); and what the next call would do: None (not
        made: ``limit`` reached), False (it returns None, no fit; remembered as it remembers it),
        True (its backtracking search would decide, or a candidate has a CEL error; nothing taken
        for it). ``claims`` may be other claims of the same shapes than ``allocate_on``'s: nothing
        that names them is kept."""
        got, after = self._greedy_fill(claims, steps, node, usage, limit)
        if self.verify:
            self._verify_fill(claims, node, usage, limit, got, after)
        return got, after

    def _verify_fill(
        self,
        claims: Sequence[PreparedClaim],
        node: Node,
        usage: Usage,
        limit: int,
        got: list[tuple[tuple[Pick, ...], ...]],
        after: bool | None,
    ) -> None:
        """Verify mode: ``allocate_on`` in a row, from the state ``greedy_fill`` started from, must
        allocate what it allocated and then do what it said the next call does (``after``); the
        usage is left as ``greedy_fill`` left it."""
        for per_claim in reversed(got):
            for picks in reversed(per_claim):
                for p in reversed(picks):
                    usage.give_back(p)
        fast = [tuple(picks_value(picks) for picks in per_claim) for per_claim in got]
        general: list[tuple[tuple[tuple[object, ...], ...], ...]] = []
        extra: list[ClaimAllocation] = []
        nxt: str = "limit"
        while len(general) < limit:
            if after is True and len(general) >= len(got):
                try:  # only the search can tell; an error it meets is ``allocate_on``'s to raise
                    one = self.allocate_on(claims, node, usage, explain=False)
                except AllocationError:
                    nxt = "search"
                    break
            else:
                one = self.allocate_on(claims, node, usage, explain=False)
            if not isinstance(one, tuple):
                nxt = "no fit"
                break
            if after is True and len(general) >= len(got):
                extra.extend(one)  # a fit found by the search: not taken by greedy_fill
                nxt = "search"
                break
            general.append(tuple(picks_value(ca.picks) for ca in one))
        for ca in reversed(extra):
            for p in reversed(ca.picks):
                usage.give_back(p)
        said = {None: "limit", False: "no fit", True: "search"}[after]
        if general != fast or (after is not True and nxt != said):
            raise VerifyError(
                "Allocator.greedy_fill",
                (fast, said),
                (general, nxt),
                f"node {node.name}, claims {[pc.key for pc in claims]}, limit {limit}",
            )

    def _greedy_fill(
        self,
        claims: Sequence[PreparedClaim],
        steps: Sequence[tuple[int, tuple[Alternative, ...]]],
        node: Node,
        usage: Usage,
        limit: int,
    ) -> tuple[list[tuple[tuple[Pick, ...], ...]], bool | None]:
        shapes = tuple(pc.shape_id for pc in claims)
        layout = self._layouts.get(shapes)
        if layout is None:
            layout = self._layouts[shapes] = _layout(claims)
        need, greedy = layout
        out: list[tuple[tuple[Pick, ...], ...]] = []
        if not greedy:
            return out, True
        fail_key = (shapes, node.name)
        n = len(claims)
        # the steps' alternatives may be another claim's of the same shape (the messages differ):
        # candidate lists with a CEL error are left to ``allocate_on`` (its search meets the error)
        if len(steps) == 1:
            ci, alts = steps[0]
            cands, clean, plain = self._list_flags(self.candidates(alts[0], node))
            if not clean:
                return out, True
            if plain:
                return self._fill_plain(fail_key, need, n, ci, alts[0], cands, node, usage, limit)
        elif any(self._clean_candidates(alts[0], node) is None for _, alts in steps):
            return out, True
        while len(out) < limit:
            single = self._pruned(fail_key, need, steps, node, usage)
            if single is None:
                return out, False
            search = _Search(usage=usage, node=node, steps_left=self.max_steps)
            if not self._greedy(steps, single, search):
                return out, True
            out.append(tuple(tuple(p for c, _, p in search.picks if c == ci) for ci in range(n)))
        return out, None

    def _fill_plain(
        self,
        fail_key: tuple[tuple[int, ...], str],
        need: int,
        n: int,
        ci: int,
        a: Alternative,
        cands: tuple[_Candidate, ...],
        node: Node,
        usage: Usage,
        limit: int,
    ) -> tuple[list[tuple[tuple[Pick, ...], ...]], bool | None]:
        """``greedy_fill`` for ``n`` claims with one request between them (claim ``ci``'s, ``a``:
        one ExactCount alternative without admin access) whose candidates on the node are plain: no
        CEL error, no multiple allocations, no shared counters, fewer than the step bound. Then
        ``_pruned`` passes exactly while ``a.count`` candidates are free (free candidates are free
        devices usable from the node, and ``need`` is ``a.count``), and ``_greedy`` takes the first
        ``a.count`` free ones in order, never backtracking: allocation after allocation takes the
        next ones, until fewer are left."""
        out: list[tuple[tuple[Pick, ...], ...]] = []
        if limit < 1:
            return out, None
        seen = self._fail.get(fail_key)
        if seen is not None and seen == self._fail_stamp(node, usage):
            return out, False
        taken = usage.devices
        request = a.request
        keys, picks = self._plain_picks_of(cands, request)
        free = [p for k, p in zip(keys, picks, strict=True) if not taken.get(k, 0) > 0]
        count = a.count
        assert need == count
        m = min(limit, len(free) // count)
        before = ((),) * ci
        after = ((),) * (n - ci - 1)
        for j in range(m):
            got = tuple(free[j * count : (j + 1) * count])
            usage.take_all(got)
            out.append((got,) if n == 1 else (*before, got, *after))
        if m < limit:
            self._fail[fail_key] = self._fail_stamp(node, usage)
            return out, False
        return out, None

    def _plain_picks_of(
        self, cands: tuple[_Candidate, ...], request: str
    ) -> tuple[tuple[DeviceKey, ...], tuple[Pick, ...]]:
        """The device keys of these plain candidates and the pick of each for ``request`` (what
        ``_greedy`` takes: no admin access, the device's counters, the candidate's capacity), made
        once per candidate list (kept by identity); verify mode checks a kept pair against one
        made afresh."""
        key = (id(cands), request)
        hit = self._plain_picks.get(key)
        if hit is not None and hit[0] is cands:
            if self.verify:
                fresh = _plain_picks(cands, request)
                if fresh != hit[1:]:
                    raise VerifyError("Allocator._plain_picks_of", hit[1:], fresh, f"request {request}")
            return hit[1], hit[2]
        if len(self._plain_picks) >= 100_000:
            self._plain_picks.clear()
        keys, picks = _plain_picks(cands, request)
        self._plain_picks[key] = (cands, keys, picks)
        return keys, picks

    def _greedy(
        self,
        steps: Sequence[tuple[int, tuple[Alternative, ...]]],
        candidates: list[tuple[_Candidate, ...]],
        s: _Search,
    ) -> bool:
        """The path ``_solve`` takes first, when it never has to backtrack: for each request in
        order, the first devices of its candidates that ``_try`` accepts. Only for layouts where
        ``_layout`` allows it (one ExactCount alternative per request, no admin access, no
        constraints; ``candidates``: each request's): there, on a device that is not ``multi`` and has no CEL error, ``_try`` checks
        only the step bound, whether the device is taken (a device picked before in the claim is
        taken) and the shared counters, as below. A depth-first search whose first path reaches a
        leaf returns that leaf, so a success here is exactly ``_solve``'s result. Returns False with
        nothing taken when the search would backtrack, exceed the step bound or meet a device this
        does not cover: the general search then decides, from the same state."""
        usage = s.usage
        taken = usage.devices
        used = usage.counters
        total = self.inventory.counters
        tries = 0
        ok = True
        for (ci, alts), cands in zip(steps, candidates, strict=True):
            alt = alts[0]
            left = alt.count
            n = len(cands)
            for j, cand in enumerate(cands):
                if n - j < left:  # ``_pick`` only tries j <= len(cands) - need
                    break
                tries += 1
                dev = cand.dev
                if tries > self.max_steps or cand.error is not None or dev.multi:
                    ok = False
                    break
                if taken.get(dev.key, 0) > 0:
                    continue
                if dev.consumes and any(used.get(ck, 0) + a > total.get(ck, 0) for ck, a in dev.consumes):
                    continue
                pick = Pick(dev, alt.request, False, dev.consumes, cand.capacity)
                usage.take(pick)
                s.picks.append((ci, alt, pick))
                left -= 1
                if not left:
                    break
            if left or not ok:
                for _, _, p in reversed(s.picks):
                    usage.give_back(p, backtrack=True)
                s.picks.clear()
                return False
        return True

    def _statically_possible(self, alt: Alternative, node: Node | None) -> bool:
        n = len(self.candidates(alt, node))
        return n >= 1 if alt.all_mode else n >= alt.count

    def _solve(
        self,
        claims: Sequence[PreparedClaim],
        steps: list[tuple[int, tuple[Alternative, ...]]],
        i: int,
        s: _Search,
    ) -> bool:
        if i == len(steps):
            return True
        ci, alts = steps[i]
        if claims[ci].may_exceed:
            return self._solve_limited(claims, steps, i, s)
        for alt in alts:  # noqa: SIM110 (a loop is cheaper than any() over a generator here)
            if self._attempt(claims, steps, i, ci, alt, s):
                return True
        return False

    def _attempt(
        self,
        claims: Sequence[PreparedClaim],
        steps: list[tuple[int, tuple[Alternative, ...]]],
        i: int,
        ci: int,
        alt: Alternative,
        s: _Search,
    ) -> bool:
        """Step ``i`` (a request of claim ``ci``) with alternative ``alt``, then the later steps."""
        cands = self.candidates(alt, s.node)
        if s.order is not None:
            cands = s.order(cands, s.node, s.usage)
        if alt.all_mode:
            # every device or none: one untolerated taint fails the request (as upstream, where
            # ``allocateDevice`` rejects the device and "all" has no other choice)
            if not cands or any(c.tainted for c in cands):
                return False
            mark = len(s.picks)
            if all(self._try(claims[ci], ci, alt, c, s) for c in cands) and self._solve(
                claims, steps, i + 1, s
            ):
                return True
            self._undo_to(claims[ci], ci, s, mark)
            return False
        if len(cands) < alt.count:
            return False
        return self._pick(claims, steps, i, ci, alt, cands, 0, alt.count, s)

    def _solve_limited(
        self,
        claims: Sequence[PreparedClaim],
        steps: list[tuple[int, tuple[Alternative, ...]]],
        i: int,
        s: _Search,
    ) -> bool:
        """``_solve`` for a step of a claim that may take more than 32 results (``may_exceed``), as
        upstream's ``allocateOne`` does it: an alternative that would take the claim over the limit
        is not tried. When every alternative of the step is over it (here or in the claim's later
        steps), no other choice of devices in the claim's earlier steps helps (the number of results
        depends on the subrequests chosen, not on the devices): ``_TooMany`` unwinds to the nearest
        step with an alternative left, and at the claim's first step it is a miss."""
        ci, alts = steps[i]
        first = i == 0 or steps[i - 1][0] != ci
        over = 0
        for alt in alts:
            n = len(self.candidates(alt, s.node)) if alt.all_mode else alt.count
            if self._claim_results(s, ci) + n > MAX_RESULTS_PER_CLAIM:
                over += 1
                continue
            mark = len(s.picks)
            try:
                if self._attempt(claims, steps, i, ci, alt, s):
                    return True
            except _TooMany:
                self._undo_to(claims[ci], ci, s, mark)  # only this claim's picks: see ``first``
                over += 1
        if over == len(alts) and not first:
            raise _TooMany()
        return False

    @staticmethod
    def _claim_results(s: _Search, ci: int) -> int:
        return sum(1 for c, _, _ in s.picks if c == ci)

    def _pick(
        self,
        claims: Sequence[PreparedClaim],
        steps: list[tuple[int, tuple[Alternative, ...]]],
        i: int,
        ci: int,
        alt: Alternative,
        cands: tuple[_Candidate, ...],
        start: int,
        need: int,
        s: _Search,
    ) -> bool:
        if need == 0:
            return self._solve(claims, steps, i + 1, s)
        pc = claims[ci]
        for j in range(start, len(cands) - need + 1):
            mark = len(s.picks)
            if not self._try(pc, ci, alt, cands[j], s):
                continue
            if self._pick(claims, steps, i, ci, alt, cands, j + 1, need - 1, s):
                return True
            self._undo_to(pc, ci, s, mark)
        return False

    def _try(self, pc: PreparedClaim, ci: int, alt: Alternative, cand: _Candidate, s: _Search) -> bool:
        """Check one device against what is taken and the constraints; take it if it fits."""
        s.steps_left -= 1
        if s.steps_left < 0:
            raise _BoundHit()
        if cand.error is not None:
            raise cand.error.error(alt)
        dev = cand.dev
        key = dev.key
        usage = s.usage
        if not dev.multi:
            if s.in_claim.get((ci, key)):
                return False
            if not alt.admin_access and usage.is_taken(key):
                return False
        elif any(p.device.key == key and a is alt for _, a, p in s.picks):
            return False
        if not alt.admin_access:
            total = self.inventory.counters
            for ck, amount in dev.consumes:
                if usage.counters.get(ck, 0) + amount > total.get(ck, 0):
                    return False
            for qn, amount in cand.capacity:
                if usage.capacity.get((key, qn), 0) + amount > dev.capacity[qn][1].value.value:
                    return False
        cvals = s.cvals[ci]
        for k, con in enumerate(pc.constraints):
            if not con.applies(alt):
                continue
            v = dev.attributes.get(con.attribute)
            if v is None:
                return False
            seen = cvals[k]
            if con.distinct:
                if v in seen:
                    return False
            elif seen and seen[0] != v:
                return False
        for k, con in enumerate(pc.constraints):
            if con.applies(alt):
                cvals[k].append(dev.attributes[con.attribute])
        pick = Pick(
            dev, alt.request, alt.admin_access, () if alt.admin_access else dev.consumes, cand.capacity
        )
        usage.take(pick)
        s.in_claim[(ci, key)] = s.in_claim.get((ci, key), 0) + 1
        s.picks.append((ci, alt, pick))
        return True

    def _undo_to(self, pc: PreparedClaim, ci: int, s: _Search, mark: int) -> None:
        while len(s.picks) > mark:
            _, alt, pick = s.picks.pop()
            s.usage.give_back(pick, backtrack=True)
            ik = (ci, pick.device.key)
            n = s.in_claim[ik] - 1
            if n:
                s.in_claim[ik] = n
            else:
                del s.in_claim[ik]
            for k, con in enumerate(pc.constraints):
                if con.applies(alt):
                    s.cvals[ci][k].pop()

    # ---- results ---------------------------------------------------------------------------
    def _results(
        self, claims: Sequence[PreparedClaim], node: Node | None, s: _Search
    ) -> tuple[ClaimAllocation, ...]:
        out = []
        node_name = node.name if node is not None else ""
        for ci, pc in enumerate(claims):
            picks = [(alt, p) for c, alt, p in s.picks if c == ci]
            # the allocation result is a value that depends only on the requests, classes and devices
            # picked (and the node): shared between claims of the same shape on the same devices
            rkey: tuple[object, ...] | None = None
            if not pc.claim.spec.devices.config and all(
                not alt.tolerations
                and not p.device.multi
                and not (self.features.binding_conditions and p.device.device.binding_conditions)
                for alt, p in picks
            ):
                rkey = (
                    node_name,
                    tuple((alt.request, alt.admin_access, alt.class_name, p.device.key) for alt, p in picks),
                )
                hit = self._result_cache.get(rkey)
                if hit is not None:
                    out.append(ClaimAllocation(pc.claim, hit, tuple(p for _, p in picks)))
                    continue
            results = []
            for n, (alt, p) in enumerate(picks):
                d = p.device
                r = self._device_result(alt.request, d)
                if alt.admin_access:
                    r.admin_access = True
                if alt.tolerations:
                    r.tolerations = list(alt.tolerations)
                if d.multi:
                    r.share_id = str(
                        uuid.uuid5(_SHARE_NAMESPACE, f"{pc.claim.key}/{alt.request}/{n}/{'/'.join(d.key)}")
                    )
                    r.consumed_capacity = {
                        d.capacity[qn][0]: Quantity.from_value(amount, d.capacity[qn][1].value.format)
                        for qn, amount in p.capacity
                    }
                results.append(r)
            config: list[DeviceAllocationConfiguration] = []
            seen_requests: set[str] = set()
            for alt, _ in picks:
                if alt.request in seen_requests:
                    continue
                seen_requests.add(alt.request)
                for cc in alt.device_class.spec.config or []:
                    config.append(
                        DeviceAllocationConfiguration(
                            source="FromClass", requests=[alt.request], opaque=cc.opaque
                        )
                    )
            for cl in pc.claim.spec.devices.config or []:
                item = DeviceAllocationConfiguration(source="FromClaim", opaque=cl.opaque)
                if cl.requests:
                    item.requests = list(cl.requests)
                config.append(item)
            devices = DeviceAllocationResult(results=results)
            if config:
                devices.config = config
            alloc = AllocationResult(devices=devices)
            sel = _node_selector([p for _, p in picks], node)
            if sel is not None:
                alloc.node_selector = sel
            if rkey is not None:
                # kept from the second time on: results that never repeat would only load the
                # garbage collector (every kept result is a handful of long-lived objects)
                if rkey in self._result_seen:
                    if len(self._result_cache) >= 50_000:
                        self._result_cache.clear()
                    self._result_cache[rkey] = alloc
                else:
                    if len(self._result_seen) >= 200_000:
                        self._result_seen.clear()
                    self._result_seen.add(rkey)
            out.append(ClaimAllocation(pc.claim, alloc, tuple(p for _, p in picks)))
        return tuple(out)

    def _device_result(self, request: str, d: InventoryDevice) -> DeviceRequestAllocationResult:
        """The result for a device picked for a request (admin access, tolerations and what a device
        with multiple allocations records are added by ``_results``)."""
        r = DeviceRequestAllocationResult(request=request, driver=d.key[0], pool=d.key[1], device=d.key[2])
        if self.features.binding_conditions and d.device.binding_conditions:
            r.binding_conditions = list(d.device.binding_conditions)
            r.binding_failure_conditions = list(d.device.binding_failure_conditions or [])
        return r

    def plain_results(self, picks: Sequence[Pick]) -> tuple[DeviceRequestAllocationResult, ...]:
        """``status.allocation.devices.results`` of a claim ``allocate_on`` allocated with these
        picks (in order), when its requests had no admin access and no tolerations and no device
        allows multiple allocations (as for ``greedy_fill``'s picks of such requests)."""
        out = []
        for p in picks:
            if p.admin_access or p.device.multi:
                raise ValueError(f"not a plain pick: {p.request} on {'/'.join(p.device.key)}")
            out.append(self._device_result(p.request, p.device))
        return tuple(out)

    # ---- explanations ----------------------------------------------------------------------
    def devices_in_class(self, class_name: str, node: Node | None) -> int:
        """How many devices usable from ``node`` (of valid pools) the DeviceClass selects (0 for an
        unknown class or a selector that fails to compile; devices whose evaluation fails do not
        count). Counted once per class and node: the inventory and the classes are fixed for the
        allocator's life (as for its candidate lists), and every miss's explanation asks (in verify
        mode counted again and compared)."""
        key = (class_name, node.name if node is not None else "")
        hit = self._in_class.get(key)
        if hit is not None and not self.verify:
            return hit
        n = self._count_in_class(class_name, node)
        if hit is not None and hit != n:
            raise VerifyError(
                "Allocator.devices_in_class (memo)", hit, n, f"DeviceClass {class_name}, node {key[1]}"
            )
        self._in_class[key] = n
        return n

    def _count_in_class(self, class_name: str, node: Node | None) -> int:
        try:
            _, sels = self._class(class_name, f"DeviceClass {class_name}", "")
        except AllocationError:
            return 0
        n = 0
        for d in self.inventory.devices_on(node):
            try:
                if d.pool_ok and all(self.cache.matches(s, d) for s in sels):
                    n += 1
            except AllocationError:
                continue
        return n

    def _diagnose(
        self, claims: Sequence[PreparedClaim], node: Node | None, usage: Usage, *, bound_hit: bool
    ) -> Shortfall:
        node_name = node.name if node is not None else None
        if bound_hit:
            pc = claims[0]
            return Shortfall(
                node_name,
                pc.key,
                "*",
                0,
                0,
                f"search stopped after {self.max_steps} device checks (work bound hit) without a fit",
                bound_hit=True,
            )
        for pc in claims:
            for alts in pc.requests:
                best: Shortfall | None = None
                for alt in alts:
                    sf = self._diagnose_alt(pc, alt, node, usage)
                    if sf is None:
                        best = None
                        break
                    if best is None or sf.short_by < best.short_by:
                        best = sf
                if best is not None:
                    return best
        names = ", ".join(pc.key for pc in claims)
        cons = [c for pc in claims for c in pc.constraints]
        if cons:
            desc = "; ".join(
                f"{'distinctAttribute' if c.distinct else 'matchAttribute'} {c.attribute}" for c in cons
            )
            detail = f"enough devices are free, but no combination satisfies the constraints ({desc})"
        else:
            detail = "enough devices are free one by one, but not together (shared counters or capacity)"
        first = claims[0] if claims else None
        return Shortfall(node_name, first.key if first else names, "*", 0, 0, detail)

    def _diagnose_alt(
        self, pc: PreparedClaim, alt: Alternative, node: Node | None, usage: Usage
    ) -> Shortfall | None:
        """A Shortfall if the request alone cannot be met on the node, else None."""
        node_name = node.name if node is not None else None
        cands = self.candidates(alt, node)
        free = 0
        blocked_counters = 0
        tainted = 0
        for c in cands:
            d = c.dev
            if c.error is not None:
                continue
            if c.tainted:
                tainted += 1
                continue
            if not d.multi and not alt.admin_access and usage.is_taken(d.key):
                continue
            if not alt.admin_access:
                if any(
                    usage.counters.get(ck, 0) + a > self.inventory.counters.get(ck, 0) for ck, a in d.consumes
                ):
                    blocked_counters += 1
                    continue
                if any(
                    usage.capacity.get((d.key, qn), 0) + a > d.capacity[qn][1].value.value
                    for qn, a in c.capacity
                ):
                    blocked_counters += 1
                    continue
            free += 1
        need = max(1, len(cands)) if alt.all_mode else alt.count
        if alt.all_mode and len(cands) > MAX_RESULTS_PER_CLAIM:
            return Shortfall(
                node_name,
                pc.key,
                alt.request,
                need,
                free,
                f"All selects {len(cands)} devices of class {alt.class_name}, more than the limit of "
                f"{MAX_RESULTS_PER_CLAIM} results per claim",
            )
        if alt.all_mode and cands and free == len(cands):
            return None
        if not alt.all_mode and free >= need:
            return None
        in_class = self.devices_in_class(alt.class_name, node)
        parts = [
            f"{need} device{'s' if need != 1 else ''} of class {alt.class_name} needed"
            + (" (All)" if alt.all_mode else ""),
            f"{free} available",
            f"{in_class} in the class on this node",
            f"{len(cands)} match the request's selectors"
            + (" and capacity" if alt.all_mode else ", tolerations and capacity"),
        ]
        taken = len(cands) - free - blocked_counters - tainted
        if taken:
            parts.append(f"{taken} already allocated")
        if tainted:
            parts.append(f"{tainted} with a NoSchedule/NoExecute taint the request does not tolerate")
        if blocked_counters:
            parts.append(f"{blocked_counters} blocked by shared counters or consumed capacity")
        return Shortfall(
            node_name, pc.key, alt.request, need, free, ", ".join(parts), False, alt.class_name, in_class
        )


def _plain_picks(
    cands: tuple[_Candidate, ...], request: str
) -> tuple[tuple[DeviceKey, ...], tuple[Pick, ...]]:
    """The candidates' device keys and the pick ``_greedy`` takes of each for ``request``."""
    return (
        tuple(c.dev.key for c in cands),
        tuple(Pick(c.dev, request, False, c.dev.consumes, c.capacity) for c in cands),
    )


def _layout(claims: Sequence[PreparedClaim]) -> tuple[int, bool]:
    """What ``allocate_on`` derives from the claims' shapes: the devices the ExactCount requests
    without admin access need at least, and whether ``Allocator._greedy`` may be tried (every request
    has one ExactCount alternative without admin access and no claim has constraints)."""
    need = 0
    greedy = True
    for pc in claims:
        if pc.constraints:
            greedy = False
        for alts in pc.requests:
            if not any(a.all_mode or a.admin_access for a in alts):
                need += min(a.count for a in alts)
            if len(alts) != 1 or alts[0].all_mode or alts[0].admin_access:
                greedy = False
    return need, greedy


def _node_selector(picks: Sequence[Pick], node: Node | None) -> NodeSelector | None:
    """``status.allocation.nodeSelector``: node-local → that node; network-attached → the selectors."""
    exprs: list[NodeSelectorRequirement] = []
    fields: list[NodeSelectorRequirement] = []
    selectors: list[NodeSelector] = []
    for p in picks:
        d = p.device
        if d.node_name or (d.binds_to_node and node is not None):
            name = d.node_name or (node.name if node is not None else "")
            return NodeSelector(
                node_selector_terms=[
                    NodeSelectorTerm(
                        match_fields=[
                            NodeSelectorRequirement(key="metadata.name", operator="In", values=[name])
                        ]
                    )
                ]
            )
        if d.node_selector is not None and d.node_selector.node_selector_terms:
            if d.node_selector not in selectors:
                selectors.append(d.node_selector)
            term = d.node_selector.node_selector_terms[0]
            for r in term.match_expressions or []:
                if r not in exprs:
                    exprs.append(r)
            for r in term.match_fields or []:
                if r not in fields:
                    fields.append(r)
    if len(selectors) == 1:
        return selectors[0].model_copy(deep=True)
    if not exprs and not fields:
        return None
    term = NodeSelectorTerm()
    if exprs:
        term.match_expressions = exprs
    if fields:
        term.match_fields = fields
    return NodeSelector(node_selector_terms=[term])
