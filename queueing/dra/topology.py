"""Topology-aware gang placement (Kueue's TAS semantics, with DRA claims checked per pod as always).

A ``Topology`` is an ordered list of levels, from the widest (a block, a rack) to the narrowest (a
node: ``kubernetes.io/hostname``). A level is a node label, or a device attribute shared across
nodes (an NVLink clique, a ComputeDomain): a node belongs to the domain named by the attribute's
value on its devices (the first device that has it, in inventory order). A domain of level k is
the nodes with equal values on levels 0..k (Kueue's domain path); a node without a value there is
in no domain of that level.

``place_in_topology(pods, state, levels, level, mode, policy)``:

* ``required``: the whole gang inside one domain of ``level``, or not placed. Domains are tried
  fullest first under ``LeastFragmentation`` (fewest free GPU units: Kueue's BestFit), in the
  order of their first node under ``FirstFit``; inside a domain the policy's order.
* ``preferred``: one domain if any holds the gang (as ``required``); else the whole cluster, nodes
  ordered by domain, the domain with the most free GPU units first, so the gang spans as few
  domains as that greedy order reaches.

The node-check bound (``max_node_checks``) covers all domains together; an explanation says when it
stopped the search. Feasibility inside each domain is ``place_gang``'s (exact).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from queueing.api.core import Pod
from queueing.dra.explain import Part
from queueing.dra.gang import DEFAULT_MAX_NODE_CHECKS, ClusterState, GangExplanation, GangResult, place_gang
from queueing.dra.scoring import FIRST_FIT, LEAST_FRAGMENTATION, PlacementPolicy, Scorer, place_scored

__all__ = [
    "PREFERRED",
    "REQUIRED",
    "Level",
    "TopologyMode",
    "domain_of",
    "domains",
    "place_in_topology",
]

# pod-set annotations (on the pod template), as Kueue's ``kueue.x-k8s.io/podset-*-topology``
REQUIRED_ANNOTATION = "queueing.dra.io/podset-required-topology"
PREFERRED_ANNOTATION = "queueing.dra.io/podset-preferred-topology"
SLICE_REQUIRED_ANNOTATION = "queueing.dra.io/podset-slice-required-topology"
SLICE_SIZE_ANNOTATION = "queueing.dra.io/podset-slice-size"
ANNOTATIONS = (REQUIRED_ANNOTATION, PREFERRED_ANNOTATION, SLICE_REQUIRED_ANNOTATION, SLICE_SIZE_ANNOTATION)

TopologyMode = Literal["required", "preferred"]
REQUIRED: TopologyMode = "required"
PREFERRED: TopologyMode = "preferred"


@dataclass(frozen=True, slots=True)
class Level:
    """One level of a Topology: a node label or a device attribute (fully qualified name)."""

    key: str
    device_attribute: bool = False


def _value(state: ClusterState, i: int, level: Level) -> str | None:
    node = state.nodes[i]
    if not level.device_attribute:
        return (node.labels or {}).get(level.key)
    for d in state.inventory.devices_on(node):
        v = d.attributes.get(level.key)
        if v is not None:
            return str(v[1])
    return None


def domain_of(state: ClusterState, i: int, levels: Sequence[Level], level: int) -> tuple[str, ...] | None:
    """Node i's domain at ``level`` (its values on levels 0..level), or None."""
    path = []
    for lv in levels[: level + 1]:
        v = _value(state, i, lv)
        if v is None:
            return None
        path.append(v)
    return tuple(path)


def domains(
    state: ClusterState, levels: Sequence[Level], level: int
) -> dict[tuple[str, ...], tuple[int, ...]]:
    """The domains of ``level``: path -> node indexes (cluster order), by first node."""
    out: dict[tuple[str, ...], list[int]] = {}
    for i in range(len(state.nodes)):
        d = domain_of(state, i, levels, level)
        if d is not None:
            out.setdefault(d, []).append(i)
    return {k: tuple(v) for k, v in out.items()}


@dataclass(frozen=True, slots=True)
class TopologyOutcome:
    result: GangResult
    domain: tuple[str, ...] | None  # the one domain the gang is in, or None
    domains_used: int  # domains of the level the placed gang spans
    domains_tried: int


def place_in_topology(
    pods: Sequence[Pod],
    state: ClusterState,
    levels: Sequence[Level],
    level: int,
    mode: TopologyMode,
    policy: PlacementPolicy = FIRST_FIT,
    *,
    scorer: Scorer | None = None,
    max_node_checks: int = DEFAULT_MAX_NODE_CHECKS,
) -> TopologyOutcome:
    sc = scorer if scorer is not None else Scorer(state)
    doms = domains(state, levels, level)
    usage = state.usage

    def free(nodes: tuple[int, ...]) -> float:
        return sum(sc.free_units(i, usage) for i in nodes)

    if policy == LEAST_FRAGMENTATION:
        ordered = sorted(doms.items(), key=lambda kv: (free(kv[1]), kv[1][0]))
    else:
        ordered = sorted(doms.items(), key=lambda kv: kv[1][0])
    left = max_node_checks
    tried = 0
    first_fail: GangResult | None = None
    bound_hit = False
    for path, nodes in ordered:
        if left <= 0:
            bound_hit = True
            break
        tried += 1
        r = place_scored(pods, state, policy, scorer=sc, nodes=nodes, max_node_checks=left)
        left -= r.node_checks
        if r.placed:
            return TopologyOutcome(r, path, 1, tried)
        if first_fail is None:
            first_fail = r
        if r.explanation is not None and r.explanation.bound_hit:
            bound_hit = True
            break
    name = levels[level].key
    if mode == PREFERRED and not bound_hit:
        # as few domains as the greedy order reaches: the freest domain first
        by_free = sorted(doms.items(), key=lambda kv: (-free(kv[1]), kv[1][0]))
        order: list[int] = []
        for _, nodes in by_free:
            inner = sc.node_order(nodes) if policy == LEAST_FRAGMENTATION else nodes
            order.extend(inner)
        r = place_gang(
            pods,
            state,
            max_node_checks=max(1, left),
            node_order=tuple(order),
            device_order=sc.device_order if policy == LEAST_FRAGMENTATION else None,  # type: ignore[arg-type]
        )
        if r.placed:
            used = {domain_of(state, state.node_index[p.node], levels, level) for p in r.placements}
            return TopologyOutcome(r, None, len(used), tried)
        return TopologyOutcome(r, None, 0, tried)
    # required (or the bound was hit): say so, with the first domain's explanation
    head: tuple[Part, ...] = (
        f"no single domain of topology level {name} holds the gang ({len(doms)} domains, {tried} tried"
        + (", search stopped: node-check bound" if bound_hit else "")
        + ")",
    )
    expl = first_fail.explanation if first_fail is not None else None
    if expl is not None:
        parts = (*head, f"; first domain {'/'.join(ordered[0][0])}: ", *(expl.parts or (expl.message,)))
        e = GangExplanation.of(
            expl.pod, parts, expl.best, max_node_checks - left, bound_hit or expl.bound_hit
        )
    else:
        e = GangExplanation.of("", head, None, max_node_checks - left, bound_hit)
    return TopologyOutcome(GangResult(False, (), e, None, max_node_checks - left), None, 0, tried)
