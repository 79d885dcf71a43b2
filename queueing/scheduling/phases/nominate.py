"""Nominate: which pending workload the cycle tries next.

Eligible pending workloads go in their ClusterQueue's queue (``route``: the LocalQueue exists and
runs, its ClusterQueue exists, is active and selects the namespace); the others get their reason at
once. Within a ClusterQueue: nominated preemptors first (``ClusterSnapshot.nominated``), then with
admission fair sharing the LocalQueue's decayed usage, then priority, then time. Across ClusterQueues
the best head goes first: with fair sharing the lowest dominant resource share with the workload
admitted, top-down through the cohort tree; otherwise non-borrowing first, then priority, then time.

A head's key is recomputed only when its queue's head changed or the usage of a quota-tree node
the key depends on changed (``CycleBook.changed``). After a head, ``admitted``, ``preempting`` or
``failed`` moves its queue on; a failed head takes the rest of its run (same fit signature, no higher
priority) with it, as capacity only shrinks during a cycle (``config.verify`` checks each one).
StrictFIFO blocks the queue behind a head that did not get in.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any

from queueing.scheduling.assign import Assigner
from queueing.scheduling.backlog import Backlog
from queueing.scheduling.config import AdmissionFairSharingConfig, SchedulingConfig
from queueing.scheduling.decisions import PendingReason
from queueing.scheduling.fairshare import share_key
from queueing.scheduling.ordering import queue_order_key, weighted_usage
from queueing.scheduling.phases.assign import full_counts
from queueing.scheduling.phases.commit import CycleBook
from queueing.scheduling.placer import Placer
from queueing.scheduling.quota import QuotaTree
from queueing.scheduling.snapshot import (
    ClusterQueueSpec,
    ClusterSnapshot,
    FlavorResource,
    FlavorSpec,
    LocalQueueSpec,
    WorkloadInfo,
)
from queueing.scheduling.verify import checked

__all__ = ["Estimates", "Nominator", "inactive_cluster_queues"]

# fit signature -> (ClusterQueue, flavors, the expected usage that orders heads)
Estimates = dict[str, tuple[ClusterQueueSpec, tuple[FlavorSpec, ...], dict[FlavorResource, Fraction]]]


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


def eligible_backlog(snapshot: ClusterSnapshot, now: float, verify: bool = False) -> Backlog:
    """The snapshot's pending workloads as a backlog released up to ``now`` (``verify``: a backlog
    built at once is checked against one built workload by workload)."""
    backlog = snapshot.backlog
    if backlog is None:
        got = Backlog(snapshot.pending, released=now)
        if verify:
            checked(
                "Backlog (runs sorted at once)",
                got.layout(),
                lambda: Backlog.one_by_one(snapshot.pending, released=now).layout(),
                "ClusterSnapshot.pending",
            )
        return got
    if snapshot.pending:
        raise ValueError("ClusterSnapshot: pending workloads go either in pending or in backlog, not both")
    if now < backlog.released:
        raise ValueError(f"the backlog was released up to t={backlog.released:g}s, after now (t={now:g}s)")
    if any(
        w.active and w.backoff_until is not None and w.backoff_until <= now for w in backlog.held.values()
    ):
        return Backlog(backlog, released=now)  # backoffs ended but not released: a released copy
    return backlog


class _WithinKey:
    """The order within a ClusterQueue (see the module doc). Refers to nothing that refers to its
    queues, so that a cycle's queues go with the cycle, without waiting for the garbage collector."""

    def __init__(
        self,
        nominated: frozenset[str],
        afs: AdmissionFairSharingConfig | None,
        lqs: Mapping[str, LocalQueueSpec],
        lq_usage: Mapping[str, Mapping[str, float]],
    ) -> None:
        self.nominated = nominated
        self.afs = afs
        self.lqs = lqs
        self.lq_usage = lq_usage

    def lq_share(self, wl: WorkloadInfo) -> float:
        afs = self.afs
        if afs is None:
            return 0.0
        lq = self.lqs[wl.queue_key]
        return weighted_usage(self.lq_usage.get(lq.key, {}), afs, lq.fair_weight)

    def key(self, cq: ClusterQueueSpec, wl: WorkloadInfo) -> tuple[int, float, int, float, str]:
        s = self.lq_share(wl) if (self.afs is not None and cq.admission_fair_sharing) else 0.0
        return queue_order_key(wl, self.nominated, s)  # the visibility API numbers positions by it too


class Nominator:
    """The heads of all ClusterQueues, best first (see the module doc)."""

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        now: float,
        book: CycleBook,
        assigner: Assigner,
        placer: Placer[Any],
        config: SchedulingConfig,
        cqs: Mapping[str, ClusterQueueSpec],
        lqs: Mapping[str, LocalQueueSpec],
        inactive: Mapping[str, str],
        estimates: Estimates,
    ) -> None:
        self.snapshot = snapshot
        self.book = book
        self.assigner = assigner
        self.placer = placer
        self.config = config
        self.cqs = cqs
        self.lqs = lqs
        self.inactive = inactive
        self.estimates = estimates
        self.afs = config.admission_fair_sharing
        self.nominated = snapshot.nominated
        self._ns_ok: dict[tuple[str, str], bool] = {}
        self.within = _WithinKey(self.nominated, self.afs, lqs, book.lq_usage)
        pending = book.pending
        backlog = eligible_backlog(snapshot, now, config.verify)
        for wl in backlog.held.values():
            lq = lqs.get(wl.queue_key)
            cq_name = lq.cluster_queue if lq else None
            if not wl.active:
                pending.set(wl.key, PendingReason(cq_name, "Deactivated", "the workload is deactivated"))
            else:
                pending.set(
                    wl.key,
                    PendingReason(cq_name, "Backoff", f"requeue backoff until t={wl.backoff_until:g}s"),
                )
        # ClusterQueue -> its LocalQueues' runs (the backlog's lists, only read here)
        queues: dict[str, dict[str, list[WorkloadInfo]]] = {}
        for queue_key, runs in backlog.queues.items():
            to = self.route(queue_key, next(iter(runs.values()))[0].namespace)
            if isinstance(to, PendingReason):
                for run in runs.values():
                    pending.set_all(list(run), to)
            else:
                queues.setdefault(to, {}).update(runs)
        self.qs = {
            name: _Queue(runs, functools.partial(self.within.key, cqs[name])) for name, runs in queues.items()
        }
        # the best head over all ClusterQueues: a heap of (head key, version, queue); an entry is
        # current while its version is the queue's. A queue's key is recomputed when its head
        # changed (``stale``) or the usage of a quota-tree node its key depends on changed (the
        # book's ``changed`` ClusterQueues, through ``key_nodes``); keys end in the workload's key,
        # so they are unique and the heap's top is the minimum over all queues with a head. With
        # fair sharing a key depends on the shares of the nodes on the queue's path below the root
        # (each from its own usage; what it could borrow is fixed by the quotas); without, on
        # whether it must borrow, which any usage in its cohort tree changes.
        self.stale: set[str] = set(queues)
        self.by_node: dict[str, list[str]] = {}
        for n in queues:
            for nid in self.key_nodes(n):
                self.by_node.setdefault(nid, []).append(n)
        self.heap: list[tuple[tuple[Any, ...], int, str]] = []
        self.version: dict[str, int] = {}

    # ---- routing and keys ------------------------------------------------------------------------
    def route(self, queue_key: str, namespace: str) -> str | PendingReason:
        """The ClusterQueue a LocalQueue's workloads queue in, or why they cannot."""
        lq = self.lqs.get(queue_key)
        if lq is None:
            return PendingReason(None, "Inadmissible", f"LocalQueue {queue_key} doesn't exist")
        if lq.terminating:
            return PendingReason(lq.cluster_queue, "Inadmissible", f"LocalQueue {lq.key} is terminating")
        if lq.stop_policy != "None":
            return PendingReason(lq.cluster_queue, "Inadmissible", f"LocalQueue {lq.key} is stopped")
        cq = self.cqs.get(lq.cluster_queue)
        if cq is None:
            return PendingReason(
                lq.cluster_queue, "Inadmissible", f"ClusterQueue {lq.cluster_queue} doesn't exist"
            )
        if cq.name in self.inactive:
            return PendingReason(
                cq.name, "Inadmissible", f"ClusterQueue {cq.name} is inactive: {self.inactive[cq.name]}"
            )
        sel_key = (cq.name, namespace)
        selected = self._ns_ok.get(sel_key)
        if selected is None:
            ns_labels = self.snapshot.namespaces.get(namespace, {})
            selected = cq.namespace_selector is not None and cq.namespace_selector.matches(ns_labels)
            self._ns_ok[sel_key] = selected
        if not selected:
            return PendingReason(
                cq.name,
                "Inadmissible",
                f"namespace {namespace} doesn't match the selector of ClusterQueue {cq.name}",
            )
        return cq.name

    def key_nodes(self, cq_name: str) -> list[str]:
        tree = self.book.tree
        return tree.path(cq_name)[1:] if self.config.fair_sharing.enable else [tree.root_of(cq_name)]

    def _derive_estimate(
        self, cq: ClusterQueueSpec, wl: WorkloadInfo, by: Assigner
    ) -> dict[FlavorResource, Fraction]:
        got: dict[FlavorResource, Fraction] = {}
        groups, err = by.relevant_groups(cq, wl)
        if not err:
            combos, err = by.combos(cq, wl, groups)
            if not err and combos:
                res_flavor, _ = by.flavor_map(cq, wl, combos[0], groups)
                got = by.regular_usage(cq, wl, {}, res_flavor, with_devices=True)
        return got

    def estimate(self, cq: ClusterQueueSpec, wl: WorkloadInfo) -> dict[FlavorResource, Fraction]:
        """The expected usage that orders heads across queues (first flavor combination, expected
        device charges): the same for every workload of one fit signature in one ClusterQueue with
        the same flavors (kept across cycles in ``CycleMemo.estimates``)."""
        flavors = self.snapshot.flavors
        hit = self.estimates.get(wl.fit_signature)
        if hit is not None and hit[0] is cq and hit[1] is flavors:
            if self.config.verify:  # against a derivation without any cache
                checked(
                    "CycleMemo.estimates",
                    hit[2],
                    lambda: self._derive_estimate(cq, wl, Assigner(self.assigner.flavors, self.placer)),
                    f"ClusterQueue {cq.name}, workload {wl.key}",
                )
            return hit[2]
        got = self._derive_estimate(cq, wl, self.assigner)
        self.estimates[wl.fit_signature] = (cq, flavors, got)
        return got

    def head_key(self, cq: ClusterQueueSpec, wl: WorkloadInfo) -> tuple[Any, ...]:
        tree, afs = self.book.tree, self.afs
        est = self.estimate(cq, wl)
        cohort_afs = 0.0
        if afs is not None and afs.cohort_level:
            cohort_afs = weighted_usage(self.book.cq_usage.get(cq.name, {}), afs, cq.fair_weight)
        first = 0 if wl.key in self.nominated else 1
        if self.config.fair_sharing.enable:
            return (first, share_key(tree, cq.name, est), cohort_afs, -wl.priority, wl.order_time, wl.key)
        borrows = 1 if tree.fit(cq.name, est).borrows else 0
        return (first, (), cohort_afs, borrows, -wl.priority, wl.order_time, wl.key)

    # ---- the heads -------------------------------------------------------------------------------
    def next(self) -> tuple[ClusterQueueSpec, WorkloadInfo] | None:
        """The best head over all ClusterQueues, or None when every queue is done."""
        todo = self.stale
        self.stale = set()
        for cq_name in self.book.changed:
            for nid in self.key_nodes(cq_name):
                todo.update(self.by_node.get(nid, ()))
        self.book.changed.clear()
        heap, version = self.heap, self.version
        for n in todo:
            v = version.get(n, 0) + 1
            version[n] = v
            head = self.qs[n].head()
            if head is not None:
                heapq.heappush(heap, (self.head_key(self.cqs[n], head), v, n))
        while heap and heap[0][1] != version[heap[0][2]]:
            heapq.heappop(heap)
        if not heap:
            return None
        name = heap[0][2]
        head = self.qs[name].head()
        assert head is not None
        return self.cqs[name], head

    def admitted(self, cq: ClusterQueueSpec) -> None:
        """The head of ``cq`` got in: its queue moves on."""
        self._advance(cq)

    def preempting(self, cq: ClusterQueueSpec, wl: WorkloadInfo) -> None:
        """The head ``wl`` of ``cq`` waits for its victims: StrictFIFO blocks behind it."""
        if cq.queueing_strategy == "StrictFIFO":
            self._block(cq, wl)
        else:
            self._advance(cq)

    def failed(self, cq: ClusterQueueSpec, wl: WorkloadInfo, reason: PendingReason) -> None:
        """The head ``wl`` of ``cq`` fits neither whole nor partially, and no preemption helps."""
        self.book.pending.set(wl.key, reason)
        if cq.queueing_strategy == "StrictFIFO":
            self._block(cq, wl)
        else:
            self._advance(cq, failed=reason)

    def _advance(self, cq: ClusterQueueSpec, failed: PendingReason | None = None) -> None:
        """Move past the head; ``failed``: the head did not fit and, as capacity only shrinks
        during a cycle, neither do the rest of its kind (same fit signature, no higher priority):
        they get the head's reason, which names no workload's objects but as ``why`` references
        (``config.verify``: each one's own reason is computed too and must be equal)."""
        q = self.qs[cq.name]
        self.stale.add(cq.name)
        if failed is not None:
            rest = q.drop_head_kind()
            if self.config.verify:
                self._verify_rest(cq, rest, failed)
            self.book.pending.set_all(rest, failed)
        else:
            q.pop_head()
        if self.afs is not None and cq.admission_fair_sharing:
            q.rekey()  # entry penalties changed the LocalQueue shares

    def _verify_rest(self, cq: ClusterQueueSpec, rest: list[WorkloadInfo], failed: PendingReason) -> None:
        """The run shortcut's claim: none of ``rest`` fits now, and each one's own reason is
        ``failed`` (the pending reason a head gets when it fits neither whole nor partially)."""
        for w in rest:
            got = self.assigner.try_assign(cq, w, full_counts(w), self.book.tree, self.book.state)
            own = PendingReason(cq.name, "Pending", got.message, got.why)
            if got.assignment is not None or own != failed:
                what = "fits" if got.assignment is not None else f"has its own reason {own!r}"
                raise RuntimeError(
                    f"verify: run shortcut: {w.key} (fit signature of the head) {what}; "
                    f"the head's reason was {failed!r}"
                )

    def _block(self, cq: ClusterQueueSpec, head: WorkloadInfo) -> None:
        reason = PendingReason(
            cq.name, "Pending", f"StrictFIFO: waiting behind {head.key} in ClusterQueue {cq.name}"
        )
        self.book.pending.set_all([w for w in self.qs[cq.name].drain() if w.key != head.key], reason)
        self.stale.add(cq.name)
