"""How the long-running shell uses Python's garbage collector (a process-wide setting: shell only).

The controller keeps a large, long-lived state (the cluster cache, the pending Workloads, the
ledger's mirror): every automatic collection of the oldest generation walks all of it again, and a
scheduling cycle allocates enough to trigger several. On the large shape (2,500 nodes, 12,000
pending) the collections took more than the cycle itself (``bench/controller_path.py
--large-cycle``). So:

* :func:`paused`: no automatic collection during one synchronous stretch (a scheduling cycle, the
  dashboard building a view: no other code runs meanwhile, and what it leaves is collected by the
  next automatic pass afterwards; the dashboard's device map of 2,500 nodes x 8 GPUs took 1.6-1.8 s
  with collections and 0.43 s without);
* :func:`keep_long_lived`: collect once, then move everything alive into the permanent generation
  (``gc.freeze``), so later passes skip it. Called after the first sync and now and then after that,
  as the state grows with arrivals.

The simulator applies the same idea to a whole run (``queueing/simulate/engine.py``).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["keep_long_lived", "paused"]


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


def keep_long_lived() -> None:
    """Collect what is garbage now, then keep every live object out of later collections."""
    gc.collect()
    gc.freeze()
