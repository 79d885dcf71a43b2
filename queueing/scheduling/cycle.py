"""One scheduling cycle: ``run_cycle(snapshot, placer, now, config) -> CycleResult``.

Pure: the same snapshot, placer state and ``now`` always give the same result. The shell
executes the result (admissions, evictions) and builds the next snapshot.

What a cycle does:

1. Builds the quota tree (inactive ClusterQueues: cohort cycles, stopPolicy, missing flavors) and
   charges every admitted workload; asks the placer for the state with their placements.
2. ``stopPolicy: HoldAndDrain`` on a ClusterQueue or LocalQueue evicts its admitted workloads.
3. Puts eligible pending workloads in their ClusterQueue's queue (priority, then time; with
   admission fair sharing first the LocalQueue's decayed usage).
4. Repeatedly takes the best head over all ClusterQueues (fair sharing: lowest dominant resource
   share with the workload admitted, top-down through the cohort tree; otherwise non-borrowing
   first, then priority, then time) and tries to admit it: quota and gang placement on the state
   with everything admitted or planned so far. An admitted head is replaced by the next workload
   of its queue, so several workloads per ClusterQueue can be admitted in one cycle.
5. A head that does not fit gets, in this order: a preemption plan (if the policies allow one
   that makes it fit), partial admission down to ``minCount``, or a pending reason. BestEffortFIFO
   moves on to the next workload; StrictFIFO blocks the queue for the rest of the cycle.
   Resources of a preemptor are reserved for the rest of the cycle (its victims still hold
   theirs until they are gone). In later cycles the preemptor is *nominated*
   (``ClusterSnapshot.nominated``, the shell's record of whose last reason was Preempting): it
   goes before every other workload, so that what its victims free is not taken by another
   workload of the cohort (quota) or of any cohort (devices: all share the nodes) — otherwise
   the victims would have been evicted for nothing, and preemptions could chase each other.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from queueing.scheduling.assign import Assigner, Assignment, ShapeCache
from queueing.scheduling.backlog import Backlog
from queueing.scheduling.config import SchedulingConfig
from queueing.scheduling.fairshare import share_key
from queueing.scheduling.ordering import entry_penalty, usage_by_resource, weighted_usage
from queueing.scheduling.placer import Placer
from queueing.scheduling.preemption import CohortState, PlanMemo, PreemptionPlan, plan_preemption
from queueing.scheduling.quota import QuotaTree
from queueing.scheduling.reasons import Why
from queueing.scheduling.snapshot import (
    AdmittedWorkload,
    ClusterQueueSpec,
    ClusterSnapshot,
    FlavorResource,
    FlavorSpec,
    LocalQueueSpec,
    WorkloadInfo,
)
from queueing.scheduling.verify import checked

__all__ = [
    "Admission",
    "CycleMemo",
    "CycleResult",
    "Eviction",
    "PendingReason",
    "PendingReasons",
    "inactive_cluster_queues",
    "run_cycle",
]


@dataclass(frozen=True)
class Admission:
    workload: WorkloadInfo
    cluster_queue: str
    assignment: Assignment

    @property
    def key(self) -> str:
        return self.workload.key

    @property
    def partial(self) -> bool:
        return any(self.assignment.counts.get(p.name, p.count) < p.count for p in self.workload.pod_sets)

    def admitted(self, now: float) -> AdmittedWorkload:
        """The record to put in the next snapshot once the shell has executed the admission."""
        return AdmittedWorkload(
            workload=self.workload,
            cluster_queue=self.cluster_queue,
            usage=self.assignment.usage,
            admission_time=now,
            placement=self.assignment.placement,
            counts=self.assignment.counts,
        )


@dataclass(frozen=True)
class Eviction:
    key: str
    cluster_queue: str
    reason: str  # ClusterQueueStopped / LocalQueueStopped
    message: str


@dataclass(frozen=True)
class PendingReason:
    """Kueue-style QuotaReserved=False condition: reason and a message that says what blocks.
    One object may stand for every workload of a run (``PendingReasons.groups``): when the message
    names a workload's own pods or claims, ``why`` has it as data and ``message`` is its text for no
    workload in particular; :meth:`for_workload` gives the reason as written to one workload.
    Compared by value."""

    cluster_queue: str | None
    reason: str  # Pending | Inadmissible | Preempting | Backoff | Deactivated
    message: str
    why: Why | None = None

    def text_for(self, key: str) -> str:
        """The message for the workload ``key`` (``namespace/name``)."""
        return self.message if self.why is None else self.why.render(key)

    def for_workload(self, key: str) -> PendingReason:
        """This reason as written to the workload ``key``: its message names that workload's pods."""
        if self.why is None:
            return self
        return PendingReason(self.cluster_queue, self.reason, self.why.render(key), self.why)


class PendingReasons(Mapping[str, PendingReason]):
    """Workload key -> its pending reason, as written to that workload (``for_workload``). A reason
    often applies to a whole run of workloads (the rest of a run whose head did not fit): those are
    kept as one group and only indexed by key when looked up by key; ``groups()`` gives them as
    they are (one reason object per group, the same for every workload of it: render it with
    ``PendingReason.for_workload``), which is what a caller comparing with the previous cycle's
    reasons needs."""

    def __init__(self) -> None:
        self._one: dict[str, PendingReason] = {}
        self._groups: list[tuple[list[WorkloadInfo], PendingReason]] = []
        self._index: dict[str, PendingReason] | None = None

    def set(self, key: str, reason: PendingReason) -> None:
        self._one[key] = reason
        self._index = None

    def set_all(self, workloads: list[WorkloadInfo], reason: PendingReason) -> None:
        """The same reason for every workload of ``workloads`` (the list is kept: do not change it)."""
        if workloads:
            self._groups.append((workloads, reason))
            self._index = None

    def discard(self, key: str) -> None:
        if self._one.pop(key, None) is not None:
            self._index = None

    def groups(self) -> Iterator[tuple[Sequence[WorkloadInfo] | None, str | None, PendingReason]]:
        """``(workloads, None, reason)`` per group, ``(None, key, reason)`` per single entry."""
        for key, r in self._one.items():
            yield None, key, r
        for ws, r in self._groups:
            yield ws, None, r

    def _all(self) -> dict[str, PendingReason]:
        if self._index is None:
            idx: dict[str, PendingReason] = {}
            for ws, r in self._groups:
                idx.update(dict.fromkeys([w.key for w in ws], r))
            idx.update(self._one)
            self._index = idx
        return self._index

    def __getitem__(self, key: str) -> PendingReason:
        got = self._one.get(key)
        return (got if got is not None else self._all()[key]).for_workload(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


@dataclass(frozen=True)
class CycleResult:
    admissions: tuple[Admission, ...] = ()
    preemptions: tuple[PreemptionPlan, ...] = ()
    evictions: tuple[Eviction, ...] = ()
    pending: Mapping[str, PendingReason] = field(default_factory=dict)
    inactive_cluster_queues: Mapping[str, str] = field(default_factory=dict)
    # admission fair sharing entry penalties added this cycle (LocalQueue key -> resource -> amount)
    local_queue_penalties: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    cluster_queue_penalties: Mapping[str, Mapping[str, float]] = field(default_factory=dict)


_ZERO = Fraction(0)


def inactive_cluster_queues(snapshot: ClusterSnapshot, tree: QuotaTree | None = None) -> dict[str, str]:
    """ClusterQueue name -> why it is inactive (set inactive by the caller, on a cohort cycle, stopped,
    a flavor missing); only the queue objects of the snapshot matter."""
    if tree is None:
        tree = QuotaTree(snapshot.cluster_queues, snapshot.cohorts)
    flavors = {f.name for f in snapshot.flavors}
    out: dict[str, str] = {}
    for cq in snapshot.cluster_queues:
        if cq.name in snapshot.inactive:
            out[cq.name] = snapshot.inactive[cq.name]
        elif cq.name in tree.disabled:
            out[cq.name] = "CohortCycle: " + tree.disabled[cq.name]
        elif cq.stop_policy != "None":
            out[cq.name] = f"Stopped: stopPolicy is {cq.stop_policy}"
        else:
            missing = sorted({fq.name for g in cq.resource_groups for fq in g.flavors} - flavors)
            if missing:
                out[cq.name] = "FlavorNotFound: flavor(s) " + ", ".join(missing) + " not found"
    return out


class _Queue:
    """A ClusterQueue's pending workloads: its sorted runs (see ``backlog``), merged by a heap."""

    def __init__(self, runs: dict[str, list[WorkloadInfo]], key: Callable[[WorkloadInfo], tuple[Any, ...]]):
        self.key = key
        self.runs = runs  # only read: ``pos`` moves through them
        self.pos = dict.fromkeys(runs, 0)
        self.rekey()

    def rekey(self) -> None:
        self.heap = [
            (self.key(run[self.pos[s]]), s) for s, run in self.runs.items() if self.pos[s] < len(run)
        ]
        heapq.heapify(self.heap)

    def head(self) -> WorkloadInfo | None:
        if not self.heap:
            return None
        s = self.heap[0][1]
        return self.runs[s][self.pos[s]]

    def pop_head(self) -> None:
        _, s = heapq.heappop(self.heap)
        self.pos[s] += 1
        run = self.runs[s]
        if self.pos[s] < len(run):
            heapq.heappush(self.heap, (self.key(run[self.pos[s]]), s))

    def drop_head_kind(self) -> list[WorkloadInfo]:
        """Remove the head and the rest of its run (same signature, no higher priority)."""
        _, s = heapq.heappop(self.heap)
        rest = self.runs[s][self.pos[s] + 1 :]
        self.pos[s] = len(self.runs[s])
        return rest

    def drain(self) -> list[WorkloadInfo]:
        out = [w for s, run in self.runs.items() for w in run[self.pos[s] :]]
        for s, run in self.runs.items():
            self.pos[s] = len(run)
        self.heap = []
        return out


def _reduced_counts(wl: WorkloadInfo, k: int, steps: int) -> dict[str, int]:
    out = {}
    for ps in wl.pod_sets:
        if ps.min_count is not None and ps.min_count < ps.count:
            span = ps.count - ps.min_count
            out[ps.name] = ps.count - -(-span * k // steps)
        else:
            out[ps.name] = ps.count
    return out


class CycleMemo:
    """What a caller that runs cycle after cycle may keep between them so that a cycle can reuse
    what depends only on the queue objects (a cache: the result is the same without it). Entries
    are checked against the objects they were computed from (by identity)."""

    def __init__(self) -> None:
        # fit signature -> (ClusterQueue, flavors, the expected usage that orders heads)
        self.estimates: dict[
            str, tuple[ClusterQueueSpec, tuple[FlavorSpec, ...], dict[FlavorResource, Fraction]]
        ] = {}
        # derived shapes of (ClusterQueue, fit signature) for the Assigner, with the flavors they
        # were derived for
        self.shapes: ShapeCache = {}
        self.shapes_flavors: tuple[FlavorSpec, ...] | None = None
        # preemption questions that failed without a placement (bound to the queue objects, the
        # flavors, the configuration and the placer of the cycle)
        self.plans = PlanMemo()


def run_cycle(
    snapshot: ClusterSnapshot,
    placer: Placer[Any],
    now: float,
    config: SchedulingConfig | None = None,
    *,
    memo: CycleMemo | None = None,
) -> CycleResult:
    config = config or SchedulingConfig()
    flavors = {f.name: f for f in snapshot.flavors}
    cqs = {cq.name: cq for cq in snapshot.cluster_queues}
    lqs: dict[str, LocalQueueSpec] = {lq.key: lq for lq in snapshot.local_queues}
    tree = QuotaTree(snapshot.cluster_queues, snapshot.cohorts)
    inactive = inactive_cluster_queues(snapshot, tree)
    memo = memo or CycleMemo()
    if memo.shapes_flavors is not snapshot.flavors:
        memo.shapes = {}
        memo.shapes_flavors = snapshot.flavors
    assigner = Assigner(flavors, placer, memo.shapes, verify=config.verify)
    afs = config.admission_fair_sharing

    # ---- admitted workloads ----------------------------------------------------------------------
    admitted = list(snapshot.admitted)
    for a in admitted:
        if tree.has_cq(a.cluster_queue):
            tree.add_usage(a.cluster_queue, a.usage)
    state = placer.initial_state(admitted)

    # ---- draining ----------------------------------------------------------------------------------
    evictions: list[Eviction] = []
    draining: set[str] = set()
    for a in admitted:
        if a.evicting:
            continue
        cq = cqs.get(a.cluster_queue)
        lq = lqs.get(a.workload.queue_key)
        if cq is not None and cq.stop_policy == "HoldAndDrain":
            evictions.append(
                Eviction(
                    a.key,
                    a.cluster_queue,
                    "ClusterQueueStopped",
                    f"ClusterQueue {cq.name} is stopped (HoldAndDrain)",
                )
            )
            draining.add(a.key)
        elif lq is not None and lq.stop_policy == "HoldAndDrain":
            evictions.append(
                Eviction(
                    a.key,
                    a.cluster_queue,
                    "LocalQueueStopped",
                    f"LocalQueue {lq.key} is stopped (HoldAndDrain)",
                )
            )
            draining.add(a.key)
    candidates_pool: list[AdmittedWorkload] = [
        AdmittedWorkload(a.workload, a.cluster_queue, a.usage, a.admission_time, a.placement, a.counts, True)
        if a.key in draining
        else a
        for a in admitted
    ]

    # ---- queues ------------------------------------------------------------------------------------
    pending = PendingReasons()
    backlog = snapshot.backlog
    if backlog is None:
        backlog = Backlog(snapshot.pending, released=now)
    elif snapshot.pending:
        raise ValueError("ClusterSnapshot: pending workloads go either in pending or in backlog, not both")
    elif now < backlog.released:
        raise ValueError(f"the backlog was released up to t={backlog.released:g}s, after now (t={now:g}s)")
    elif any(
        w.active and w.backoff_until is not None and w.backoff_until <= now for w in backlog.held.values()
    ):
        backlog = Backlog(backlog, released=now)  # backoffs ended but not released: a released copy
    for wl in backlog.held.values():
        lq = lqs.get(wl.queue_key)
        cq_name = lq.cluster_queue if lq else None
        if not wl.active:
            pending.set(wl.key, PendingReason(cq_name, "Deactivated", "the workload is deactivated"))
        else:
            pending.set(
                wl.key, PendingReason(cq_name, "Backoff", f"requeue backoff until t={wl.backoff_until:g}s")
            )

    ns_ok: dict[tuple[str, str], bool] = {}

    def route(queue_key: str, namespace: str) -> str | PendingReason:
        """The ClusterQueue a LocalQueue's workloads queue in, or why they cannot."""
        lq = lqs.get(queue_key)
        if lq is None:
            return PendingReason(None, "Inadmissible", f"LocalQueue {queue_key} doesn't exist")
        if lq.stop_policy != "None":
            return PendingReason(lq.cluster_queue, "Inadmissible", f"LocalQueue {lq.key} is stopped")
        cq = cqs.get(lq.cluster_queue)
        if cq is None:
            return PendingReason(
                lq.cluster_queue, "Inadmissible", f"ClusterQueue {lq.cluster_queue} doesn't exist"
            )
        if cq.name in inactive:
            return PendingReason(
                cq.name, "Inadmissible", f"ClusterQueue {cq.name} is inactive: {inactive[cq.name]}"
            )
        sel_key = (cq.name, namespace)
        selected = ns_ok.get(sel_key)
        if selected is None:
            ns_labels = snapshot.namespaces.get(namespace, {})
            selected = cq.namespace_selector is not None and cq.namespace_selector.matches(ns_labels)
            ns_ok[sel_key] = selected
        if not selected:
            return PendingReason(
                cq.name,
                "Inadmissible",
                f"namespace {namespace} doesn't match the selector of ClusterQueue {cq.name}",
            )
        return cq.name

    # ClusterQueue -> its LocalQueues' runs (the backlog's lists, only read here)
    queues: dict[str, dict[str, list[WorkloadInfo]]] = {}
    for queue_key, runs in backlog.queues.items():
        to = route(queue_key, next(iter(runs.values()))[0].namespace)
        if isinstance(to, PendingReason):
            for run in runs.values():
                pending.set_all(list(run), to)
        else:
            queues.setdefault(to, {}).update(runs)

    # admission fair sharing: local copies of decayed usage, growing by entry penalties
    lq_usage: dict[str, dict[str, float]] = {k: dict(v) for k, v in snapshot.local_queue_usage.items()}
    cq_usage: dict[str, dict[str, float]] = {k: dict(v) for k, v in snapshot.cluster_queue_usage.items()}
    lq_pen: dict[str, dict[str, float]] = {}
    cq_pen: dict[str, dict[str, float]] = {}

    def lq_share(wl: WorkloadInfo) -> float:
        if afs is None:
            return 0.0
        lq = lqs[wl.queue_key]
        return weighted_usage(lq_usage.get(lq.key, {}), afs, lq.fair_weight)

    nominated = snapshot.nominated

    def within_key(cq: ClusterQueueSpec, wl: WorkloadInfo) -> tuple[int, float, int, float, str]:
        s = lq_share(wl) if (afs is not None and cq.admission_fair_sharing) else 0.0
        return (0 if wl.key in nominated else 1, s, -wl.priority, wl.order_time, wl.key)

    # expected usage for ordering across queues (first flavor combination, expected device charges);
    # the same for every workload of one fit signature (its queue, pod sets, selectors) in one
    # ClusterQueue with the same flavors (kept across cycles in ``memo``)
    est_cache = memo.estimates
    plan_memo = memo.plans
    plan_memo.bind(snapshot.cluster_queues, snapshot.cohorts, snapshot.flavors, config, placer)
    # per cohort tree (root node): its candidates (not taken) and their state for the plan memo, until
    # its usage or candidates change
    cohort_states: dict[str, tuple[list[AdmittedWorkload], CohortState]] = {}

    def derive_estimate(
        cq: ClusterQueueSpec, wl: WorkloadInfo, by: Assigner
    ) -> dict[FlavorResource, Fraction]:
        got: dict[FlavorResource, Fraction] = {}
        groups, err = by.relevant_groups(cq, wl)
        if not err:
            combos, err = by.combos(cq, wl, groups)
            if not err and combos:
                res_flavor, _ = by.flavor_map(cq, wl, combos[0], groups)
                got = by.regular_usage(cq, wl, {}, res_flavor, with_devices=True)
        return got

    def estimate(cq: ClusterQueueSpec, wl: WorkloadInfo) -> dict[FlavorResource, Fraction]:
        hit = est_cache.get(wl.fit_signature)
        if hit is not None and hit[0] is cq and hit[1] is snapshot.flavors:
            if config.verify:  # against a derivation without any cache
                checked(
                    "CycleMemo.estimates",
                    hit[2],
                    lambda: derive_estimate(cq, wl, Assigner(flavors, placer)),
                    f"ClusterQueue {cq.name}, workload {wl.key}",
                )
            return hit[2]
        got = derive_estimate(cq, wl, assigner)
        est_cache[wl.fit_signature] = (cq, snapshot.flavors, got)
        return got

    def head_key(cq: ClusterQueueSpec, wl: WorkloadInfo) -> tuple[Any, ...]:
        est = estimate(cq, wl)
        cohort_afs = 0.0
        if afs is not None and afs.cohort_level:
            cohort_afs = weighted_usage(cq_usage.get(cq.name, {}), afs, cq.fair_weight)
        first = 0 if wl.key in nominated else 1
        if config.fair_sharing.enable:
            return (first, share_key(tree, cq.name, est), cohort_afs, -wl.priority, wl.order_time, wl.key)
        borrows = 1 if tree.fit(cq.name, est).borrows else 0
        return (first, (), cohort_afs, borrows, -wl.priority, wl.order_time, wl.key)

    admissions: list[Admission] = []
    plans: list[PreemptionPlan] = []
    taken: set[str] = set()  # victims planned this cycle
    pool_by_root: dict[str, list[AdmittedWorkload]] | None = None
    qs = {
        name: _Queue(runs, (lambda w, c=cqs[name]: within_key(c, w)))  # type: ignore[misc]
        for name, runs in queues.items()
    }
    # the best head over all ClusterQueues: a heap of (head key, version, queue); an entry is
    # current while its version is the queue's. A queue's key is recomputed when its head changed
    # (``stale``) or the usage of a quota-tree node its key depends on changed (``dirty``); keys end
    # in the workload's key, so they are unique and the heap's top is the minimum over all queues
    # with a head. With fair sharing a key depends on the shares of the nodes on the queue's path
    # below the root (each from its own usage; what it could borrow is fixed by the quotas);
    # without, on whether it must borrow, which any usage in its cohort tree changes.
    stale: set[str] = set(queues)
    dirty: set[str] = set()

    def key_nodes(cq_name: str) -> list[str]:
        return tree.path(cq_name)[1:] if config.fair_sharing.enable else [tree.root_of(cq_name)]

    by_node: dict[str, list[str]] = {}
    for n in queues:
        for nid in key_nodes(n):
            by_node.setdefault(nid, []).append(n)
    heap: list[tuple[tuple[Any, ...], int, str]] = []
    version: dict[str, int] = {}

    def current(name: str) -> WorkloadInfo | None:
        return qs[name].head()

    def advance(name: str, failed: PendingReason | None = None) -> None:
        """Move past the head; ``failed``: the head did not fit and, as capacity only shrinks
        during a cycle, neither do the rest of its kind (same fit signature, no higher priority):
        they get the head's reason, which names no workload's objects but as ``why`` references
        (``config.verify``: each one's own reason is computed too and must be equal)."""
        q = qs[name]
        stale.add(name)
        if failed is not None:
            rest = q.drop_head_kind()
            if config.verify:
                verify_rest(cqs[name], rest, failed)
            pending.set_all(rest, failed)
        else:
            q.pop_head()
        if afs is not None and cqs[name].admission_fair_sharing:
            q.rekey()  # entry penalties changed the LocalQueue shares

    def verify_rest(cq: ClusterQueueSpec, rest: list[WorkloadInfo], failed: PendingReason) -> None:
        """The run shortcut's claim: none of ``rest`` fits now, and each one's own reason is
        ``failed`` (the pending reason a head gets when it fits neither whole nor partially)."""
        for w in rest:
            full_w = {ps.name: ps.count for ps in w.pod_sets}
            got = assigner.try_assign(cq, w, full_w, tree, state)
            own = PendingReason(cq.name, "Pending", got.message, got.why)
            if got.assignment is not None or own != failed:
                what = "fits" if got.assignment is not None else f"has its own reason {own!r}"
                raise RuntimeError(
                    f"verify: run shortcut: {w.key} (fit signature of the head) {what}; "
                    f"the head's reason was {failed!r}"
                )

    def block(name: str, head: WorkloadInfo) -> None:
        reason = PendingReason(
            name, "Pending", f"StrictFIFO: waiting behind {head.key} in ClusterQueue {name}"
        )
        pending.set_all([w for w in qs[name].drain() if w.key != head.key], reason)
        stale.add(name)

    def charge_afs(wl: WorkloadInfo, cq: str, usage: Mapping[FlavorResource, Fraction]) -> None:
        if afs is None:
            return
        pen = entry_penalty(usage_by_resource(usage), afs)
        for store, pens, k in ((lq_usage, lq_pen, wl.queue_key), (cq_usage, cq_pen, cq)):
            u = store.setdefault(k, {})
            p = pens.setdefault(k, {})
            for r, v in pen.items():
                u[r] = u.get(r, 0.0) + v
                p[r] = p.get(r, 0.0) + v

    while True:
        todo = stale
        stale = set()
        for nid in dirty:
            todo.update(by_node.get(nid, ()))
        dirty = set()
        for n in todo:
            v = version.get(n, 0) + 1
            version[n] = v
            head = current(n)
            if head is not None:
                heapq.heappush(heap, (head_key(cqs[n], head), v, n))
        while heap and heap[0][1] != version[heap[0][2]]:
            heapq.heappop(heap)
        if not heap:
            break
        name = heap[0][2]
        cq = cqs[name]
        picked = current(name)
        assert picked is not None
        wl = picked
        full = {ps.name: ps.count for ps in wl.pod_sets}
        out = assigner.try_assign(cq, wl, full, tree, state)
        if out.assignment is not None:
            fit = out.assignment
            tree.add_usage(name, fit.usage)
            cohort_states.pop(tree.root_of(name), None)
            state = placer.add(state, wl.key, fit.placement)
            admissions.append(Admission(wl, name, fit))
            charge_afs(wl, name, fit.usage)
            pending.discard(wl.key)
            dirty.update(key_nodes(name))
            advance(name)
            continue
        if not out.hard and out.preemptible:
            root = tree.root_of(name)
            if pool_by_root is None:  # the candidates by cohort tree, once per cycle
                pool_by_root = {}
                root_of: dict[str, str] = {}
                for c in candidates_pool:
                    croot = root_of.get(c.cluster_queue)
                    if croot is None:
                        if not tree.has_cq(c.cluster_queue):
                            continue
                        croot = root_of[c.cluster_queue] = tree.root_of(c.cluster_queue)
                    pool_by_root.setdefault(croot, []).append(c)
            entry = cohort_states.get(root)
            if entry is None:
                pool = [c for c in pool_by_root.get(root, ()) if c.key not in taken]
                entry = cohort_states[root] = (pool, plan_memo.state(tree, root, pool))
            elif config.verify:  # the kept pool and state are what they would be built afresh
                fresh = [c for c in pool_by_root.get(root, ()) if c.key not in taken]
                checked(
                    "run_cycle cohort state (pool, CohortState)",
                    ([c.key for c in entry[0]], entry[1].id),
                    lambda f=fresh, r=root: ([c.key for c in f], plan_memo.state(tree, r, f).id),  # type: ignore[misc]
                    f"cohort tree {root}",
                )
            pool, cohort = entry
            plan = plan_preemption(
                wl,
                cq,
                full,
                out.preemptible,
                tree,
                state,
                pool,
                assigner,
                placer,
                config,
                cqs,
                memo=plan_memo,
                cohort=cohort,
            )
            if plan is not None:
                plans.append(plan)
                taken.update(v.key for v in plan.victims)
                tree.add_usage(name, plan.assignment.usage)
                cohort_states.pop(root, None)
                state = placer.add(state, wl.key, plan.assignment.placement)
                pending.set(wl.key, PendingReason(name, "Preempting", plan.message))
                dirty.update(key_nodes(name))
                if cq.queueing_strategy == "StrictFIFO":
                    block(name, wl)
                else:
                    advance(name)
                continue
        # partial admission
        steps = max(
            (
                ps.count - ps.min_count
                for ps in wl.pod_sets
                if ps.min_count is not None and ps.min_count < ps.count
            ),
            default=0,
        )
        if steps:
            best: Assignment | None = None
            lo, hi = 1, steps
            got = assigner.try_assign(cq, wl, _reduced_counts(wl, hi, steps), tree, state)
            if got.assignment is not None:
                best = got.assignment
                while lo < hi:
                    mid = (lo + hi) // 2
                    g = assigner.try_assign(cq, wl, _reduced_counts(wl, mid, steps), tree, state)
                    if g.assignment is not None:
                        best, hi = g.assignment, mid
                    else:
                        lo = mid + 1
            if best is not None:
                tree.add_usage(name, best.usage)
                cohort_states.pop(tree.root_of(name), None)
                state = placer.add(state, wl.key, best.placement)
                admissions.append(Admission(wl, name, best))
                charge_afs(wl, name, best.usage)
                pending.discard(wl.key)
                dirty.update(key_nodes(name))
                advance(name)
                continue
        reason = PendingReason(name, "Pending", out.message, out.why)
        pending.set(wl.key, reason)
        if cq.queueing_strategy == "StrictFIFO":
            block(name, wl)
        else:
            advance(name, failed=reason)

    return CycleResult(
        admissions=tuple(admissions),
        preemptions=tuple(plans),
        evictions=tuple(evictions),
        pending=pending,
        inactive_cluster_queues=inactive,
        local_queue_penalties=lq_pen,
        cluster_queue_penalties=cq_pen,
    )
