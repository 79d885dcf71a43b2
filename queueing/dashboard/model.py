"""What the dashboard shows, as plain JSON-ready data, from a :class:`DashboardInput` (no I/O, no clock).

A source (the controller, a simulation replay: :mod:`queueing.dashboard.source`) hands over the
scheduler's own view — queue specs, admitted workloads (with their plans), pending workloads (with
their structured reasons), ResourceSlices — and these functions turn it into the pages' data:

* :func:`queues_view` — cohort tree; per ClusterQueue and (flavor, resource): nominal quota, limits,
  usage, borrowed and lent (the ``usage`` report's definitions, see :func:`lent_amounts`); fair-share
  value (``weighted_shares``, what the fair-share metric reports); pending/admitted counts, stop
  policy, inactive reason; per LocalQueue the counts.
* :func:`workloads_view` — pending workloads per ClusterQueue in queue order (the core's
  ``priority_key``: priority, then creation or requeue time) with their position and reason; admitted
  workloads with their plan (node and devices per pod).
* :class:`DeviceLayout` / :func:`devices_view` — the device map: per node the cards of its slices (a
  partitionable GPU is the counter set its devices consume, with one cell per ``memorySliceN``
  counter; a device without counters is a card of its own), and every held device drawn on its card
  at the memory slices it consumes (a MIG instance at its start position), with its holder
  (workload and queue, or a ResourceClaim outside any admission) and state (admitted, evicting).
* :func:`device_detail` — one device: attributes, capacity, counters it consumes, taints, holder.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from queueing.api.quantity import format_amount
from queueing.api.resource import ResourceSlice
from queueing.scheduling.cycle import PendingReason
from queueing.scheduling.fairshare import weighted_shares
from queueing.scheduling.ordering import priority_key
from queueing.scheduling.snapshot import (
    AdmittedWorkload,
    ClusterQueueSpec,
    CohortSpec,
    LocalQueueSpec,
    WorkloadInfo,
)

__all__ = [
    "DashboardInput",
    "DeviceKey",
    "DeviceLayout",
    "PlannedPod",
    "device_detail",
    "devices_view",
    "lent_amounts",
    "queues_view",
    "workloads_view",
]

DeviceKey = tuple[str, str, str]  # (driver, pool, device)
_SLICE_COUNTER = re.compile(r"^memorySlice(\d+)$")


@dataclass(frozen=True)
class PlannedPod:
    """One pod of an admitted workload's plan: its node and, per claim (pod-spec name), its devices."""

    pod_set: str
    index: int
    node: str
    devices: tuple[tuple[str, DeviceKey], ...] = ()  # (claim name, device)


@dataclass(frozen=True)
class DashboardInput:
    """Everything the pages show, as the scheduler sees it at ``now`` (the source's clock)."""

    now: float
    cluster_queues: Sequence[ClusterQueueSpec] = ()
    cohorts: Sequence[CohortSpec] = ()
    local_queues: Sequence[LocalQueueSpec] = ()
    admitted: Sequence[AdmittedWorkload] = ()
    plans: Mapping[str, Sequence[PlannedPod]] = field(default_factory=dict)  # workload key -> pods
    evicting: Mapping[str, str] = field(default_factory=dict)  # workload key -> eviction reason
    pending: Sequence[WorkloadInfo] = ()
    reasons: Mapping[str, PendingReason] = field(default_factory=dict)  # workload key -> reason
    invalid: Mapping[str, str] = field(default_factory=dict)  # workload key -> why it cannot queue
    inactive: Mapping[str, str] = field(default_factory=dict)  # ClusterQueue -> why inactive
    slices: Sequence[ResourceSlice] = ()
    # devices allocated to ResourceClaims outside any admission: device -> "namespace/claim"
    claims: Mapping[DeviceKey, str] = field(default_factory=dict)
    note: str | None = None  # shown on every page (e.g. "this replica is a standby")


def _amount(v: Fraction | None, resource: str) -> str | None:
    return None if v is None else format_amount(v, resource)


def _num(v: Fraction) -> float:
    return float(v)


# ---------------------------------------------------------------- queues
def lent_amounts(
    cluster_queues: Sequence[ClusterQueueSpec], usage: Mapping[tuple[str, str, str], Fraction]
) -> dict[tuple[str, str, str], Fraction]:
    """(ClusterQueue, flavor, resource) -> what it lends: the ledger's ``usage`` report definition
    (``queueing report usage``), computed on the live usage. In a cohort, a queue's unused lendable
    quota (``nominal - usage``, at most ``nominal - guaranteed``, guaranteed = ``nominal -
    lendingLimit``) covers the cohort's borrowing in proportion to every member's unused lendable
    quota. ``tests/dashboard/test_model.py`` checks it against the report on the same ledger."""
    unused: dict[tuple[str, str, str], Fraction] = {}
    borrowed: dict[tuple[str, str, str], Fraction] = {}
    for cq in cluster_queues:
        for (flavor, resource), q in cq.quotas().items():
            u = usage.get((cq.name, flavor, resource), Fraction(0))
            if cq.cohort is None:
                continue
            group = (cq.cohort, flavor, resource)
            guaranteed = (
                max(Fraction(0), q.nominal - q.lending_limit) if q.lending_limit is not None else Fraction(0)
            )
            free = q.nominal - u
            lendable = Fraction(0) if free <= 0 else min(free, q.nominal - guaranteed)
            unused[(cq.name, flavor, resource)] = lendable
            borrowed[group] = borrowed.get(group, Fraction(0)) + max(Fraction(0), u - q.nominal)
    totals: dict[tuple[str, str, str], Fraction] = {}
    cohort_of = {cq.name: cq.cohort for cq in cluster_queues}
    for (name, flavor, resource), lendable in unused.items():
        g = (cohort_of[name] or "", flavor, resource)
        totals[g] = totals.get(g, Fraction(0)) + lendable
    out: dict[tuple[str, str, str], Fraction] = {}
    for (name, flavor, resource), lendable in unused.items():
        g = (cohort_of[name] or "", flavor, resource)
        total, b = totals[g], borrowed.get(g, Fraction(0))
        if total == 0:
            out[(name, flavor, resource)] = Fraction(0)
        elif b < total:
            out[(name, flavor, resource)] = lendable * b / total
        else:
            out[(name, flavor, resource)] = lendable
    return out


def _cq_of(inp: DashboardInput) -> dict[str, str]:
    return {lq.key: lq.cluster_queue for lq in inp.local_queues}


def queues_view(inp: DashboardInput) -> dict[str, Any]:
    usage: dict[tuple[str, str, str], Fraction] = {}
    admitted_n: dict[str, int] = {}
    lq_admitted: dict[str, int] = {}
    for a in inp.admitted:
        admitted_n[a.cluster_queue] = admitted_n.get(a.cluster_queue, 0) + 1
        lq_admitted[a.workload.queue_key] = lq_admitted.get(a.workload.queue_key, 0) + 1
        for (flavor, resource), v in a.usage.items():
            k = (a.cluster_queue, flavor, resource)
            usage[k] = usage.get(k, Fraction(0)) + v
    cq_of = _cq_of(inp)
    pending_n: dict[str, int] = {}
    lq_pending: dict[str, int] = {}
    for w in inp.pending:
        lq_pending[w.queue_key] = lq_pending.get(w.queue_key, 0) + 1
        pcq = cq_of.get(w.queue_key)
        if pcq is not None:
            pending_n[pcq] = pending_n.get(pcq, 0) + 1
    lent = lent_amounts(inp.cluster_queues, usage)
    shares = weighted_shares(inp.cluster_queues, inp.cohorts, inp.admitted)
    cqs: list[dict[str, Any]] = []
    for cq in sorted(inp.cluster_queues, key=lambda c: c.name):
        resources = []
        for (flavor, resource), q in cq.quotas().items():
            u = usage.get((cq.name, flavor, resource), Fraction(0))
            resources.append(
                {
                    "flavor": flavor,
                    "resource": resource,
                    "nominal": _amount(q.nominal, resource),
                    "borrowingLimit": _amount(q.borrowing_limit, resource),
                    "lendingLimit": _amount(q.lending_limit, resource),
                    "usage": _amount(u, resource),
                    "borrowed": _amount(max(Fraction(0), u - q.nominal), resource),
                    "lent": _amount(lent.get((cq.name, flavor, resource), Fraction(0)), resource),
                    "used": _num(u / q.nominal) if q.nominal else (1.0 if u else 0.0),
                }
            )
        share = shares.get(cq.name)
        cqs.append(
            {
                "name": cq.name,
                "cohort": cq.cohort,
                "weight": _num(cq.fair_weight),
                "weightedShare": None if share is None else (share if share != float("inf") else "inf"),
                "stopPolicy": cq.stop_policy,
                "inactive": inp.inactive.get(cq.name),
                "pending": pending_n.get(cq.name, 0),
                "admitted": admitted_n.get(cq.name, 0),
                "resources": resources,
            }
        )
    cohorts = [
        {"name": c.name, "parent": c.parent, "weight": _num(c.fair_weight)}
        for c in sorted(inp.cohorts, key=lambda c: c.name)
    ]
    known = {c.name for c in inp.cohorts}
    for cq in inp.cluster_queues:  # a cohort named by a ClusterQueue needs no Cohort object
        if cq.cohort is not None and cq.cohort not in known:
            known.add(cq.cohort)
            cohorts.append({"name": cq.cohort, "parent": None, "weight": 1.0})
    lqs = [
        {
            "key": lq.key,
            "clusterQueue": lq.cluster_queue,
            "stopPolicy": lq.stop_policy,
            "pending": lq_pending.get(lq.key, 0),
            "admitted": lq_admitted.get(lq.key, 0),
        }
        for lq in sorted(inp.local_queues, key=lambda q: q.key)
    ]
    return {"now": inp.now, "note": inp.note, "cohorts": cohorts, "clusterQueues": cqs, "localQueues": lqs}


# ---------------------------------------------------------------- workloads
def _why(reason: PendingReason | None) -> dict[str, Any] | None:
    if reason is None or reason.why is None:
        return None
    w = reason.why
    return {
        "kind": w.kind,
        "deviceClass": w.device_class,
        "node": w.node,
        "numbers": {k: _num(v) for k, v in w.numbers},
        "pod": None if w.pod is None else {"podSet": w.pod.pod_set, "index": w.pod.index},
        "claim": w.claim,
    }


def workloads_view(inp: DashboardInput, limit: int = 2000) -> dict[str, Any]:
    """Pending per ClusterQueue in queue order (at most ``limit`` in all; the counts are complete) and
    the admitted workloads with their plans (sorted by key)."""
    cq_of = _cq_of(inp)
    order = sorted(inp.pending, key=priority_key)
    in_cq: dict[str, int] = {}
    in_lq: dict[str, int] = {}
    pending: list[dict[str, Any]] = []
    for w in order:
        cq = cq_of.get(w.queue_key)
        cq_pos = in_cq[cq or ""] = in_cq.get(cq or "", 0) + 1
        lq_pos = in_lq[w.queue_key] = in_lq.get(w.queue_key, 0) + 1
        if len(pending) >= limit:
            continue
        r = inp.reasons.get(w.key)
        pending.append(
            {
                "key": w.key,
                "localQueue": w.queue_key,
                "clusterQueue": cq,
                "priority": w.priority,
                "position": cq_pos,
                "positionInLocalQueue": lq_pos,
                "pods": sum(p.count for p in w.pod_sets),
                "active": w.active,
                "reason": None if r is None else r.reason,
                "message": None if r is None else r.text_for(w.key),
                "why": _why(r),
            }
        )
    for p in pending:
        p["of"] = in_cq.get(p["clusterQueue"] or "", 0)
    admitted: list[dict[str, Any]] = []
    for a in sorted(inp.admitted, key=lambda a: a.key):
        pods = inp.plans.get(a.key, ())
        admitted.append(
            {
                "key": a.key,
                "localQueue": a.workload.queue_key,
                "clusterQueue": a.cluster_queue,
                "priority": a.workload.priority,
                "admittedAt": a.admission_time,
                "evicting": inp.evicting.get(a.key),
                "usage": {
                    f"{flavor}/{resource}": format_amount(v, resource)
                    for (flavor, resource), v in sorted(a.usage.items())
                },
                "pods": [
                    {
                        "podSet": p.pod_set,
                        "index": p.index,
                        "node": p.node,
                        "devices": [{"claim": c, "device": "/".join(k)} for c, k in p.devices],
                    }
                    for p in pods
                ],
            }
        )
    invalid = [{"key": k, "message": m} for k, m in sorted(inp.invalid.items())]
    return {
        "now": inp.now,
        "note": inp.note,
        "pending": pending,
        "pendingTotal": len(order),
        "invalid": invalid,
        "admitted": admitted,
    }


# ---------------------------------------------------------------- device map
@dataclass
class _Card:
    node: str
    pool: tuple[str, str]  # (driver, pool) of its devices
    label: str
    slices: int  # memory-slice cells (1 for a device without counters)
    key: DeviceKey | None = None  # the device that spans the whole card (a whole GPU), if any
    tainted: bool = False


class DeviceLayout:
    """Where every device of the slices is drawn: per node its cards, per device (card, start, size).

    Built once per set of slices (:meth:`for_slices` keeps the last one while the slices are the
    same objects): the holders change every cycle, the layout only with the slices."""

    _last: tuple[tuple[int, ...], DeviceLayout] | None = None
    _made = 0

    def __init__(self, slices: Iterable[ResourceSlice]) -> None:
        DeviceLayout._made += 1
        self.id = DeviceLayout._made  # the page redraws the cards only when this changes
        self._json: dict[str, Any] | None = None
        self._on_card: dict[int, list[DeviceKey]] | None = None
        self.cards: list[_Card] = []
        self.nodes: list[tuple[str, list[int]]] = []  # node -> its card indexes, in order
        self.where: dict[DeviceKey, tuple[int, int, int]] = {}  # device -> (card, start, size)
        self.devices: dict[DeviceKey, tuple[ResourceSlice, int]] = {}  # device -> (slice, index)
        by_node: dict[str, list[int]] = {}
        ordered = sorted(slices, key=lambda s: (s.spec.node_name or s.spec.pool.name, s.name))
        # counter sets are per pool: a driver may publish them in a slice of their own
        sets: dict[tuple[str, str, str], int] = {}  # (driver, pool, counter set) -> card
        for s in ordered:
            spec = s.spec
            node = spec.node_name or f"pool {spec.pool.name}"
            cards = by_node.setdefault(node, [])
            for cs in spec.shared_counters or []:
                n = sum(1 for c in cs.counters if _SLICE_COUNTER.match(c))
                if n:
                    sets[(spec.driver, spec.pool.name, cs.name)] = len(self.cards)
                    cards.append(len(self.cards))
                    self.cards.append(_Card(node, (spec.driver, spec.pool.name), cs.name, n))
        for s in ordered:
            spec = s.spec
            node = spec.node_name or f"pool {spec.pool.name}"
            cards = by_node.setdefault(node, [])
            for i, d in enumerate(spec.devices):
                key = (spec.driver, spec.pool.name, d.name)
                self.devices[key] = (s, i)
                placed = None
                for cc in d.consumes_counters or []:
                    card = sets.get((spec.driver, spec.pool.name, cc.counter_set))
                    if card is None:
                        continue
                    idx = sorted(int(m.group(1)) for c in cc.counters if (m := _SLICE_COUNTER.match(c)))
                    if idx:
                        placed = (card, idx[0], idx[-1] - idx[0] + 1)
                    else:
                        placed = (card, 0, self.cards[card].slices)
                    break
                if placed is None:
                    card = len(self.cards)
                    cards.append(card)
                    self.cards.append(_Card(node, (spec.driver, spec.pool.name), d.name, 1, key))
                    placed = (card, 0, 1)
                c = self.cards[placed[0]]
                if placed[2] == c.slices and c.key is None:
                    c.key, c.label = key, d.name  # the whole GPU names its card
                if d.taints:
                    c.tainted = True
                self.where[key] = placed
        self.nodes = sorted(by_node.items(), key=lambda kv: _natural(kv[0]))

    def devices_on(self, card: int) -> list[DeviceKey]:
        """The devices drawn on ``card``, by start and name."""
        if self._on_card is None:
            self._on_card = {}
            for k, (c, _, _) in self.where.items():
                self._on_card.setdefault(c, []).append(k)
            for ks in self._on_card.values():
                ks.sort(key=lambda k: (self.where[k][1], -self.where[k][2], k[2]))
        return self._on_card.get(card, [])

    @classmethod
    def for_slices(cls, slices: Sequence[ResourceSlice]) -> DeviceLayout:
        ident = tuple(id(s) for s in slices)
        last = cls._last
        if last is not None and last[0] == ident:
            return last[1]
        layout = cls(slices)
        cls._last = (ident, layout)
        return layout

    def to_json(self) -> dict[str, Any]:
        """``{"pools": ["driver/pool", ...], "nodes": [[node, [[card, label, cells, tainted, pool,
        whole], ...]], ...]}``: ``whole`` 1 when the card's label is the name of the device spanning
        it (a whole GPU). Computed once per layout."""
        if self._json is None:
            pools: dict[tuple[str, str], int] = {}
            nodes = []
            for node, cards in self.nodes:
                row = []
                for i in cards:
                    c = self.cards[i]
                    p = pools.setdefault(c.pool, len(pools))
                    row.append([i, c.label, c.slices, 1 if c.tainted else 0, p, 1 if c.key else 0])
                nodes.append([node, row])
            self._json = {
                "pools": ["/".join(p) for p in pools],
                "nodes": nodes,
                "cards": len(self.cards),
                "id": self.id,
            }
        return self._json


def _natural(s: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", s)]


def _holders(inp: DashboardInput) -> tuple[list[dict[str, Any]], dict[DeviceKey, tuple[int, str, str]]]:
    """The holders (workloads, then claims outside admissions) and device -> (holder, claim, pod)."""
    holders: list[dict[str, Any]] = []
    held: dict[DeviceKey, tuple[int, str, str]] = {}
    for a in sorted(inp.admitted, key=lambda a: a.key):
        h = len(holders)
        holders.append(
            {
                "key": a.key,
                "clusterQueue": a.cluster_queue,
                "localQueue": a.workload.queue_key,
                "state": "evicting" if a.key in inp.evicting else "admitted",
            }
        )
        name = a.key.partition("/")[2]
        for p in inp.plans.get(a.key, ()):
            pod = f"{name}-{p.pod_set}-{p.index}"
            for claim, k in p.devices:
                held.setdefault(k, (h, claim, pod))
    by_claim: dict[str, int] = {}
    for k, claim in sorted(inp.claims.items()):
        if k in held:
            continue
        if claim not in by_claim:
            by_claim[claim] = len(holders)
            holders.append({"key": claim, "clusterQueue": None, "localQueue": None, "state": "claim"})
        held[k] = (by_claim[claim], claim, "")
    return holders, held


def devices_view(inp: DashboardInput, layout: DeviceLayout | None = None) -> dict[str, Any]:
    """The device map: the layout, the holders and every held device as ``[card, start, size, holder,
    device, claim]`` (the device by its name in the card's pool)."""
    layout = layout or DeviceLayout.for_slices(inp.slices)
    holders, held = _holders(inp)
    items = []
    for k, (h, claim, _pod) in held.items():
        w = layout.where.get(k)
        if w is None:
            continue  # a planned device no slice publishes (any more)
        items.append([w[0], w[1], w[2], h, k[2], claim])
    items.sort()
    return {"now": inp.now, "note": inp.note, "layout": layout.to_json(), "holders": holders, "held": items}


def device_detail(
    inp: DashboardInput, key: DeviceKey, layout: DeviceLayout | None = None
) -> dict[str, Any] | None:
    """One device: where it is drawn, what its slice publishes about it and who holds it."""
    layout = layout or DeviceLayout.for_slices(inp.slices)
    found = layout.devices.get(key)
    if found is None:
        return None
    s, i = found
    d = s.spec.devices[i]
    card, start, size = layout.where[key]
    c = layout.cards[card]
    holders, held = _holders(inp)
    h = held.get(key)
    holder = None
    if h is not None:
        holder = dict(holders[h[0]]) | {"claim": h[1], "pod": h[2] or None}
    # the other devices of the card that are held (on a GPU: the MIG instances in use)
    on_card = sorted(
        (layout.where[k][1], "/".join(k), holders[v[0]]["key"])
        for k, v in held.items()
        if k in layout.where and layout.where[k][0] == card and k != key
    )
    # every device of the card: held, blocked (a held device takes one of its memory slices) or free
    taken = [(w[1], w[1] + w[2]) for k in held if (w := layout.where.get(k)) is not None and w[0] == card]
    devices = []
    for k in layout.devices_on(card):
        st, sz = layout.where[k][1:]
        hk = held.get(k)
        state = (
            "held"
            if hk is not None
            else ("blocked" if any(a < st + sz and st < b for a, b in taken) else "free")
        )
        devices.append(
            {
                "name": k[2],
                "start": st,
                "size": sz,
                "state": state,
                "holder": holders[hk[0]]["key"] if hk else None,
            }
        )
    dd = d.to_dict()
    return {
        "device": "/".join(key),
        "driver": key[0],
        "pool": key[1],
        "name": key[2],
        "node": c.node,
        "slice": s.name,
        "card": c.label,
        "start": start,
        "size": size,
        "slices": c.slices,
        "attributes": {
            name: (kv[1] if (kv := a.kind_and_value()) is not None else None)
            for name, a in (d.attributes or {}).items()
        },
        "capacity": {name: str(cap.value) for name, cap in (d.capacity or {}).items()},
        "consumesCounters": dd.get("consumesCounters"),
        "taints": dd.get("taints"),
        "holder": holder,
        "sameCard": [{"start": st, "device": dev, "holder": who} for st, dev, who in on_card],
        "onCard": devices,
    }
