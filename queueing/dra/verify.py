"""Verify mode: every fast path, memo and cache that stands in for a general computation also runs
the general computation and raises :class:`VerifyError` on any difference.

The cores never read a switch themselves: the shell passes ``verify=True`` (``DraPlacer``,
``ClusterState``, ``Allocator``, ``SchedulingConfig.verify``), for example when the environment sets
``QUEUEING_VERIFY=1`` (see ``queueing.verify``). Answers are compared by value (placements, picks,
plans), never by object identity.
"""

from __future__ import annotations

from collections.abc import Iterable

from queueing.dra.inventory import Pick

__all__ = ["VerifyError", "pick_value", "picks_value"]


class VerifyError(AssertionError):
    """A fast path, memo or cache answered differently from the general computation it stands in
    for. ``fast_path`` names it; ``fast`` and ``general`` are both answers (as values)."""

    def __init__(self, fast_path: str, fast: object, general: object, context: str = "") -> None:
        self.fast_path = fast_path
        self.fast = fast
        self.general = general
        self.context = context
        where = f" ({context})" if context else ""
        super().__init__(
            f"verify: {fast_path}{where} answered differently from the general computation: "
            f"fast {fast!r}, general {general!r}"
        )


def pick_value(p: Pick) -> tuple[object, ...]:
    """A pick as a value: the device, the request, admin access, counters and capacity consumed."""
    return (p.device.key, p.request, p.admin_access, tuple(p.counters), tuple(p.capacity))


def picks_value(picks: Iterable[Pick]) -> tuple[tuple[object, ...], ...]:
    return tuple(pick_value(p) for p in picks)
