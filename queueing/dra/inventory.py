"""The device inventory: pools built from ResourceSlices, and what is already in use.

Pools (upstream semantics):
* slices are grouped by (driver, pool name); only slices of the highest generation count;
* a pool with fewer slices than ``resourceSliceCount`` is *incomplete*: ExactCount requests skip it;
  an ``All`` request on a node that sees it (``Inventory.unusable_pools_on``) is an error;
* duplicate device names or counter set names, or a ``consumesCounters`` entry that names an unknown
  counter set or counter, make the pool *invalid* (skipped like an incomplete pool);
* node targeting comes from the slice (``nodeName``, ``nodeSelector``, ``allNodes``) or, with
  ``perDeviceNodeSelection``, from each device.

Shared counters are keyed by (driver, pool, counter set, counter) — upstream keys by pool name only.

``Usage`` is the mutable book of what is taken: exclusive devices, consumed counters and consumed
capacity of devices that allow multiple allocations. It is built from allocated claims and changed
only through ``take``/``give_back`` (the allocator and gang transactions undo exactly what they did).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction

from queueing.api.core import Node, NodeSelector
from queueing.api.quantity import Quantity
from queueing.api.resource import (
    Device,
    DeviceCapacity,
    DeviceTaint,
    ResourceClaim,
    ResourceSlice,
)
from queueing.dra.cel import DeviceInput, Version, VersionError, split_qualified_name

__all__ = [
    "CounterKey",
    "DeviceKey",
    "Inventory",
    "InventoryDevice",
    "Pick",
    "Pool",
    "Usage",
    "attribute_key",
    "slice_reaches",
]

DeviceKey = tuple[str, str, str]  # (driver, pool, device)
CounterKey = tuple[str, str, str, str]  # (driver, pool, counter set, counter)
AttrValue = tuple[str, bool | int | str]  # (kind, value): int 1 and string "1" differ
FREE_BLOCK_SHIFT = 5  # blocks of 32 nodes in the free-device index (``Usage.block_free``)
_NEVER_SHORT = 1 << 62  # ``block_free`` of a block with a node that is not simple: never skipped


def attribute_key(name: str, driver: str) -> str:
    """Fully qualified ``domain/name`` for an attribute or capacity name (no domain → the driver's)."""
    domain, ident = split_qualified_name(name, driver)
    return f"{domain}/{ident}"


@dataclass(frozen=True, slots=True, eq=False)
class InventoryDevice:
    """One device of a pool's current generation, with everything the allocator needs precomputed."""

    key: DeviceKey
    order: int  # global, deterministic order: (driver, pool, slice name, index)
    generation: int
    device: Device
    slice_name: str
    node_name: str | None
    node_selector: NodeSelector | None
    all_nodes: bool
    cel: DeviceInput
    attributes: Mapping[str, AttrValue]  # fully qualified name -> typed value
    capacity: Mapping[
        str, tuple[str, DeviceCapacity]
    ]  # fully qualified name -> (name as published, capacity)
    taints: tuple[DeviceTaint, ...]
    consumes: tuple[tuple[CounterKey, Fraction], ...]
    multi: bool  # allowMultipleAllocations
    binds_to_node: bool
    uses_counters: bool  # publishes consumesCounters (a partition of a partitionable device)
    pool_ok: bool  # pool complete and valid
    # DeviceClass name -> per capacity, what taking the device whole charges: ("<class>/<name as
    # published>", denominator, numerator); filled by ``charges._charges`` (a cache on the device)
    whole_charges: dict[str, tuple[tuple[str, int, int], ...]] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )

    @property
    def driver(self) -> str:
        return self.key[0]

    @property
    def pool(self) -> str:
        return self.key[1]

    @property
    def name(self) -> str:
        return self.key[2]

    def on_node(self, node: Node | None) -> bool:
        return _targets(node, self.node_name, self.all_nodes, self.node_selector)


def _targets(
    node: Node | None, node_name: str | None, all_nodes: bool, selector: NodeSelector | None
) -> bool:
    """Whether node targeting (``nodeName``, ``allNodes``, ``nodeSelector``) reaches ``node``."""
    if all_nodes:
        return True
    if node is None:
        return False
    if node_name:
        return node_name == node.name
    if selector is not None:
        return selector.matches(node.labels, node.name)
    return False


def slice_reaches(s: ResourceSlice, node: Node | None, partitionable: bool) -> bool:
    """Whether a pod on ``node`` sees the slice's pool through this slice, as upstream decides which
    pools a node sees (``GatherPools`` in structured/internal/incubating/pools_incubating.go,
    k8s.io/dynamic-resource-allocation v0.36.2): a slice with ``sharedCounters`` reaches every node;
    otherwise its ``nodeName``, ``allNodes`` or ``nodeSelector``, or with ``perDeviceNodeSelection``
    any of its devices' targeting. Slices with neither (a future extension) reach no node; with
    ``DRAPartitionableDevices`` off, slices with shared counters or per-device node selection are
    not read at all."""
    spec = s.spec
    if not partitionable and (spec.per_device_node_selection is not None or spec.shared_counters):
        return False
    if spec.shared_counters:
        return True
    if spec.node_name or spec.all_nodes or spec.node_selector is not None:
        return _targets(node, spec.node_name, bool(spec.all_nodes), spec.node_selector)
    if spec.per_device_node_selection:
        return any(_targets(node, d.node_name, bool(d.all_nodes), d.node_selector) for d in spec.devices)
    return False


@dataclass(frozen=True, slots=True)
class Pool:
    driver: str
    name: str
    generation: int
    slice_names: tuple[str, ...]
    resource_slice_count: int
    complete: bool
    invalid: str | None  # why the pool is invalid, None when valid
    counters: Mapping[CounterKey, Fraction]
    devices: tuple[InventoryDevice, ...]
    slices: tuple[ResourceSlice, ...] = ()  # of the current generation, by name

    @property
    def usable(self) -> bool:
        return self.complete and self.invalid is None


@dataclass(frozen=True, slots=True)
class Pick:
    """One device taken for one request: what it consumes, so it can be given back exactly."""

    device: InventoryDevice
    request: str
    admin_access: bool
    counters: tuple[tuple[CounterKey, Fraction], ...]
    capacity: tuple[tuple[str, Fraction], ...]  # consumed capacity (multi-allocation devices only)


_CHANGES = itertools.count(1)  # ``Usage.node_changes`` values


@dataclass(slots=True)
class Usage:
    """Mutable book of taken devices, counters and capacity (owned by one allocation or transaction)."""

    devices: dict[DeviceKey, int] = field(default_factory=dict)
    counters: dict[CounterKey, Fraction] = field(default_factory=dict)
    capacity: dict[tuple[DeviceKey, str], Fraction] = field(default_factory=dict)
    # ``epoch`` counts real releases. Taking more never turns a "does not fit" into a fit, so the
    # allocator may remember failures per (usage token, epoch); backtracking inside one search
    # restores an earlier state and does not count.
    epoch: int = 0
    token: object = field(default_factory=object)
    # the releases of ``epoch`` per node of the released device (``node_epochs``; devices without
    # a node of their own or on all nodes: ``loose_epoch``): a node that only reaches devices of
    # pools wholly on it (``Inventory.node_scoped``) fits nothing more until a release on it
    node_epochs: dict[str, int] = field(default_factory=dict)
    loose_epoch: int = 0
    # per node, a number that changes whenever a device of it is taken or given back (backtracking
    # too), unique across every Usage (``_CHANGES``); ``loose_change`` for devices on no node of
    # their own or on all nodes: with the token they tell a node's state apart (scorers' memos)
    node_changes: dict[str, int] = field(default_factory=dict)
    loose_change: int = 0
    # node name -> taken (exclusive) node-local devices, kept in step by take/give_back, so that
    # ``Inventory.free_on`` counts a node's free devices without walking them
    node_taken: dict[str, int] = field(default_factory=dict)
    # an index of free devices over nodes in a fixed order (``Inventory.index_free``): the nodes
    # are cut into blocks of ``1 << block_shift`` consecutive ones; ``block_free[b]`` is the sum of
    # ``Inventory.free_on`` over block b when every node of it is simple (every device node-local,
    # none allowing multiple allocations), a value no need reaches otherwise. ``node_block`` maps
    # the nodes of the former blocks to their block; take/give_back keep the sums in step, so a
    # search may skip a block whose sum is below what a pod needs.
    node_block: dict[str, int] | None = None
    block_free: list[int] = field(default_factory=list)
    block_shift: int = 0

    def copy(self) -> Usage:
        return Usage(
            dict(self.devices),
            dict(self.counters),
            dict(self.capacity),
            node_taken=dict(self.node_taken),
            node_epochs=dict(self.node_epochs),
            loose_epoch=self.loose_epoch,
            node_changes=dict(self.node_changes),
            loose_change=self.loose_change,
            node_block=self.node_block,  # never changed once built: shared
            block_free=list(self.block_free),
            block_shift=self.block_shift,
        )

    def is_taken(self, key: DeviceKey) -> bool:
        return self.devices.get(key, 0) > 0

    def take(self, pick: Pick) -> None:
        self.take_all((pick,))

    def give_back(self, pick: Pick, *, backtrack: bool = False) -> None:
        """Release a pick. ``backtrack``: undoing a step of a search that took it (no new epoch)."""
        self.give_back_all((pick,), backtrack=backtrack)

    def take_all(self, picks: Iterable[Pick]) -> None:
        """Take every pick, in order: a device (not multi-allocatable) counted as taken, its counters
        and capacity consumed."""
        devices = self.devices
        node_taken = self.node_taken
        node_block = self.node_block
        block_free = self.block_free
        counters = self.counters
        capacity = self.capacity
        node_changes = self.node_changes
        for pick in picks:
            if pick.admin_access:
                continue
            dev = pick.device
            key = dev.key
            name = dev.node_name
            if name is not None and not dev.all_nodes:
                node_changes[name] = next(_CHANGES)
            else:
                self.loose_change = next(_CHANGES)
            if not dev.multi:
                n = devices.get(key, 0)
                devices[key] = n + 1
                if not n and dev.node_name is not None and not dev.all_nodes:
                    node_taken[dev.node_name] = node_taken.get(dev.node_name, 0) + 1
                    if node_block is not None:
                        b = node_block.get(dev.node_name)
                        if b is not None:
                            block_free[b] -= 1
            for ck, amount in pick.counters:
                counters[ck] = counters.get(ck, Fraction(0)) + amount
            for name, amount in pick.capacity:
                ik = (key, name)
                capacity[ik] = capacity.get(ik, Fraction(0)) + amount

    def give_back_all(self, picks: Iterable[Pick], *, backtrack: bool = False) -> None:
        """Release every pick, in order: what :meth:`take_all` took. ``backtrack``: undoing steps of
        a search that took them (no new epoch)."""
        devices = self.devices
        node_taken = self.node_taken
        node_block = self.node_block
        block_free = self.block_free
        counters = self.counters
        capacity = self.capacity
        released = 0  # picks given back, each a new epoch unless backtracking (added once, at the end)
        node_epochs = self.node_epochs
        try:
            for pick in picks:
                if pick.admin_access:
                    continue
                released += 1
                dev = pick.device
                key = dev.key
                name = dev.node_name
                if name is not None and not dev.all_nodes:
                    self.node_changes[name] = next(_CHANGES)
                    if not backtrack:
                        node_epochs[name] = node_epochs.get(name, 0) + 1
                else:
                    self.loose_change = next(_CHANGES)
                    if not backtrack:
                        self.loose_epoch += 1
                if not dev.multi:
                    n = devices.get(key, 0) - 1
                    if n > 0:
                        devices[key] = n
                    elif (
                        devices.pop(key, None) is not None and dev.node_name is not None and not dev.all_nodes
                    ):
                        node_taken[dev.node_name] -= 1
                        if node_block is not None:
                            b = node_block.get(dev.node_name)
                            if b is not None:
                                block_free[b] += 1
                for ck, amount in pick.counters:
                    left = counters.get(ck, Fraction(0)) - amount
                    if left:
                        counters[ck] = left
                    else:
                        counters.pop(ck, None)
                for name, amount in pick.capacity:
                    ik = (key, name)
                    left = capacity.get(ik, Fraction(0)) - amount
                    if left:
                        capacity[ik] = left
                    else:
                        capacity.pop(ik, None)
        finally:
            if not backtrack:
                self.epoch += released


def _attr_value(kind: str, value: bool | int | str) -> bool | int | str | Version:
    return Version(str(value)) if kind == "version" else value


def _cel_input(device: Device, driver: str, multi: bool) -> tuple[DeviceInput, dict[str, AttrValue]]:
    attrs: dict[str, dict[str, bool | int | str | Version]] = {}
    flat: dict[str, AttrValue] = {}
    for name, attr in (device.attributes or {}).items():
        kv = attr.kind_and_value()
        if kv is None:
            continue
        domain, ident = split_qualified_name(name, driver)
        try:
            attrs.setdefault(domain, {})[ident] = _attr_value(*kv)
        except VersionError:  # an unparsable version: keep it out of CEL, constraints still see the text
            attrs.setdefault(domain, {})
        flat[f"{domain}/{ident}"] = kv
    caps: dict[str, dict[str, Quantity]] = {}
    for name, cap in (device.capacity or {}).items():
        domain, ident = split_qualified_name(name, driver)
        caps.setdefault(domain, {})[ident] = cap.value
    return DeviceInput(driver=driver, attributes=attrs, capacity=caps, allow_multiple_allocations=multi), flat


class Inventory:
    """Pools and devices from a set of ResourceSlices; immutable once built.

    ``devices_on(node)`` lists the devices a pod on ``node`` may use (deterministic order), cached per
    node name. Rebuild the inventory when slices change (the selector memo lives in ``SelectorCache``
    and is keyed by pool generation, so it survives a rebuild). ``previous``: an inventory built
    before; each of its pools whose slices are the very same objects is taken over instead of built
    again (a pool is a value of its slices; its devices' ``order`` is shifted where pools before it
    changed in size), so a rebuild after one slice changed builds that pool only.
    """

    def __init__(
        self,
        slices: Iterable[ResourceSlice],
        *,
        partitionable_devices: bool = True,
        previous: Inventory | None = None,
    ) -> None:
        by_pool: dict[tuple[str, str], list[ResourceSlice]] = {}
        for s in slices:
            by_pool.setdefault((s.spec.driver, s.spec.pool.name), []).append(s)
        self.partitionable_devices = partitionable_devices
        # per pool, the slices it was built from (by name): what ``previous`` compares by identity
        self._sources: dict[tuple[str, str], tuple[ResourceSlice, ...]] = {}
        self.pools: dict[tuple[str, str], Pool] = {}
        self.devices: dict[DeviceKey, InventoryDevice] = {}
        self._local: dict[str, list[InventoryDevice]] = {}
        self._floating: list[InventoryDevice] = []  # nodeSelector / allNodes devices
        self._node_cache: dict[str, tuple[InventoryDevice, ...]] = {}
        self._free_stats: dict[str, tuple[bool, bool, int]] = {}
        self._scoped: dict[str, bool] = {}  # ``node_scoped`` per node name
        self._pool_nodes: dict[tuple[str, str], set[str | None]] | None = None
        self._partitionable = partitionable_devices
        self._unusable_cache: dict[str, tuple[Pool, ...]] = {}
        order = 0
        if previous is not None and previous.partitionable_devices != partitionable_devices:
            previous = None
        for pool_key in sorted(by_pool):
            src = tuple(sorted(by_pool[pool_key], key=lambda s: s.name))
            self._sources[pool_key] = src
            pool = previous._taken_over(pool_key, src, order) if previous is not None else None
            if pool is None:
                pool, order = self._build_pool(pool_key, by_pool[pool_key], order, partitionable_devices)
            else:
                order += len(pool.devices)
            self.pools[pool_key] = pool
            for d in pool.devices:
                self.devices.setdefault(d.key, d)
                if d.node_name is not None and not d.all_nodes:
                    self._local.setdefault(d.node_name, []).append(d)
                elif d.all_nodes or d.node_selector is not None:
                    self._floating.append(d)
        self.counters: dict[CounterKey, Fraction] = {}
        for p in self.pools.values():
            self.counters.update(p.counters)
        self._unusable = tuple(p for _, p in sorted(self.pools.items()) if not p.usable)

    # ---- construction ------------------------------------------------------------------
    @staticmethod
    def _build_pool(
        pool_key: tuple[str, str], slices: list[ResourceSlice], order: int, partitionable: bool
    ) -> tuple[Pool, int]:
        driver, pool_name = pool_key
        generation = max(s.spec.pool.generation for s in slices)
        current = sorted((s for s in slices if s.spec.pool.generation == generation), key=lambda s: s.name)
        count = max(s.spec.pool.resource_slice_count for s in current)
        complete = len(current) >= count
        invalid: str | None = None
        counters: dict[CounterKey, Fraction] = {}
        set_names: set[str] = set()
        if partitionable:
            for s in current:
                for cs in s.spec.shared_counters or []:
                    if cs.name in set_names:
                        invalid = invalid or f"duplicate counter set name {cs.name!r}"
                    set_names.add(cs.name)
                    for cname, c in cs.counters.items():
                        counters[(driver, pool_name, cs.name, cname)] = c.value.value
        devices: list[InventoryDevice] = []
        names: set[str] = set()
        for s in current:
            per_device = bool(s.spec.per_device_node_selection)
            for dev in s.spec.devices:
                if dev.name in names:
                    invalid = invalid or f"duplicate device name {dev.name!r}"
                names.add(dev.name)
                consumes: list[tuple[CounterKey, Fraction]] = []
                if partitionable:
                    for cc in dev.consumes_counters or []:
                        if cc.counter_set not in set_names:
                            invalid = invalid or (
                                f"device {dev.name!r} consumes counters from unknown counter set "
                                f"{cc.counter_set!r}"
                            )
                        for cname, c in cc.counters.items():
                            ck = (driver, pool_name, cc.counter_set, cname)
                            if cc.counter_set in set_names and ck not in counters:
                                invalid = invalid or (
                                    f"device {dev.name!r} consumes unknown counter {cname!r} of "
                                    f"counter set {cc.counter_set!r}"
                                )
                            consumes.append((ck, c.value.value))
                if per_device:
                    node_name, node_sel, all_nodes = dev.node_name, dev.node_selector, bool(dev.all_nodes)
                else:
                    node_name, node_sel, all_nodes = (
                        s.spec.node_name,
                        s.spec.node_selector,
                        bool(s.spec.all_nodes),
                    )
                multi = bool(dev.allow_multiple_allocations)
                cel_input, flat = _cel_input(dev, driver, multi)
                caps = {attribute_key(n, driver): (n, c) for n, c in (dev.capacity or {}).items()}
                devices.append(
                    InventoryDevice(
                        key=(driver, pool_name, dev.name),
                        order=order,
                        generation=generation,
                        device=dev,
                        slice_name=s.name,
                        node_name=node_name or None,
                        node_selector=node_sel,
                        all_nodes=all_nodes,
                        cel=cel_input,
                        attributes=flat,
                        capacity=caps,
                        taints=tuple(dev.taints or ()),
                        consumes=tuple(consumes),
                        multi=multi,
                        binds_to_node=bool(dev.binds_to_node),
                        uses_counters=bool(dev.consumes_counters),
                        pool_ok=False,  # fixed below once validity is known
                    )
                )
                order += 1
        ok = complete and invalid is None
        if ok:
            devices = [_with_pool_ok(d) for d in devices]
        pool = Pool(
            driver=driver,
            name=pool_name,
            generation=generation,
            slice_names=tuple(s.name for s in current),
            resource_slice_count=count,
            complete=complete,
            invalid=invalid,
            counters=counters,
            devices=tuple(devices),
            slices=tuple(current),
        )
        return pool, order

    def _taken_over(
        self, pool_key: tuple[str, str], src: tuple[ResourceSlice, ...], order: int
    ) -> Pool | None:
        """This inventory's pool built from exactly these slices, its devices ordered from ``order``
        (None: it was built from others)."""
        old = self._sources.get(pool_key)
        if old is None or len(old) != len(src) or any(a is not b for a, b in zip(old, src, strict=True)):
            return None
        pool = self.pools[pool_key]
        if not pool.devices or pool.devices[0].order == order:
            return pool
        shift = order - pool.devices[0].order
        return replace(pool, devices=tuple(replace(d, order=d.order + shift) for d in pool.devices))

    # ---- queries -------------------------------------------------------------------------
    def devices_on(self, node: Node | None) -> tuple[InventoryDevice, ...]:
        """Devices usable from ``node`` (node-local, selected by the node's labels, or all-nodes), in
        inventory order, except that the pools with a device with binding conditions here come after
        the others (as upstream's ``GatherPools`` orders them, pools_incubating.go v0.36.2)."""
        cache_key = node.name if node is not None else ""
        hit = self._node_cache.get(cache_key)
        if hit is not None:
            return hit
        out = list(self._local.get(node.name, ())) if node is not None else []
        out.extend(d for d in self._floating if d.on_node(node))
        out.sort(key=lambda d: d.order)
        late = {d.key[:2] for d in out if d.device.binding_conditions}
        if late:
            out.sort(key=lambda d: d.key[:2] in late)  # stable: inventory order within each part
        result = tuple(out)
        self._node_cache[cache_key] = result
        return result

    def unusable_pools_on(self, node: Node | None) -> tuple[Pool, ...]:
        """The incomplete or invalid pools a pod on ``node`` sees (a slice of the pool's current
        generation reaches the node: ``slice_reaches``), by (driver, pool): an ``All`` request there
        is an error, whatever its class, as upstream (``validateDeviceRequest`` in
        structured/internal/incubating/allocator_incubating.go, v0.36.2). Cached per node name."""
        if not self._unusable:
            return ()
        key = node.name if node is not None else ""
        hit = self._unusable_cache.get(key)
        if hit is None:
            hit = tuple(
                p
                for p in self._unusable
                if any(slice_reaches(s, node, self._partitionable) for s in p.slices)
            )
            self._unusable_cache[key] = hit
        return hit

    def _node_stats(self, node: Node | None) -> tuple[bool, bool, int]:
        """(reaches a multi-allocation device, simple, devices usable from the node): simple when
        every device is node-local to this node and published once (then the node's taken devices
        are ``Usage.node_taken``)."""
        name = node.name if node is not None else ""
        stats = self._free_stats.get(name)
        if stats is None:
            devs = self.devices_on(node)
            keys = [d.key for d in devs]
            local = self._local.get(name, ()) if node is not None else ()
            simple = (
                len(set(keys)) == len(keys)
                and len(devs) == len(local)
                and all(self.devices.get(d.key) is d for d in devs)
            )
            stats = (any(d.multi for d in devs), simple, len(devs))
            self._free_stats[name] = stats
        return stats

    def node_scoped(self, node: Node | None) -> bool:
        """Whether every device usable from ``node`` is node-local to it and of a pool all of whose
        devices are on it: then only releases on this node (``Usage.node_epochs``) can make more fit
        here (a device's counters are its pool's). Cached per node name."""
        if node is None:
            return False
        hit = self._scoped.get(node.name)
        if hit is None:
            if self._pool_nodes is None:
                nodes: dict[tuple[str, str], set[str | None]] = {}
                for d in self.devices.values():
                    nodes.setdefault(d.key[:2], set()).add(None if d.all_nodes else d.node_name)
                self._pool_nodes = nodes
            pools = self._pool_nodes
            hit = self._scoped[node.name] = all(
                d.node_name == node.name and not d.all_nodes and pools.get(d.key[:2]) == {node.name}
                for d in self.devices_on(node)
            )
        return hit

    def simple_devices(self, node: Node | None) -> int | None:
        """The devices usable from ``node`` when ``free_on`` is their number minus the node's
        ``Usage.node_taken`` (a simple node reaching no multi-allocation device), else None."""
        multi, simple, total = self._node_stats(node)
        return total if simple and not multi else None

    def free_on(self, node: Node | None, usage: Usage) -> int | None:
        """How many devices usable from ``node`` are not taken in ``usage``; None when the node
        reaches a device that allows multiple allocations (no bound from counting)."""
        name = node.name if node is not None else ""
        multi, simple, total = self._node_stats(node)
        if multi:
            return None
        if simple:
            # every device is node-local to this node, published once: the taken ones are counted
            return total - usage.node_taken.get(name, 0)
        return sum(1 for d in self.devices_on(node) if not usage.is_taken(d.key))

    def index_free(self, usage: Usage, nodes: Sequence[Node], block_shift: int = FREE_BLOCK_SHIFT) -> None:
        """Build ``usage``'s free-device index over ``nodes`` in this order (see ``Usage``): block b
        holds ``nodes[b << block_shift:(b + 1) << block_shift]``. Rebuild it after changing which
        nodes there are; take/give_back keep it in step."""
        size = 1 << block_shift
        node_block: dict[str, int] = {}
        block_free: list[int] = []
        unique = len({n.name for n in nodes}) == len(nodes)  # a name twice: one count, two places
        for b, lo in enumerate(range(0, len(nodes), size)):
            members = nodes[lo : lo + size]
            stats = [self._node_stats(n) for n in members]
            if unique and all(simple and not multi for multi, simple, _ in stats):
                taken = usage.node_taken
                block_free.append(
                    sum(s[2] - taken.get(n.name, 0) for n, s in zip(members, stats, strict=True))
                )
                node_block.update((n.name, b) for n in members)
            else:
                block_free.append(_NEVER_SHORT)
        usage.node_block = node_block
        usage.block_free = block_free
        usage.block_shift = block_shift

    def node_names(self) -> list[str]:
        """Every node name a slice or device names."""
        return sorted(self._local)

    def usage(self, allocated: Sequence[ResourceClaim]) -> Usage:
        """What the allocations of in-use claims take (adminAccess results take nothing)."""
        u = Usage()
        for claim in allocated:
            self.take_allocation(u, claim)
        return u

    def picks_of(self, claim: ResourceClaim) -> list[Pick]:
        """The picks an allocated claim holds (devices no longer published still count as taken)."""
        alloc = claim.status.allocation
        if alloc is None or alloc.devices is None:
            return []
        out: list[Pick] = []
        for r in alloc.devices.results or []:
            key = (r.driver, r.pool, r.device)
            dev = self.devices.get(key)
            if dev is None:
                dev = _ghost(key)
            caps: tuple[tuple[str, Fraction], ...] = ()
            if dev.multi:
                caps = tuple(
                    (attribute_key(n, r.driver), q.value) for n, q in (r.consumed_capacity or {}).items()
                )
            out.append(Pick(dev, r.request, bool(r.admin_access), dev.consumes, caps))
        return out

    def take_allocation(self, usage: Usage, claim: ResourceClaim) -> None:
        for p in self.picks_of(claim):
            usage.take(p)

    def give_back_allocation(self, usage: Usage, claim: ResourceClaim) -> None:
        for p in self.picks_of(claim):
            usage.give_back(p)


def _with_pool_ok(d: InventoryDevice) -> InventoryDevice:
    return replace(d, pool_ok=True)


def _ghost(key: DeviceKey) -> InventoryDevice:
    """A device an allocation names but no current slice publishes: it stays taken."""
    return InventoryDevice(
        key=key,
        order=-1,
        generation=-1,
        device=Device(name=key[2]),
        slice_name="",
        node_name=None,
        node_selector=None,
        all_nodes=False,
        cel=DeviceInput(driver=key[0], attributes={}, capacity={}),
        attributes={},
        capacity={},
        taints=(),
        consumes=(),
        multi=False,
        binds_to_node=False,
        uses_counters=False,
        pool_ok=False,
    )
