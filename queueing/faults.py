"""Named fault points for crash-consistency tests (imperative shell only; the pure cores never call it).

The controller calls ``fault_point("admission.after_ledger")`` at each step of its admission, plan
binding, eviction and finish paths. Unarmed (production), a fault point is one dict lookup and a
``None`` check. Only a test arms it, in one of two ways:

* in-process: ``arm(hook)`` installs a callable that receives every fault point's name; the
  crash harness (tests/reliability/crash.py) counts the hits and, at the chosen one, raises
  :class:`SimulatedCrash`. It derives from ``BaseException`` so that no ``except Exception`` on the
  way up swallows it: the controller's task dies on the spot, as a SIGKILL would leave it.
* in a subprocess: the crash switch of the testing support, ``python -m queueing.testing.crash_switch
  run ...`` with ``QUEUEING_CRASH_AT=NAME[:N]``, arms a hook that makes the N-th hit (default the first)
  of the fault point NAME call ``os._exit(137)`` — no cleanup, no ``finally``, like SIGKILL. The
  production entry point (``queueing run``) never reads that variable, and the wheel and the image do
  not carry ``queueing.testing``.

``hits`` counts every fault point reached while the registry is armed (tests report coverage from it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

__all__ = ["POINTS", "SimulatedCrash", "arm", "disarm", "fault_point", "hits"]

# every fault point the controller has, by path (tests check that each is reached)
POINTS: tuple[str, ...] = (
    "admission.before_ledger",
    "admission.after_ledger",
    "admission.after_status",
    "bind.before_start_job",
    "bind.after_start_job",
    "bind.after_claim_allocation",
    "bind.after_pod",
    "eviction.after_ledger_start",
    "eviction.after_mark",
    "eviction.after_stop_pods",
    "eviction.after_ledger",
    "eviction.after_requeue",
    "finish.after_ledger",
    "finish.after_status",
)


class SimulatedCrash(BaseException):
    """Raised by an armed fault point: the process "dies" here (tests only)."""

    def __init__(self, point: str) -> None:
        super().__init__(point)
        self.point = point


_hook: Callable[[str], None] | None = None
hits: Counter[str] = Counter()


def arm(hook: Callable[[str], None]) -> None:
    """Install ``hook``: it is called with the name of every fault point reached until :func:`disarm`."""
    global _hook
    _hook = hook
    hits.clear()


def disarm() -> None:
    global _hook
    _hook = None


def fault_point(name: str) -> None:
    """A place where a crash must leave the system recoverable. A no-op unless armed."""
    if _hook is None:
        return
    hits[name] += 1
    _hook(name)
