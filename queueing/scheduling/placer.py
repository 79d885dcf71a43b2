"""The bridge between scheduling and device placement.

The scheduling cycle asks a :class:`Placer` whether a workload's pods (a gang: all or nothing) can
be placed on the cluster as it would be with everything admitted or planned so far, and how much
DRA quota the plan consumes. The real implementation wraps the DRA gang allocator
(``queueing.dra``); :class:`CountingPlacer` is a small, exact stand-in that counts GPUs per node.

Placement states are values: ``add``/``remove`` return new states and never change their input,
so the cycle and the eviction planner can try alternatives freely. ``add`` must accept a placement
that overlaps what is already in the state (the cycle reserves the resources of a preemptor while
its victims still hold them); overlapping simply means "not free".

Device charges (``Placement.device_charges``) use resource names the ClusterQueues can cover:
a DeviceClass name counts the planned devices of that class, ``<class>/<capacity>`` sums the named
capacity of the planned devices.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Protocol, TypeVar

from queueing.scheduling.reasons import Why
from queueing.scheduling.snapshot import AdmittedWorkload, FlavorSpec, PodSetInfo, Taint, WorkloadInfo

__all__ = [
    "CountingNode",
    "CountingPlacer",
    "CountingRequest",
    "CountingState",
    "Placement",
    "PlacementFailure",
    "Placer",
]

S = TypeVar("S")


@dataclass(frozen=True)
class Placement:
    """A successful gang placement."""

    nodes: tuple[str, ...]  # one entry per pod, pod sets in order
    device_charges: Mapping[str, Fraction] = field(default_factory=dict)
    detail: object = None  # the placer's own plan (devices per claim, ...)


@dataclass(frozen=True)
class PlacementFailure:
    """Why the gang cannot be placed (best node, how short, which claim). When the text names
    the workload's own pods or claims, ``why`` has it as data (``queueing.scheduling.reasons``) and
    ``message`` is its rendering for no workload in particular."""

    message: str
    why: Why | None = None


class Placer(Protocol[S]):
    def initial_state(self, admitted: Sequence[AdmittedWorkload]) -> S:
        """The cluster with the given workloads' placements in use."""
        ...

    def place(
        self,
        workload: WorkloadInfo,
        counts: Mapping[str, int],
        flavors: Mapping[str, Sequence[FlavorSpec]],
        state: S,
    ) -> Placement | PlacementFailure:
        """Place ``counts[pod set]`` pods of each pod set, all or nothing, on nodes matching every
        flavor assigned to that pod set."""
        ...

    def add(self, state: S, key: str, placement: Placement) -> S: ...

    def remove(self, state: S, key: str) -> S: ...


# ---------------------------------------------------------------------------------------------
# CountingPlacer: nodes with N identical GPUs; a pod takes k GPUs on one node.


@dataclass(frozen=True)
class CountingNode:
    name: str
    gpus: int
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    # per-GPU capacities (e.g. {"memory": 141 Gi}); charged as "<device_class>/<name>"
    capacity: Mapping[str, Fraction] = field(default_factory=dict)


@dataclass(frozen=True)
class CountingRequest:
    """GPUs per pod, per pod set name (pod sets not listed need none)."""

    gpus_per_pod: Mapping[str, int]


@dataclass(frozen=True)
class CountingState:
    used: Mapping[str, int]  # node -> GPUs in use (may exceed capacity with reservations)
    by_key: Mapping[str, tuple[tuple[str, int], ...]]  # workload key -> (node, gpus) per pod
    gone: frozenset[str] = frozenset()  # keys in by_key that were removed (saves copying by_key)

    def detail(self, key: str) -> tuple[tuple[str, int], ...] | None:
        return None if key in self.gone else self.by_key.get(key)


class CountingPlacer:
    """Exact for one pod size per node search: best fit (fullest node that still fits) per pod,
    largest pods first. Pods of a pod set only go to nodes matching every assigned flavor's
    node labels and the pod set's node selector, and tolerating the node's taints."""

    def __init__(self, nodes: Sequence[CountingNode], device_class: str = "gpu"):
        self.nodes = {n.name: n for n in nodes}
        self.order = sorted(self.nodes)
        self.index = {n: i for i, n in enumerate(self.order)}
        self.device_class = device_class
        # eligibility per (pod set constraints, flavors): a cache of a pure function
        self._eligible_cache: dict[tuple[object, ...], list[str]] = {}

    def initial_state(self, admitted: Sequence[AdmittedWorkload]) -> CountingState:
        state = CountingState({}, {})
        for a in admitted:
            if isinstance(a.placement, Placement):
                state = self.add(state, a.key, a.placement)
        return state

    def free(self, state: CountingState, node: str) -> int:
        return max(0, self.nodes[node].gpus - state.used.get(node, 0))

    def place(
        self,
        workload: WorkloadInfo,
        counts: Mapping[str, int],
        flavors: Mapping[str, Sequence[FlavorSpec]],
        state: CountingState,
    ) -> Placement | PlacementFailure:
        req = workload.placement_request
        per_pod = req.gpus_per_pod if isinstance(req, CountingRequest) else {}
        pods: list[tuple[int, int, str]] = []  # (gpus, pod set index, pod set name)
        eligible: dict[str, list[str]] = {}
        for i, ps in enumerate(workload.pod_sets):
            g = per_pod.get(ps.name, 0)
            fl = flavors.get(ps.name, ())
            ck = (
                tuple(sorted(ps.node_selector.items())),
                ps.tolerations,
                tuple((f.name, tuple(sorted(f.node_labels.items())), f.tolerations) for f in fl),
            )
            el = self._eligible_cache.get(ck)
            if el is None:
                el = [n for n in self.order if self._eligible(self.nodes[n], ps, fl)]
                self._eligible_cache[ck] = el
            eligible[ps.name] = el
            pods.extend((g, i, ps.name) for _ in range(counts.get(ps.name, ps.count)))
        used = state.used
        free = {n: max(0, self.nodes[n].gpus - used.get(n, 0)) for ps in eligible.values() for n in ps}
        # largest first, stable by pod set order
        order = sorted(range(len(pods)), key=lambda j: (-pods[j][0], pods[j][1], j))
        assigned: list[tuple[str, int]] = [("", 0)] * len(pods)
        for j in order:
            g, _, ps_name = pods[j]
            cands = [n for n in eligible[ps_name] if free[n] >= g]
            if not cands:
                return PlacementFailure(self._explain(workload, ps_name, g, counts, eligible[ps_name], state))
            best = min(cands, key=lambda n: (free[n], self.index[n]))
            free[best] -= g
            assigned[j] = (best, g)
        charges: dict[str, Fraction] = {}
        total = sum(g for _, g in assigned)
        if total:
            charges[self.device_class] = Fraction(total)
        for node, g in assigned:
            for cap, v in self.nodes[node].capacity.items():
                k = f"{self.device_class}/{cap}"
                charges[k] = charges.get(k, Fraction(0)) + v * g
        return Placement(nodes=tuple(n for n, _ in assigned), device_charges=charges, detail=tuple(assigned))

    def _explain(
        self,
        workload: WorkloadInfo,
        ps_name: str,
        g: int,
        counts: Mapping[str, int],
        eligible: Sequence[str],
        state: CountingState,
    ) -> str:
        n_pods = next(counts.get(p.name, p.count) for p in workload.pod_sets if p.name == ps_name)
        if not eligible:
            return f"pod set {ps_name}: no node matches the flavor, node selector and taints"
        initial = {n: self.free(state, n) for n in eligible}
        fit = sum(initial[n] // g for n in eligible) if g else n_pods
        best = max(eligible, key=lambda n: (initial[n], -self.index[n]))
        return (
            f"pod set {ps_name}: {n_pods} pods x {g} {self.device_class} needed, {min(fit, n_pods)} fit; "
            f"best node {best} has {initial[best]} free ({max(0, g - initial[best])} short)"
        )

    @staticmethod
    def _eligible(node: CountingNode, ps: PodSetInfo, flavors: Sequence[FlavorSpec]) -> bool:
        for f in flavors:
            if any(node.labels.get(k) != v for k, v in f.node_labels.items()):
                return False
        if any(node.labels.get(k) != v for k, v in ps.node_selector.items()):
            return False
        for t in node.taints:
            if t.effect == "PreferNoSchedule":
                continue
            if not any(tol.tolerates(t) for tol in ps.tolerations) and not any(
                tol.tolerates(t) for f in flavors for tol in f.tolerations
            ):
                return False
        return True

    def add(self, state: CountingState, key: str, placement: Placement) -> CountingState:
        detail = placement.detail
        if not isinstance(detail, tuple):
            return state
        used = dict(state.used)
        for node, g in detail:
            used[node] = used.get(node, 0) + g
        by_key = dict(state.by_key)
        by_key[key] = (state.detail(key) or ()) + detail
        return CountingState(used, by_key, state.gone - {key})

    def remove(self, state: CountingState, key: str) -> CountingState:
        detail = state.detail(key)
        if detail is None:
            return state
        used = dict(state.used)
        for node, g in detail:
            used[node] -= g
        return CountingState(used, state.by_key, state.gone | {key})
