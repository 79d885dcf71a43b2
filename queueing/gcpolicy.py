"""How the long-running shell uses Python's garbage collector (a process-wide setting: shell only).

The controller keeps a large, long-lived state (the cluster cache, the pending Workloads, the
ledger's mirror): every automatic collection of the oldest generation walks all of it again, and a
scheduling cycle allocates enough to trigger several. On the large shape (2,500 nodes, 12,000
pending) the collections took more than the cycle itself (``bench/controller_path.py
--large-cycle``). So:

* :func:`tune_for_controller` (``queueing run`` only): the youngest generation is collected after
  ``CONTROLLER_GEN0_THRESHOLD`` allocations instead of Python's 700. Every API write and watch
  event allocates thousands of short-lived objects (a parsed body, a pydantic model, asyncio
  handles); at 700 the controller ran about 75 young and 7 middle collections a second, each
  also walking the young objects that live on (1/3 of the baseline in `bench/e2e.py`: 5,600 young
  and 500 middle collections, 2.9 s CPU; with 10,000: 280 and 21, 2.3 s; the run's controller
  CPU 41.4 s with the old policy, 41.5 s with :class:`LongLived` alone, 33.8 s with both);
* :func:`paused`: no automatic collection during one synchronous stretch (a scheduling cycle, the
  dashboard building a view: no other code runs meanwhile, and what it leaves is collected by the
  next automatic pass afterwards; the dashboard's device map of 2,500 nodes x 8 GPUs took 1.6-1.8 s
  with collections and 0.43 s without);
* :func:`keep_long_lived`: collect once, then move everything alive into the permanent generation
  (``gc.freeze``), so later passes skip it. :class:`LongLived` calls it after the controller's first
  completed sync and then after a completed sync whenever ``every`` seconds passed since the last
  time, as the state grows with arrivals. Counted by syncs (every 100th, as before) this was far too
  rare: in `bench/e2e.py` on 1/3 of Kueue's baseline the state built between two freezes was walked by
  32 full collections, 11.0 s of the controller's 45 s of CPU. Frozen objects are still freed by
  reference counting when they die; only a cycle among them waits until ``reclaim_every``, when
  everything is unfrozen and collected once (a full pass over the heap, once an hour by default).

The simulator applies the same idea to a whole run (``queueing/simulate/engine.py``).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["CONTROLLER_GEN0_THRESHOLD", "LongLived", "keep_long_lived", "paused", "tune_for_controller"]

#: allocations between two collections of the youngest generation in the controller process
CONTROLLER_GEN0_THRESHOLD = 10_000


@contextmanager
def paused() -> Iterator[None]:
    """No automatic garbage collection inside the block (restored as it was)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def tune_for_controller() -> None:
    """The collector's thresholds for the controller process (see the module docstring); the older
    generations' thresholds stay Python's."""
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(CONTROLLER_GEN0_THRESHOLD, gen1, gen2)


def keep_long_lived() -> None:
    """Collect what is garbage now, then keep every live object out of later collections."""
    gc.collect()
    gc.freeze()


class LongLived:
    """When the controller keeps its live state out of later collections (see the module docstring):
    :meth:`sync_completed` after every completed sync; it calls :func:`keep_long_lived` on the first
    call and then once ``every`` seconds passed since the last, unfreezing first once
    ``reclaim_every`` seconds passed since the last reclaim. Returns whether it did."""

    def __init__(
        self, every: float = 5.0, reclaim_every: float = 3600.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.every = every
        self.reclaim_every = reclaim_every
        self.clock = clock
        self.kept = 0  # times keep_long_lived ran
        self.reclaimed = 0  # times the frozen objects were unfrozen and collected
        self._last: float | None = None
        self._reclaimed_at: float | None = None

    def sync_completed(self) -> bool:
        now = self.clock()
        if self._last is not None and now - self._last < self.every:
            return False
        if self._reclaimed_at is None:
            self._reclaimed_at = now
        elif now - self._reclaimed_at >= self.reclaim_every:
            gc.unfreeze()  # cycles that died among the frozen objects are collected below
            self._reclaimed_at = now
            self.reclaimed += 1
        keep_long_lived()
        self._last = now
        self.kept += 1
        return True
