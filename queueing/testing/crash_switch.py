"""The crash switch (tests only): a ``queueing`` command that dies like SIGKILL at a named fault point.

    QUEUEING_CRASH_AT=admission.after_ledger:2 python -m queueing.testing.crash_switch run --config FILE

runs ``queueing run`` (any ``queueing`` subcommand) with a fault-point hook armed that calls
``os._exit(137)`` at the second hit of ``admission.after_ledger`` (``NAME`` alone: the first hit) — no
cleanup, no ``finally``. The production entry point (``queueing run``, the image's) never reads
``QUEUEING_CRASH_AT``; this module is part of the testing support, which the wheel does not carry.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping

from queueing import faults

__all__ = ["ENV", "arm_from_env", "main", "parse"]

ENV = "QUEUEING_CRASH_AT"


def parse(raw: str) -> tuple[str, int]:
    """``"NAME[:N]"`` -> (NAME, N); the name must be one of :data:`queueing.faults.POINTS`."""
    name, _, n = raw.partition(":")
    if name not in faults.POINTS:
        raise ValueError(f"{ENV}={raw!r}: unknown fault point {name!r} (one of {', '.join(faults.POINTS)})")
    if n and not (n.isdigit() and int(n) >= 1):
        raise ValueError(f"{ENV}={raw!r}: the hit count must be a positive integer")
    return name, int(n) if n else 1


def arm_from_env(
    environ: Mapping[str, str], exit: Callable[[int], object] = os._exit
) -> tuple[str, int] | None:
    """Arm the switch from ``environ`` (nothing when ``QUEUEING_CRASH_AT`` is unset)."""
    raw = environ.get(ENV)
    if not raw:
        return None
    target = parse(raw)

    def hook(point: str) -> None:
        if point == target[0] and faults.hits[point] >= target[1]:
            exit(137)

    faults.arm(hook)
    return target


def main(argv: list[str] | None = None) -> int:
    try:
        arm_from_env(os.environ)
    except ValueError as e:
        print(f"crash switch: {e}", file=sys.stderr)
        return 2
    from queueing.cli import main as queueing_main

    return queueing_main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
