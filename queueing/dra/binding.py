"""May a plan be bound by pinning the node alone? (``planBindingMode: Auto``)

Binding a plan *node only* pins the planned node in the pod and leaves the devices to kube-scheduler's
DRA plugin: 2 API writes fewer per pod than writing every claim's ``status.allocation`` (``Full``). The
devices kube-scheduler picks are the plan's only when the upstream allocator, which
:mod:`queueing.dra.allocator` reproduces, picks exactly them on the planned node. When kube-scheduler
allocates, it sees the claims allocated in the cluster, not the controller's plans that are not bound
yet, so that is what :class:`UpstreamView` shows the allocator.

Seeing fewer devices taken than that is safe: the allocator searches devices in a fixed order and
returns the first fit, and taking more devices that the plan does not use (the controller's other
plans, all of them disjoint from this one and admitted together with it) only removes candidates the
search tried and rejected before it reached the plan's devices. So the pick stays the plan's until
a device is *released* in between; the controller checks the allocation kube-scheduler made and
records it when it differs.

:func:`choose_binding` decides per admission: node only for a workload of exactly one pod whose
claims all come from templates and whose planned devices are exactly what the allocator picks;
``Full`` otherwise (gangs of several pods, shared claims, implicit claims for extended resources,
or different picks), with the reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol

from queueing.api.core import Node
from queueing.api.quantity import Quantity
from queueing.api.resource import (
    DeviceClass,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)
from queueing.api.v1beta1 import Admission, PodSetResourceClaim
from queueing.dra.allocator import ClaimAllocation, SelectorCache
from queueing.dra.errors import AllocationError
from queueing.dra.features import Features
from queueing.dra.gang import ClusterState

__all__ = [
    "BindingDecision",
    "DeviceResult",
    "UpstreamView",
    "choose_binding",
    "claim_from_template",
    "describe_devices",
    "device_results",
]


class DeviceResult(Protocol):
    """A device of an allocation: ``AllocatedDevice`` (a plan) or ``DeviceRequestAllocationResult``."""

    @property
    def request(self) -> str: ...
    @property
    def driver(self) -> str: ...
    @property
    def pool(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def admin_access(self) -> bool | None: ...
    @property
    def consumed_capacity(self) -> Mapping[str, Quantity] | None: ...


_Key = tuple[str, str, str, str, bool, tuple[tuple[str, Fraction], ...]]


def device_results(devices: Iterable[DeviceResult]) -> tuple[_Key, ...]:
    """What identifies an allocation's devices, in a canonical order: request, device, admin access and
    consumed capacity per result. The share ID of a device with consumable capacity is not part of it
    (kube-scheduler makes up its own)."""
    out: list[_Key] = []
    for d in devices:
        cap = tuple(sorted((k, q.value) for k, q in (d.consumed_capacity or {}).items()))
        out.append((d.request, d.driver, d.pool, d.device, bool(d.admin_access), cap))
    return tuple(sorted(out))


def describe_devices(devices: Iterable[DeviceResult]) -> str:
    """``gpu-0, gpu-1`` (``pool/device`` when the devices come from several pools)."""
    keys = device_results(devices)
    if not keys:
        return "no devices"
    pools = {(k[1], k[2]) for k in keys}
    return ", ".join(k[3] if len(pools) == 1 else f"{k[2]}/{k[3]}" for k in keys)


def claim_from_template(template: ResourceClaimTemplate, name: str) -> ResourceClaim:
    """The ResourceClaim the resourceclaim controller creates from a template (named ``name``)."""
    return ResourceClaim.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": template.namespace or "default"},
            "spec": template.spec.spec.to_dict(),
        }
    )


@dataclass(frozen=True)
class BindingDecision:
    node_only: bool
    reason: str


class UpstreamView:
    """What kube-scheduler's DRA plugin sees when it allocates a pod's claims: the nodes, the devices
    published in ResourceSlices, the DeviceClasses and the claims allocated in the cluster. Built once
    for any number of questions; each question leaves it as it was."""

    def __init__(
        self,
        nodes: Iterable[Node],
        slices: Iterable[ResourceSlice],
        classes: Iterable[DeviceClass],
        claims: Iterable[ResourceClaim],
        templates: Iterable[ResourceClaimTemplate] = (),
        *,
        features: Features | None = None,
        cache: SelectorCache | None = None,
    ) -> None:
        self.nodes = {n.name: n for n in nodes}
        self.slices = tuple(slices)
        self.classes = tuple(classes)
        # the allocated claims by the pools of their devices
        self._by_pool: dict[tuple[str, str], list[ResourceClaim]] = {}
        for c in claims:
            alloc = c.status.allocation
            if alloc is None or alloc.devices is None:
                continue
            for pool in {(r.driver, r.pool) for r in alloc.devices.results or []}:
                self._by_pool.setdefault(pool, []).append(c)
        self.templates = {t.key: t for t in templates}
        self.features = features
        self.cache = cache if cache is not None else SelectorCache()
        self._states: dict[str, ClusterState] = {}

    def _state(self, node: str) -> ClusterState | None:
        st = self._states.get(node)
        if st is None and node in self.nodes:
            # the devices a pod on this node may get: its own slices and those not local to one node
            # (relative device order is kept: the inventory orders pools by name)
            slices = [s for s in self.slices if s.spec.node_name in (None, node)]
            # and the claims holding devices of those pools (the others' devices are not candidates)
            pools = sorted({(s.spec.driver, s.spec.pool.name) for s in slices})
            claims = list({id(c): c for p in pools for c in self._by_pool.get(p, ())}.values())
            st = ClusterState(
                [self.nodes[node]],
                slices,
                self.classes,
                claims=claims,
                features=self.features,
                cache=self.cache,
            )
            self._states[node] = st
        return st

    def allocate(self, node: str, claims: Sequence[ResourceClaim]) -> tuple[ClaimAllocation, ...] | str:
        """The upstream allocator's result for a pod's unallocated ``claims`` (in the pod's order) on
        ``node``, or why they do not fit. Raises ``AllocationError`` on input errors."""
        st = self._state(node)
        if st is None:
            return f"node {node} does not exist"
        prepared = [st.allocator.prepare_claim(c) for c in claims]
        got = st.allocator.allocate_on(prepared, st.nodes[0], st.usage, explain=True)
        if isinstance(got, tuple):
            for ca in got:
                for p in ca.picks:
                    st.usage.give_back(p, backtrack=True)
            return got
        return str(got) if got is not None else f"the claims do not fit on node {node}"


def choose_binding(
    admission: Admission,
    claims_of: Mapping[str, Sequence[PodSetResourceClaim]],
    namespace: str,
    view: UpstreamView,
) -> BindingDecision:
    """Node only, or ``Full`` (the reason says why). ``claims_of``: per pod set, the claims of its pods
    in pod-spec order (``PodSet.claim_refs()``)."""
    placed = [(a.name, p) for a in admission.pod_set_assignments for p in a.placements or []]
    if len(placed) != 1:
        return BindingDecision(
            False, f"{len(placed)} pods planned: each pod's claims get the planned devices"
        )
    pod_set, placement = placed[0]
    node = placement.node_name
    refs = list(claims_of.get(pod_set, ()))
    shared = [r.name for r in refs if r.resource_claim_name]
    if shared:
        return BindingDecision(False, f"shared ResourceClaim(s) {', '.join(shared)}: allocated as planned")
    planned = {c.name: c for c in placement.claims or []}
    others = sorted(set(planned) - {r.name for r in refs})
    if others:
        return BindingDecision(
            False, f"claim(s) {', '.join(others)} are not the pod's own (extended resources served by DRA)"
        )
    if not refs:
        return BindingDecision(True, f"no claims: node {node} pinned")
    claims: list[ResourceClaim] = []
    for r in refs:
        t = view.templates.get(f"{namespace}/{r.resource_claim_template_name}")
        if t is None:
            return BindingDecision(
                False, f"ResourceClaimTemplate {namespace}/{r.resource_claim_template_name} not found"
            )
        claims.append(claim_from_template(t, f"{pod_set}-{r.name}"))
    try:
        got = view.allocate(node, claims)
    except AllocationError as e:
        return BindingDecision(False, f"kube-scheduler's allocator fails: {e}")
    if isinstance(got, str):
        return BindingDecision(False, f"kube-scheduler's allocator finds no fit: {got}")
    for r, ca in zip(refs, got, strict=True):
        want = planned[r.name].devices if r.name in planned else []
        results = (ca.allocation.devices.results or []) if ca.allocation.devices else []
        if device_results(want) != device_results(results):
            return BindingDecision(
                False,
                f"kube-scheduler would pick {describe_devices(results)} on node {node} for claim {r.name}, "
                f"the plan has {describe_devices(want)}",
            )
    return BindingDecision(True, f"kube-scheduler picks the planned devices on node {node}")
