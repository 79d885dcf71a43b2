"""``ClusterCache``: the cluster as placement sees it, kept in place by deltas (Kueue's pkg/cache).

The controller's informers (and the simulator, from its scenario) hand every change of a Node,
ResourceSlice, DeviceClass, ResourceClaim, ResourceClaimTemplate or Pod to :meth:`ClusterCache.apply`
(``old``, ``new``; ``new`` None on delete). The cache keeps the objects and one long-lived
:class:`~queueing.scheduling.dra_placer.DraPlacer` (inventory, device usage, per-node used resources,
the allocator with its CEL candidate lists) in step with them; a scheduling cycle takes it from
:meth:`ClusterCache.placer` and never rebuilds it. What a change costs:

* a claim (added, allocated, deallocated, deleted): what it takes is given back and taken again
  (``DraPlacer.set_claim``), in proportion to its devices;
* a pod: its node's used cpu/memory/pods and extended resources (``DraPlacer.set_pod``). Pods that
  queueing manages (they carry one of ``managed_labels``) are not counted: the plans of their
  admitted workloads hold those resources; every other pod (DaemonSets, system pods, other teams'
  pods) is, while bound and not finished;
* a template: replaced in place (what is derived from a template is checked against it by identity);
* a node, slice or class whose placement-relevant content changed (labels, spec, allocatable; a
  slice's or class's spec): the placer is rebuilt on the next :meth:`placer`, with the same
  :class:`~queueing.dra.allocator.SelectorCache`, so CEL selectors are still evaluated at most once
  per (selector, device, pool generation), taking over from the placer before it every inventory
  pool built from the same slices and the allocatable of the same Node objects (a slice change
  builds that pool only). An update that changes none of these (a status
  heartbeat, a resourceVersion) costs nothing.

"Assume": the devices of every admission the caller holds (:meth:`sync_holds`, with what the
caller committed, before any watch echoes it) are held by plans, so a per-pod claim allocated with
one of them is not counted again (evicting its workload frees them for the eviction planner);
claims that only the placer should see (devices held after a release, see the controller) come in
through :meth:`set_extra_claims`.

Verify mode (``verify=True``, Invariant 6): every :meth:`placer` also builds the placer from scratch
from the same objects and raises :class:`CacheMismatch` on any difference (:func:`differences`).

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from fractions import Fraction
from typing import Any

from queueing.api.base import KubeObject
from queueing.api.core import Node, Pod
from queueing.api.resource import DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice
from queueing.dra.allocator import SelectorCache
from queueing.dra.features import Features
from queueing.scheduling.dra_placer import DraPlacer, DraState

__all__ = ["CacheMismatch", "ClusterCache", "differences"]

DeviceKey = tuple[str, str, str]


class CacheMismatch(AssertionError):
    """The incremental state differs from the state built from scratch (verify mode)."""


def _node_view(n: Node) -> tuple[object, ...]:
    return (n.metadata.labels, n.spec, n.allocatable)


class ClusterCache:
    def __init__(
        self,
        *,
        features: Features | None = None,
        selectors: SelectorCache | None = None,
        managed_labels: Collection[str] = (),
        verify: bool = False,
    ) -> None:
        self.features = features
        self.selectors = selectors if selectors is not None else SelectorCache()
        self.managed_labels = tuple(managed_labels)
        self.verify = verify
        self.nodes: dict[str, Node] = {}
        self.slices: dict[str, ResourceSlice] = {}
        self.classes: dict[str, DeviceClass] = {}
        self.claims: dict[str, ResourceClaim] = {}
        self.templates: dict[str, ResourceClaimTemplate] = {}
        self.pods: dict[str, Pod] = {}  # every pod (the light projection the caller feeds)
        self.rebuilds = 0  # how often the placer was built (for tests and benchmarks)
        # counts the changes of what the placer answers from (a memo bound to the placer compares it)
        self.changes = 0
        self._placer: DraPlacer | None = None
        self._previous: DraPlacer | None = None  # the placer dropped last (its pools are taken over)
        # what the placer is given: claims it counts (key -> claim) and pods it counts
        self._shown: dict[str, ResourceClaim] = {}
        self._extra: dict[str, ResourceClaim] = {}  # see ``set_extra_claims``
        # holds (see ``sync_holds``): holder -> its devices; device -> holders; the per-pod
        # allocated claims on each device (those a hold hides)
        self._holds: dict[str, frozenset[DeviceKey]] = {}
        self._hold_of: dict[str, object] = {}  # holder -> the object its devices came from
        self._holders: dict[DeviceKey, int] = {}
        self._per_pod_on: dict[DeviceKey, set[str]] = {}

    # ---- deltas -----------------------------------------------------------------------------
    def apply(self, old: KubeObject | None, new: KubeObject | None) -> None:
        """One informer delta: ``old`` -> ``new`` (None: added / deleted)."""
        obj = new if new is not None else old
        if obj is None:
            return
        if isinstance(obj, Pod):
            self._pod(obj.key, new if isinstance(new, Pod) else None)
        elif isinstance(obj, ResourceClaim):
            self._claim(obj.key, new if isinstance(new, ResourceClaim) else None)
        elif isinstance(obj, ResourceClaimTemplate):
            self._template(obj.key, new if isinstance(new, ResourceClaimTemplate) else None)
        elif isinstance(obj, Node):
            self._structural(self.nodes, obj.key, new if isinstance(new, Node) else None, _node_view)
        elif isinstance(obj, ResourceSlice):
            self._structural(self.slices, obj.key, new if isinstance(new, ResourceSlice) else None, _spec)
        elif isinstance(obj, DeviceClass):
            self._structural(self.classes, obj.key, new if isinstance(new, DeviceClass) else None, _spec)
        else:
            raise TypeError(
                f"ClusterCache.apply: {type(obj).__name__} {obj.key} is not a kind the cache keeps"
            )

    def add_all(self, objects: Iterable[KubeObject]) -> None:
        """Every object as added (a LIST, or a scenario's cluster)."""
        for o in objects:
            self.apply(None, o)

    def _structural(
        self,
        store: dict[str, Any],
        key: str,
        new: KubeObject | None,
        view: Callable[[Any], object],
    ) -> None:
        old = store.get(key)
        if new is None:
            if old is None:
                return
            del store[key]
        else:
            store[key] = new
            if old is not None and view(old) == view(new):
                return  # nothing placement reads changed
        self._drop_placer()

    def _drop_placer(self) -> None:
        self.changes += 1
        if self._placer is not None:
            self._previous = self._placer
        self._placer = None

    def _template(self, key: str, new: ResourceClaimTemplate | None) -> None:
        if new is None:
            if self.templates.pop(key, None) is None:
                return
        else:
            self.templates[key] = new
        self.changes += 1
        if self._placer is not None:
            self._placer.set_template(key, new)

    def _pod(self, key: str, new: Pod | None) -> None:
        old = self.pods.get(key)
        if new is None:
            if old is None:
                return
            del self.pods[key]
        else:
            self.pods[key] = new
        was, now = old is not None and self._counted(old), new is not None and self._counted(new)
        if was or now:
            self.changes += 1
        if self._placer is not None and (was or now):
            self._placer.set_pod(key, new if now else None)

    def _counted(self, pod: Pod) -> bool:
        """Whether the placer counts the pod: not managed by queueing (see the module docstring)."""
        labels = pod.metadata.labels
        return not (labels and any(k in labels for k in self.managed_labels))

    # ---- claims and holds -------------------------------------------------------------------
    def _claim(self, key: str, new: ResourceClaim | None) -> None:
        old = self.claims.get(key)
        if old is not None:
            for d in _per_pod_devices(old):
                on = self._per_pod_on.get(d)
                if on is not None:
                    on.discard(key)
                    if not on:
                        del self._per_pod_on[d]
        if new is None:
            self.claims.pop(key, None)
        else:
            self.claims[key] = new
            for d in _per_pod_devices(new):
                self._per_pod_on.setdefault(d, set()).add(key)
        self._refresh(key)

    def _visible(self, key: str) -> ResourceClaim | None:
        extra = self._extra.get(key)
        if extra is not None:
            return extra
        c = self.claims.get(key)
        if c is None:
            return None
        if self._holders and any(d in self._holders for d in _per_pod_devices(c)):
            return None  # a plan holds its devices
        return c

    def _refresh(self, key: str) -> None:
        want = self._visible(key)
        if self._shown.get(key) is want:
            return
        if want is None:
            del self._shown[key]
        else:
            self._shown[key] = want
        self.changes += 1
        if self._placer is not None:
            self._placer.set_claim(key, want)

    def hold(self, holder: str, devices: Iterable[DeviceKey]) -> None:
        """``holder`` (an admission) holds these devices through its plan (replacing what it held)."""
        self._set_hold(holder, frozenset(devices))

    def release(self, holder: str) -> None:
        self._set_hold(holder, frozenset())
        self._hold_of.pop(holder, None)

    def sync_holds(
        self, holders: Mapping[str, object], devices_of: Callable[[Any], Iterable[DeviceKey]]
    ) -> None:
        """Hold what ``holders`` (holder -> object, e.g. admission UID -> status.admission) hold,
        by the difference to the last call: an object is looked at again only when it is another
        object (compared by identity)."""
        for h in [h for h in self._hold_of if h not in holders]:
            self.release(h)
        for h, obj in holders.items():
            if self._hold_of.get(h) is not obj:
                self._hold_of[h] = obj
                self.hold(h, devices_of(obj))

    def _set_hold(self, holder: str, devices: frozenset[DeviceKey]) -> None:
        old = self._holds.get(holder, frozenset())
        if old == devices:
            return
        if devices:
            self._holds[holder] = devices
        else:
            self._holds.pop(holder, None)
        touched: set[str] = set()
        for d in old - devices:
            n = self._holders[d] - 1
            if n:
                self._holders[d] = n
            else:
                del self._holders[d]
                touched |= self._per_pod_on.get(d, set())
        for d in devices - old:
            n = self._holders.get(d, 0)
            self._holders[d] = n + 1
            if not n:
                touched |= self._per_pod_on.get(d, set())
        for key in sorted(touched):
            self._refresh(key)

    def set_extra_claims(self, claims: Iterable[ResourceClaim]) -> None:
        """Claims only the placer sees, besides the cluster's (replacing the last set). Their
        devices are held too (a per-pod claim on one of them is not counted again)."""
        fresh = {c.key: c for c in claims}
        keys = self._extra.keys() | fresh.keys()
        for key in sorted(keys):
            old, new = self._extra.get(key), fresh.get(key)
            if old is not None and new is not None and old == new:
                continue
            if new is None:
                del self._extra[key]
            else:
                self._extra[key] = new
            self._set_hold(f"extra:{key}", frozenset(_devices(new)) if new is not None else frozenset())
            self._refresh(key)

    # ---- reading ----------------------------------------------------------------------------
    def placer(self) -> DraPlacer:
        """The placer in step with every delta so far (built when none is, else the same one)."""
        if self._placer is None:
            self._placer = self._build(self._previous)
            self._previous = None
            self.rebuilds += 1
        elif self.verify:
            self.check()
        return self._placer

    def from_scratch(self) -> DraPlacer:
        """A placer built from the objects as they are now (what the incremental one must equal)."""
        return self._build(None)

    def _build(self, previous: DraPlacer | None) -> DraPlacer:
        return DraPlacer(
            list(self.nodes.values()),
            list(self.slices.values()),
            list(self.classes.values()),
            claims=[self._shown[k] for k in sorted(self._shown)],
            templates=list(self.templates.values()),
            pods=[p for p in self.pods.values() if self._counted(p)],
            features=self.features,
            cache=self.selectors,
            previous=previous,
            verify=self.verify,
        )

    def check(self) -> None:
        """Verify mode's check: raise :class:`CacheMismatch` when the placer kept in place differs
        from one built from scratch (its held plans are taken back first)."""
        if self._placer is None:
            return
        diff = differences(self._placer, self.from_scratch())
        if diff:
            raise CacheMismatch("cluster cache differs from a rebuild: " + "; ".join(diff[:10]))


def _spec(o: Any) -> object:
    return o.spec


def _devices(c: ResourceClaim) -> list[DeviceKey]:
    alloc = c.status.allocation
    if alloc is None or alloc.devices is None:
        return []
    return [(r.driver, r.pool, r.device) for r in alloc.devices.results or []]


def _per_pod_devices(c: ResourceClaim) -> list[DeviceKey]:
    """The devices of an allocated claim owned by a pod (one a held plan may account for)."""
    if not any(o.kind == "Pod" for o in c.metadata.owner_references or []):
        return []
    return _devices(c)


def _norm(d: Mapping[Any, Any]) -> dict[Any, Any]:
    return {k: v for k, v in d.items() if v}


def _devices_of(p: DraPlacer) -> list[tuple[object, ...]]:
    inv = p.cluster.inventory
    return [
        (k, d.order, d.generation, d.pool_ok, d.node_name, d.slice_name, d.device)
        for k, d in sorted(inv.devices.items())
    ]


def _pools_of(p: DraPlacer) -> list[tuple[object, ...]]:
    inv = p.cluster.inventory
    return [
        (k, q.generation, q.slice_names, q.complete, q.invalid, dict(q.counters), len(q.devices))
        for k, q in sorted(inv.pools.items())
    ]


def differences(a: DraPlacer, b: DraPlacer) -> list[str]:
    """What differs between two placers' views of the cluster without held plans (both are synced
    to the empty state): inventory, claims, templates, pods, device usage, node resources used, the
    free-device counts per node. Empty when they are equal by value."""
    a.sync(DraState())
    b.sync(DraState())
    ca, cb = a.cluster, b.cluster
    out: list[str] = []

    def cmp(what: str, x: object, y: object) -> None:
        if x != y:
            out.append(f"{what}: {x!r} != {y!r}"[:400])

    cmp("nodes", ca.node_names, cb.node_names)
    cmp("devices", _devices_of(a), _devices_of(b))
    cmp("pools", _pools_of(a), _pools_of(b))
    cmp("classes", sorted(ca.allocator.classes), sorted(cb.allocator.classes))
    cmp("claims", {k: c for k, c in ca.claims.items()}, {k: c for k, c in cb.claims.items()})
    cmp("templates", ca.templates, cb.templates)
    cmp("pods", sorted(ca.pods), sorted(cb.pods))
    ua, ub = ca.usage, cb.usage
    cmp("usage.devices", _norm(ua.devices), _norm(ub.devices))
    cmp("usage.counters", _norm(ua.counters), _norm(ub.counters))
    cmp("usage.capacity", _norm(ua.capacity), _norm(ub.capacity))
    cmp("usage.node_taken", _norm(ua.node_taken), _norm(ub.node_taken))
    cmp("usage.block_free", ua.block_free, ub.block_free)
    zero = Fraction(0)
    for name, x, y in zip(ca.node_names, ca.used, cb.used, strict=False):
        if {k: v for k, v in x.items() if v != zero} != {k: v for k, v in y.items() if v != zero}:
            out.append(f"node {name} used: {x} != {y}")
    return out
