"""The controller's garbage-collector policy (queueing/gcpolicy.py): when the live state is frozen,
when the frozen objects are given back to the collector, and the thresholds of `queueing run`."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from queueing.gcpolicy import CONTROLLER_GEN0_THRESHOLD, LongLived, tune_for_controller


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


class _Cycle:
    """An object in a reference cycle: freed only by the cyclic collector."""

    def __init__(self) -> None:
        self.me = self


def test_first_sync_freezes_then_every_few_seconds(unfrozen: None) -> None:
    now = [100.0]
    keeper = LongLived(every=5.0, reclaim_every=3600.0, clock=lambda: now[0])
    assert keeper.sync_completed()
    assert gc.get_freeze_count() > 0
    frozen = gc.get_freeze_count()
    keep_lists = [[i] for i in range(1000)]  # lists are tracked by the collector
    now[0] += 4.9
    assert not keeper.sync_completed()  # too soon: nothing collected, nothing frozen
    assert gc.get_freeze_count() == frozen
    now[0] += 0.2
    assert keeper.sync_completed()
    assert gc.get_freeze_count() >= frozen + len(keep_lists)  # the state that grew is frozen too
    assert keeper.kept == 2 and keeper.reclaimed == 0
    del keep_lists


def test_reclaim_frees_cycles_that_died_while_frozen(unfrozen: None) -> None:
    now = [0.0]
    keeper = LongLived(every=5.0, reclaim_every=60.0, clock=lambda: now[0])
    obj = _Cycle()
    alive = [obj]
    keeper.sync_completed()  # frozen while alive
    count = sum(1 for o in gc.get_objects() if isinstance(o, _Cycle))
    assert count == 0  # a frozen object is not among the collector's objects
    del alive, obj  # dies in its cycle: reference counting cannot free it, the frozen generation keeps it
    now[0] += 30.0
    keeper.sync_completed()  # a freeze, not a reclaim: the dead cycle stays frozen
    assert keeper.reclaimed == 0
    gc.unfreeze()  # look, then put it back as it was
    assert any(isinstance(o, _Cycle) for o in gc.get_objects())
    gc.freeze()
    now[0] += 31.0
    keeper.sync_completed()  # an hour (here a minute) on: unfrozen, collected, frozen again
    assert keeper.reclaimed == 1
    gc.unfreeze()
    assert not any(isinstance(o, _Cycle) for o in gc.get_objects())


def test_controller_thresholds(unfrozen: None) -> None:
    gc.set_threshold(700, 10, 10)
    tune_for_controller()
    assert gc.get_threshold() == (CONTROLLER_GEN0_THRESHOLD, 10, 10)
