"""Test support that is part of the shell: the Kubernetes API emulator.

``from queueing.testing import run_emulator`` (imported lazily so that
``python -m queueing.testing.emulator`` runs cleanly).
"""

from __future__ import annotations

from typing import Any

__all__ = ["ApiError", "Counts", "Emulator", "Faults", "RequestAttributes", "Store", "run_emulator"]


def __getattr__(name: str) -> Any:
    if name in ("ApiError", "Store"):
        from queueing.testing import store

        return getattr(store, name)
    if name in __all__:
        from queueing.testing import emulator

        return getattr(emulator, name)
    raise AttributeError(name)
