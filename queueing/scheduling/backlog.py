"""The pending workloads, kept sorted between cycles: ``Backlog``.

A cycle orders each ClusterQueue's pending workloads by priority, then time; workloads of one
LocalQueue with the same fit signature (``WorkloadInfo.fit_signature``: queue, pod sets, selectors)
form a *run*, and a run is kept sorted by ``(-priority, order_time, key)``. The cycle merges the runs
of a ClusterQueue's LocalQueues and, when a head does not fit, gives the rest of its run the same
reason at once. Sorting the whole backlog in every cycle costs what the backlog costs; a caller
that runs cycle after cycle (the simulator) keeps a ``Backlog`` instead and changes it by arrivals,
admissions and requeues, so that a cycle costs about what its heads cost.

Workloads that cannot be admitted now are held aside: deactivated ones, and those in a requeue
backoff (``backoff_until``) until ``release(now)`` finds the backoff over.

Pure data structure (no clock): ``run_cycle`` only reads it; the caller changes it between cycles.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable, Iterator, Mapping

from queueing.scheduling.snapshot import WorkloadInfo

__all__ = ["Backlog", "run_order"]


def run_order(w: WorkloadInfo) -> tuple[int, float, str]:
    """The order within a run: higher priority first, then earlier (re)queue time, then key."""
    return (-w.priority, w.order_time, w.key)


class Backlog:
    """Pending workloads by LocalQueue and fit signature, each run sorted (see the module doc)."""

    def __init__(
        self, workloads: Iterable[WorkloadInfo] = (), *, released: float = float("-inf"), verify: bool = False
    ) -> None:
        """``verify``: the shortcuts of ``_insert`` (at the end of a run) and ``remove`` (the head of
        a run) also ask ``bisect_right`` / ``bisect_left`` where the workload is and fail on a
        difference."""
        self._verify = verify
        self._by_key: dict[str, WorkloadInfo] = {}
        # LocalQueue key -> fit signature -> run (sorted by ``run_order``)
        self._queues: dict[str, dict[str, list[WorkloadInfo]]] = {}
        self._held: dict[str, WorkloadInfo] = {}  # deactivated, or in backoff after ``released``
        self._backoffs: list[tuple[float, str]] = []  # (backoff end, key) of held workloads
        self._released = released
        # many at once: each run sorted once at the end, which is the order ``add`` one by one
        # inserts in (keys are unique); given a key twice, one by one (the later one replaces)
        listed = list(workloads)
        given = {w.key: w for w in listed}
        if len(given) != len(listed):
            for w in listed:
                self.add(w)
            return
        self._by_key = given
        fresh: dict[str, dict[str, list[WorkloadInfo]]] = {}
        for w in given.values():
            if not w.active or (w.backoff_until is not None and w.backoff_until > released):
                self._hold(w)
            else:
                fresh.setdefault(w.queue_key, {}).setdefault(w.fit_signature, []).append(w)
        for queue_key, runs in fresh.items():
            for run in runs.values():
                run.sort(key=run_order)
            self._queues[queue_key] = runs

    # ---- reading --------------------------------------------------------------------------------
    @property
    def released(self) -> float:
        """The latest time passed to ``release``: a backoff that ends by then no longer holds."""
        return self._released

    @property
    def queues(self) -> Mapping[str, Mapping[str, list[WorkloadInfo]]]:
        """LocalQueue key -> fit signature -> the run, sorted (read only)."""
        return self._queues

    @property
    def held(self) -> Mapping[str, WorkloadInfo]:
        """Workloads not eligible after ``released``: deactivated, or in backoff."""
        return self._held

    def layout(self) -> tuple[object, ...]:
        """Everything it holds, in its order, as a value: keys, runs by LocalQueue and signature,
        held keys, backoffs, ``released`` (two backlogs with the same layout order the same)."""
        return (
            tuple(self._by_key),
            tuple(
                (q, tuple((s, tuple(w.key for w in run)) for s, run in runs.items()))
                for q, runs in self._queues.items()
            ),
            tuple(self._held),
            tuple(sorted(self._backoffs)),
            self._released,
        )

    @classmethod
    def one_by_one(cls, workloads: Iterable[WorkloadInfo], *, released: float = float("-inf")) -> Backlog:
        """The general construction ``Backlog(workloads)`` stands for: ``add`` each in turn."""
        out = cls(released=released)
        for w in workloads:
            out.add(w)
        return out

    def get(self, key: str) -> WorkloadInfo | None:
        return self._by_key.get(key)

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def __len__(self) -> int:
        return len(self._by_key)

    def __iter__(self) -> Iterator[WorkloadInfo]:
        return iter(self._by_key.values())

    # ---- changes (by the caller, between cycles) ---------------------------------------------------
    def add(self, wl: WorkloadInfo) -> None:
        """Add a pending workload (replacing one with the same key)."""
        if wl.key in self._by_key:
            self.remove(wl.key)
        self._by_key[wl.key] = wl
        if not wl.active or (wl.backoff_until is not None and wl.backoff_until > self._released):
            self._hold(wl)
            return
        self._insert(wl)

    def _hold(self, wl: WorkloadInfo) -> None:
        self._held[wl.key] = wl
        if wl.active and wl.backoff_until is not None:
            heapq.heappush(self._backoffs, (wl.backoff_until, wl.key))

    def remove(self, key: str) -> WorkloadInfo | None:
        """Remove a workload (admitted, deleted); returns it, or None if it was not here."""
        wl = self._by_key.pop(key, None)
        if wl is None:
            return None
        if self._held.pop(key, None) is None:
            runs = self._queues[wl.queue_key]
            run = runs[wl.fit_signature]
            if run[0] is wl:  # the run's head (an admission, mostly): no binary search
                i = 0
                if self._verify and bisect_left(run, run_order(wl), key=run_order) != 0:
                    raise RuntimeError(f"verify: Backlog: {wl.key} is the head of an unsorted run")
            else:
                i = bisect_left(run, run_order(wl), key=run_order)
            assert run[i] is wl, "a run lost its order"
            del run[i]
            if not run:
                del runs[wl.fit_signature]
                if not runs:
                    del self._queues[wl.queue_key]
        return wl

    def release(self, now: float) -> None:
        """Backoffs that end by ``now`` are over: those workloads join their runs."""
        if now > self._released:
            self._released = now
        while self._backoffs and self._backoffs[0][0] <= now:
            _, key = heapq.heappop(self._backoffs)
            wl = self._held.get(key)
            if wl is None or wl.backoff_until is None or wl.backoff_until > now or not wl.active:
                continue  # stale entry: removed, replaced or deactivated since
            del self._held[key]
            self._insert(wl)

    def _insert(self, wl: WorkloadInfo) -> None:
        runs = self._queues.setdefault(wl.queue_key, {})
        run = runs.get(wl.fit_signature)
        if run is None:
            runs[wl.fit_signature] = [wl]
            return
        k = run_order(wl)
        if run_order(run[-1]) < k:
            # after the whole run, where most land (arrivals and requeues come in time order): what
            # ``insort`` does, without its binary search (keys are unique: no ties)
            if self._verify and bisect_right(run, k, key=run_order) != len(run):
                raise RuntimeError(f"verify: Backlog: {wl.key} does not go at the end of its run")
            run.append(wl)
        else:
            insort(run, wl, key=run_order)
