"""Named fault points for crash-consistency tests (imperative shell only; the pure cores never call it).

The controller calls ``fault_point("admission.after_ledger")`` at each step of its admission, plan
binding, eviction and finish paths. Unarmed (production), a fault point is one dict lookup and a
``None`` check. A test arms it in one of two ways:

* in-process: ``arm(hook)`` installs a callable that receives every fault point's name; the
  crash harness (tests/reliability/crash.py) counts the hits and, at the chosen one, raises
  :class:`SimulatedCrash`. It derives from ``BaseException`` so that no ``except Exception`` on the
  way up swallows it: the controller's task dies on the spot, as a SIGKILL would leave it.
* in a subprocess: the environment variable ``QUEUEING_CRASH_AT=NAME[:N]`` makes the N-th hit (default
  the first) of the fault point NAME call ``os._exit(137)`` — no cleanup, no ``finally``, like SIGKILL.

``hits`` counts every fault point reached while the registry is armed (tests report coverage from it).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable

__all__ = ["POINTS", "SimulatedCrash", "arm", "disarm", "fault_point", "hits"]

ENV = "QUEUEING_CRASH_AT"

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
_env_target: tuple[str, int] | None = None
hits: Counter[str] = Counter()


def _parse_env() -> tuple[str, int] | None:
    raw = os.environ.get(ENV)
    if not raw:
        return None
    name, _, n = raw.partition(":")
    return name, int(n) if n.isdigit() else 1


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
    global _env_target
    if _hook is None and _env_target is None:
        return
    hits[name] += 1
    if _env_target is not None and _env_target[0] == name and hits[name] >= _env_target[1]:
        os._exit(137)
    if _hook is not None:
        _hook(name)


_env_target = _parse_env()
