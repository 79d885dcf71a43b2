"""Placement scoring: which of the feasible placements of a gang to take (``LeastFragmentation``).

Feasibility stays the gang allocator's (``queueing.dra.gang.place_gang``): exact, all or nothing,
bounded by ``max_node_checks`` (hitting the bound is reported in the explanation, as always). A
policy only changes the order in which that depth-first search tries nodes and each request's
devices, so the first placement it reaches is the best one by the score's order:

* ``FirstFit`` (the default): cluster order and inventory order, as upstream. Nothing here runs.
* ``LeastFragmentation``: best fit at every level, measured by what a placement leaves placeable.

  - **Nodes**: fewest *whole free devices* first (untouched cards and free devices without
    counters), then the most *pods running* (the node likely to drain last: one with few pods is
    the likeliest to come free whole soon), then fewest free *GPU units* (a counter set, i.e. a
    partitionable GPU, counts by the share of its representative counter still free; a device
    without counters counts 1 when free): small jobs fill used nodes, MIG jobs go where a card is
    already partitioned, and whole nodes stay free for whole-node gangs.
  - **Partitionable devices** (MIG): a candidate is ranked by the *loss* it causes on its card: the
    summed weight of the card's devices (every profile at every start position, and the whole GPU)
    that are placeable now and no longer placeable once the candidate's counters are taken. The
    weight of a device is the square of its share of the card's counters, so keeping a 4g or 7g
    placement possible is worth far more than keeping a 1g. With NVIDIA's H200 rules (one counter
    per memory slice, ``tests/fixtures/dra/h200.py``) this puts a 1g.18gb at the high start
    positions of an already partitioned card, never on an untouched card while a used one has room.
  - **Devices without counters**: grouped by ``resource.kubernetes.io/pcieRoot`` where published;
    the group with the most devices taken first, so GPU/NIC pairs under one root stay free together.

Identical pods are still placed in non-decreasing positions (of the score's node order), so no
node assignment is lost. The search backtracks over nodes, not over the devices an earlier pod took
on a node (as kube-scheduler, which allocates pod by pod), so with partitionable devices another
device order may find a fit first fit misses, or miss one it finds: when the scored search misses,
first fit's search decides (and explains). A gang fits under ``LeastFragmentation`` whenever it
fits under ``FirstFit``, and exactly then when no two pods share a node's partitionable cards. Per candidate list the scorer computes a card's state once and
memoises the loss per (card layout, counters used, candidate); with ``verify=True`` each memoised
loss is computed again and compared (``VerifyError``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from queueing.api.core import Node, Pod
from queueing.dra.gang import DEFAULT_MAX_NODE_CHECKS, ClusterState, GangResult, place_gang
from queueing.dra.inventory import CounterKey, InventoryDevice, Usage
from queueing.dra.verify import VerifyError

__all__ = [
    "FIRST_FIT",
    "LEAST_FRAGMENTATION",
    "POLICIES",
    "PlacementPolicy",
    "Scorer",
    "card_loss",
    "place_scored",
]

PlacementPolicy = Literal["FirstFit", "LeastFragmentation"]
FIRST_FIT: PlacementPolicy = "FirstFit"
LEAST_FRAGMENTATION: PlacementPolicy = "LeastFragmentation"
POLICIES: tuple[PlacementPolicy, ...] = (FIRST_FIT, LEAST_FRAGMENTATION)
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
_ZERO = Fraction(0)

SetKey = tuple[str, str, str]  # (driver, pool, counter set)


@dataclass(frozen=True, slots=True)
class _Card:
    """One counter set (a partitionable GPU) and the devices that consume it."""

    key: SetKey
    counters: tuple[CounterKey, ...]  # every counter of the set, by name
    totals: tuple[Fraction, ...]
    rep: CounterKey  # consumed by every device of the set: its share free measures the card
    rep_total: float
    devices: tuple[InventoryDevice, ...]  # inventory order
    # per device: its consumption as (index into ``counters``, amount), and its weight
    uses: tuple[tuple[tuple[int, Fraction], ...], ...]
    weights: tuple[Fraction, ...]
    layout: int  # cards with equal layouts (names aside) share memoised losses


def card_loss(
    totals: Sequence[Fraction],
    used: Sequence[Fraction],
    uses: Sequence[Sequence[tuple[int, Fraction]]],
    weights: Sequence[Fraction],
    cand: int,
) -> Fraction:
    """The summed weight of the card's devices placeable with ``used`` taken and not placeable once
    device ``cand`` is taken as well (the general computation the scorer memoises)."""
    after = list(used)
    for j, a in uses[cand]:
        after[j] += a
    loss = _ZERO
    for d, row in enumerate(uses):
        if all(used[j] + a <= totals[j] for j, a in row) and not all(
            after[j] + a <= totals[j] for j, a in row
        ):
            loss += weights[d]
    return loss


def _rep_and_weights(
    totals: Sequence[Fraction], uses: Sequence[Sequence[tuple[int, Fraction]]]
) -> tuple[int, tuple[Fraction, ...]]:
    """A card's representative counter (the first consumed by every device; else the first) and its
    devices' weights (the square of the mean share of the card's counters each consumes)."""
    common = set(range(len(totals)))
    for row in uses:
        common &= {j for j, _ in row}
    weights = tuple(
        (sum((Fraction(a) / totals[j] for j, a in row if totals[j]), _ZERO) / len(totals)) ** 2
        for row in uses
    )
    return (min(common) if common else 0), weights


class Scorer:
    """The ``LeastFragmentation`` orders for one :class:`~queueing.dra.gang.ClusterState` (its
    inventory is fixed; what is taken is read from the state's ``Usage`` at each call)."""

    def __init__(self, state: ClusterState, *, verify: bool | None = None) -> None:
        self.state = state
        self.verify = state.verify if verify is None else verify
        self._cards: dict[SetKey, _Card] = {}
        self._card_of: dict[tuple[str, str, str], tuple[_Card, int] | None] = {}
        self._node_cards: list[tuple[tuple[_Card, ...], tuple[InventoryDevice, ...]]] | None = None
        self._layouts: dict[tuple[object, ...], int] = {}
        # (card layout, counters used) -> device index on the card -> its loss (``losses``)
        self._loss: dict[tuple[int, tuple[Fraction, ...]], dict[int, Fraction]] = {}
        self._reps: list[tuple[tuple[tuple[CounterKey, float], ...], tuple[InventoryDevice, ...]]] | None = (
            None
        )
        self._placeable: dict[tuple[int, tuple[Fraction, ...]], tuple[int, ...]] = {}
        # node index -> (stamp, ``node_key``): see ``node_order``
        self._node_keys: dict[int, tuple[tuple[object, ...], tuple[int, int, float, int]]] = {}
        self._scoped: list[bool] | None = None  # per node: ``Inventory.node_scoped`` (fixed)
        # node name -> (stamp, per card its counters used and losses, per candidate list (by id)
        # the list and its order): see ``device_order``
        self._orders: dict[
            str,
            tuple[
                tuple[object, ...],
                dict[SetKey, tuple[tuple[Fraction, ...], dict[int, Fraction]]],
                dict[int, tuple[tuple[object, ...], tuple[object, ...]]],
            ],
        ] = {}
        self._build()

    # ---- structure (once per inventory) -----------------------------------------------------
    def _build(self) -> None:
        inv = self.state.inventory
        members: dict[SetKey, list[InventoryDevice]] = {}
        for dev in sorted(inv.devices.values(), key=lambda d: d.order):
            sets = {ck[:3] for ck, _ in dev.consumes}
            if len(sets) == 1:
                members.setdefault(next(iter(sets)), []).append(dev)
            elif sets:  # a device over several counter sets: not ranked by a card
                self._card_of[dev.key] = None
        by_set: dict[SetKey, list[CounterKey]] = {}
        for ck in inv.counters:
            by_set.setdefault(ck[:3], []).append(ck)
        # per layout: its representative counter's index and its devices' weights (both functions
        # of the layout alone: computed once per layout; verify mode computes them per card again)
        derived: dict[int, tuple[int, tuple[Fraction, ...]]] = {}
        for sk, devs in members.items():
            counters = tuple(sorted(by_set.get(sk, ())))
            if not counters:
                continue
            # whole amounts as ints (as ``_used``): the same values, cheaper to add, compare and hash
            totals = tuple(_whole(inv.counters[ck]) for ck in counters)
            # each counter's index by its name (every counter a member device consumes is of this
            # set, and a name is cheaper to hash than a counter key)
            at = {ck[3]: j for j, ck in enumerate(counters)}
            uses = tuple(
                tuple(sorted((j, _whole(a)) for ck, a in d.consumes if (j := at.get(ck[3])) is not None))
                for d in devs
            )
            shape = (tuple(ck[3] for ck in counters), totals, uses)
            layout = self._layouts.setdefault(shape, len(self._layouts))
            hit = derived.get(layout)
            if hit is None or self.verify:
                got = _rep_and_weights(totals, uses)
                if hit is not None and hit != got:
                    raise VerifyError("Scorer._build (per layout)", hit, got, f"counter set {'/'.join(sk)}")
                hit = derived[layout] = got
            rep = counters[hit[0]]
            weights = hit[1]
            card = _Card(
                sk, counters, totals, rep, float(inv.counters[rep]), tuple(devs), uses, weights, layout
            )
            self._cards[sk] = card
            for k, d in enumerate(devs):
                self._card_of[d.key] = (card, k)

    def _cards_on(self, i: int) -> tuple[tuple[_Card, ...], tuple[InventoryDevice, ...]]:
        """Node i's cards and its devices without counters."""
        if self._node_cards is None:
            self._node_cards = []
            for node in self.state.nodes:
                cards: dict[SetKey, _Card] = {}
                plain: list[InventoryDevice] = []
                for d in self.state.inventory.devices_on(node):
                    hit = self._card_of.get(d.key)
                    if hit is not None:
                        cards.setdefault(hit[0].key, hit[0])
                    elif not d.consumes and not d.multi:
                        plain.append(d)
                self._node_cards.append((tuple(cards.values()), tuple(plain)))
        return self._node_cards[i]

    # ---- node order ---------------------------------------------------------------------------
    def free_units(self, i: int, usage: Usage) -> float:
        """Node i's free GPU units: per card its representative counter's share free, plus its
        free devices without counters (a float: an order, not an amount)."""
        reps, plain = self._reps_on(i)
        used = usage.counters
        taken = usage.devices
        free = float(len(reps))
        for d in plain:
            if not taken.get(d.key, 0):
                free += 1.0
        for k, inv in reps:
            u = used.get(k)
            if u:
                free -= u.numerator / u.denominator * inv
        return free

    def _reps_on(self, i: int) -> tuple[tuple[tuple[CounterKey, float], ...], tuple[InventoryDevice, ...]]:
        """Node i's cards as (representative counter, 1 / its total), and its devices without counters."""
        if self._reps is None:
            self._reps = []
            for j in range(len(self.state.nodes)):
                cards, plain = self._cards_on(j)
                self._reps.append((tuple((c.rep, 1.0 / c.rep_total) for c in cards if c.rep_total), plain))
        return self._reps[i]

    def cards(self, i: int, usage: Usage) -> list[tuple[Fraction, tuple[InventoryDevice, ...]]]:
        """Node i's partitionable cards as (share of the representative counter free, the card's
        devices placeable with ``usage`` taken), and each free device without counters as (1, it):
        what measures of fragmentation (``bench/placement.py``) look at."""
        cards, plain = self._cards_on(i)
        counters = usage.counters
        out: list[tuple[Fraction, tuple[InventoryDevice, ...]]] = []
        for c in cards:
            used = _used(counters, c.counters)
            total = c.totals[c.counters.index(c.rep)]
            free = 1 - counters.get(c.rep, _ZERO) / total if total else _ZERO
            key = (c.layout, used)
            ok = self._placeable.get(key)
            if ok is None or self.verify:
                got = tuple(
                    k for k, row in enumerate(c.uses) if all(used[j] + a <= c.totals[j] for j, a in row)
                )
                if ok is not None and ok != got:
                    raise VerifyError("Scorer.cards (memo)", ok, got, f"counter set {'/'.join(c.key)}")
                if len(self._placeable) >= 100_000:
                    self._placeable.clear()
                ok = self._placeable[key] = got
            out.append((free, tuple(c.devices[k] for k in ok if not usage.devices.get(c.devices[k].key, 0))))
        out.extend((Fraction(1), (d,)) for d in plain if not usage.devices.get(d.key, 0))
        return out

    def whole_free(self, i: int, usage: Usage) -> int:
        """Node i's untouched cards and free devices without counters: what whole-device pods use."""
        reps, plain = self._reps_on(i)
        used = usage.counters
        taken = usage.devices
        return sum(1 for k, _ in reps if not used.get(k)) + sum(1 for d in plain if not taken.get(d.key, 0))

    def node_key(self, i: int, usage: Usage) -> tuple[int, int, float, int]:
        """Best fit: fewest whole free devices first (a whole-GPU pod fills the node it fits on most
        tightly; a MIG pod goes where a card is already partitioned), then the most pods running
        (the node that will take longest to drain: a node with few pods is the one most likely to
        come free whole soon, so it is kept for last), then fewest free GPU units."""
        return (self.whole_free(i, usage), -int(self.state.used[i]["pods"]), self.free_units(i, usage), i)

    def node_order(self, nodes: Sequence[int] | None = None) -> tuple[int, ...]:
        """``nodes`` (default all) by ``node_key``, each kept while its node's devices and pods
        stay as they were (nodes that reach only their own devices, ``Inventory.node_scoped``: a
        stamp of the usage, the node's ``Usage.node_changes`` and its pods; verify mode computes
        every key again and compares)."""
        st = self.state
        usage = st.usage
        idx = range(len(st.nodes)) if nodes is None else nodes
        kept = self._node_keys
        keys: dict[int, tuple[int, int, float, int]] = {}
        scoped = self._scoped
        if scoped is None:
            scoped = self._scoped = [st.inventory.node_scoped(n) for n in st.nodes]
        names = st.node_names
        changes = usage.node_changes
        for i in idx:
            if not scoped[i]:
                keys[i] = self.node_key(i, usage)
                continue
            stamp = (usage.token, changes.get(names[i], 0), usage.loose_change, st.used[i]["pods"])
            hit = kept.get(i)
            if hit is not None and hit[0] == stamp:
                key = hit[1]
                if self.verify and key != self.node_key(i, usage):
                    raise VerifyError(
                        "Scorer.node_order (kept node keys)",
                        key,
                        self.node_key(i, usage),
                        f"node {names[i]}",
                    )
            else:
                key = self.node_key(i, usage)
                kept[i] = (stamp, key)
            keys[i] = key
        return tuple(sorted(idx, key=keys.__getitem__))

    # ---- device order ------------------------------------------------------------------------
    def losses(self, card: _Card, used: tuple[Fraction, ...]) -> dict[int, Fraction]:
        """The memo of the losses on cards of ``card``'s layout with ``used`` taken (device index ->
        loss, filled by ``loss``): one lookup per card and counter state, not per candidate."""
        key = (card.layout, used)
        memo = self._loss.get(key)
        if memo is None:
            if len(self._loss) >= 50_000:
                self._loss.clear()
            memo = self._loss[key] = {}
        return memo

    def loss(
        self, card: _Card, used: tuple[Fraction, ...], k: int, memo: dict[int, Fraction] | None = None
    ) -> Fraction:
        """``card_loss`` of device k of ``card`` with ``used`` taken, memoised per (layout, used, k)
        (``memo``: ``losses(card, used)``, when the caller has it); verify mode computes it again."""
        if memo is None:
            memo = self.losses(card, used)
        hit = memo.get(k)
        if hit is None or self.verify:
            got = card_loss(card.totals, used, card.uses, card.weights, k)
            if hit is not None and hit != got:
                raise VerifyError("Scorer.loss (memo)", hit, got, f"counter set {'/'.join(card.key)}")
            hit = memo[k] = got
        return hit

    def device_order(self, cands: tuple[object, ...], node: Node | None, usage: Usage) -> tuple[object, ...]:
        """``Allocator.allocate_on``'s ``order``: the same candidates, least loss first (devices of
        partitionable cards), then devices without counters by their PCIe root's taken devices (most
        first), each in inventory order among equals.

        On a node that reaches only its own devices (``Inventory.node_scoped``) the order is kept
        per candidate list (by identity), and each card's counters used, while the node's devices
        stay as they were (a stamp of the usage and the node's ``Usage.node_changes``: nothing else
        changes what the order reads); verify mode orders again and compares."""
        if len(cands) < 2:
            return cands
        if node is None or not self.state.inventory.node_scoped(node):
            return self._device_order(cands, node, usage, {})
        stamp = (usage.token, usage.node_changes.get(node.name, 0), usage.loose_change)
        kept = self._orders.get(node.name)
        if kept is None or kept[0] != stamp:
            kept = self._orders[node.name] = (stamp, {}, {})
        orders = kept[2]
        hit = orders.get(id(cands))
        if hit is not None and hit[0] is cands:
            if self.verify:
                want = self._device_order(cands, node, usage, {})
                if not _same(hit[1], want):
                    raise VerifyError(
                        "Scorer.device_order (kept per node)",
                        _names(hit[1]),
                        _names(want),
                        f"node {node.name}",
                    )
            return hit[1]
        got = self._device_order(cands, node, usage, kept[1])
        orders[id(cands)] = (cands, got)
        return got

    def _device_order(
        self,
        cands: tuple[object, ...],
        node: Node | None,
        usage: Usage,
        used_of: dict[SetKey, tuple[tuple[Fraction, ...], dict[int, Fraction]]],
    ) -> tuple[object, ...]:
        """``device_order``'s general computation; ``used_of``: per card its counters used (and
        their ``losses``) in ``usage``, filled here (kept per node by the caller; verify mode reads
        them again)."""
        counters = usage.counters
        taken = usage.devices
        root_taken: dict[object, int] = {}
        keyed: list[tuple[tuple[object, ...], int, object]] = []
        for pos, cand in enumerate(cands):
            dev: InventoryDevice = cand.dev  # type: ignore[attr-defined]
            hit = self._card_of.get(dev.key)
            if hit is not None:
                card, k = hit
                cs = used_of.get(card.key)
                if cs is None or self.verify:
                    used = _used(counters, card.counters)
                    if cs is None:
                        cs = used_of[card.key] = (used, self.losses(card, used))
                    elif cs[0] != used:
                        raise VerifyError(
                            "Scorer.device_order (card counters kept per node)",
                            cs[0],
                            used,
                            f"counter set {'/'.join(card.key)}",
                        )
                keyed.append(((0, self.loss(card, cs[0], k, cs[1])), pos, cand))
                continue
            root = dev.attributes.get(PCIE_ROOT)
            if root is None:
                keyed.append(((1, 0), pos, cand))
                continue
            n = root_taken.get(root)
            if n is None:
                n = root_taken[root] = sum(
                    1
                    for d in self.state.inventory.devices_on(node)
                    if d.attributes.get(PCIE_ROOT) == root and taken.get(d.key, 0)
                )
            keyed.append(((1, -n), pos, cand))
        keyed.sort(key=lambda t: (t[0], t[1]))
        return tuple(c for _, _, c in keyed)


def _same(a: Sequence[object], b: Sequence[object]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def _names(cands: Sequence[object]) -> list[str]:
    return [c.dev.name for c in cands]  # type: ignore[attr-defined]


def _whole(v: Fraction) -> Fraction:
    """``v``, an int when it is whole (equal, cheaper to add, compare and hash)."""
    return v.numerator if v.denominator == 1 else v  # type: ignore[return-value]


def _used(counters: Mapping[CounterKey, Fraction], keys: Sequence[CounterKey]) -> tuple[Fraction, ...]:
    """What is used of each of a card's counters (whole amounts as ints: cheaper to hash)."""
    out: list[Fraction] = []
    for ck in keys:
        v = counters.get(ck)
        out.append(0 if v is None else v.numerator if v.denominator == 1 else v)  # type: ignore[arg-type]
    return tuple(out)


def place_scored(
    pods: Sequence[Pod],
    state: ClusterState,
    policy: PlacementPolicy = FIRST_FIT,
    *,
    scorer: Scorer | None = None,
    nodes: Sequence[int] | None = None,
    max_node_checks: int = DEFAULT_MAX_NODE_CHECKS,
) -> GangResult:
    """``place_gang`` under ``policy``; ``nodes``: only these node indexes (a topology domain).
    ``FirstFit`` is ``place_gang`` itself (with ``nodes``: those nodes in cluster order)."""
    if policy == FIRST_FIT:
        order = None if nodes is None else tuple(sorted(nodes))
        return place_gang(pods, state, max_node_checks=max_node_checks, node_order=order)
    if policy != LEAST_FRAGMENTATION:
        raise ValueError(f"placement policy {policy!r}: must be one of {', '.join(POLICIES)}")
    sc = scorer if scorer is not None else Scorer(state)
    r = place_gang(
        pods,
        state,
        max_node_checks=max_node_checks,
        node_order=sc.node_order(nodes),
        device_order=sc.device_order,  # type: ignore[arg-type]
        explain=False,
    )
    if r.placed:
        return r
    # The gang search backtracks over nodes, not over the devices an earlier pod took on a node
    # (kube-scheduler allocates pod by pod too): another device order can miss a fit first fit's
    # finds, or find one it misses. So a miss is first fit's answer, with its explanation: the
    # gang fits under LeastFragmentation whenever it fits under FirstFit.
    order = None if nodes is None else tuple(sorted(nodes))
    return place_gang(pods, state, max_node_checks=max_node_checks, node_order=order)
