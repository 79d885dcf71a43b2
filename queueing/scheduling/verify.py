"""Verify mode for the scheduling core (``SchedulingConfig.verify``): answers of memos and caches as
values, to compare them with the general computation's (see ``queueing.dra.verify``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from queueing.dra.verify import VerifyError
from queueing.scheduling.placer import Placement, PlacementFailure

__all__ = ["VerifyError", "checked", "placement_value", "value_of"]

T = TypeVar("T")


def placement_value(pl: Placement | PlacementFailure | None) -> object:
    """A placement as a value: its nodes, charges and the placer's plan (by the plan's ``value()``
    when it has one: plans may compare by identity)."""
    if pl is None:
        return None
    if isinstance(pl, PlacementFailure):
        return ("PlacementFailure", pl.message)
    value = getattr(pl.detail, "value", None)
    detail = value() if callable(value) else pl.detail
    return (pl.nodes, tuple(sorted(pl.device_charges.items())), detail)


def value_of(x: object) -> object:
    """``x`` as a value: placements by :func:`placement_value`, dataclasses field by field,
    containers element by element, anything else as it is."""
    if isinstance(x, Placement | PlacementFailure):
        return placement_value(x)
    fields = getattr(x, "__dataclass_fields__", None)
    if fields is not None:
        return (type(x).__name__, tuple((f, value_of(getattr(x, f))) for f in fields))
    if isinstance(x, dict):
        items = sorted(((value_of(k), value_of(v)) for k, v in x.items()), key=repr)
        return ("dict", tuple(items))
    if isinstance(x, list | tuple):
        return tuple(value_of(v) for v in x)
    if isinstance(x, set | frozenset):
        return frozenset(value_of(v) for v in x)
    return x


def checked(fast_path: str, cached: T, general: Callable[[], T], context: str = "") -> T:
    """``cached`` after checking it equals (as a value) what ``general()`` computes afresh."""
    want = general()
    if value_of(cached) != value_of(want):
        raise VerifyError(fast_path, value_of(cached), value_of(want), context)
    return cached
