"""``kube.writes.each``: independent writes side by side, at most ``limit`` at once; an ``Exception``
waits for the others and is raised after them; a crash (not an ``Exception``) stops the others."""

from __future__ import annotations

import asyncio

import pytest

from queueing.kube.writes import each


class Crash(BaseException):
    pass


async def test_runs_every_item_with_at_most_limit_in_flight() -> None:
    in_flight, peak, done = 0, 0, []

    async def write(i: int) -> None:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0)  # a round trip
        await asyncio.sleep(0)
        in_flight -= 1
        done.append(i)

    await each(range(50), write, limit=4)
    assert sorted(done) == list(range(50))
    assert peak == 4


async def test_starts_items_in_order() -> None:
    started: list[int] = []

    async def write(i: int) -> None:
        started.append(i)
        await asyncio.sleep(0)

    await each(range(20), write, limit=3)
    assert started == list(range(20))


async def test_an_error_lets_the_others_finish_then_raises() -> None:
    done: list[int] = []

    async def write(i: int) -> None:
        await asyncio.sleep(0)
        if i == 2:
            raise ValueError("write 2 refused")
        await asyncio.sleep(0)
        done.append(i)

    with pytest.raises(ValueError, match="write 2 refused"):
        await each(range(10), write, limit=3)
    assert sorted(done) == [i for i in range(10) if i != 2]


async def test_a_crash_stops_the_writes_still_running() -> None:
    never = asyncio.Event()  # the other writes would wait for ever
    cancelled: list[int] = []

    async def write(i: int) -> None:
        if i == 1:
            await asyncio.sleep(0)
            raise Crash
        try:
            await never.wait()
        except asyncio.CancelledError:
            cancelled.append(i)
            raise

    with pytest.raises(Crash):
        await asyncio.wait_for(each(range(6), write, limit=6), timeout=30)
    assert sorted(cancelled) == [0, 2, 3, 4, 5]


async def test_nothing_to_do() -> None:
    await each([], lambda i: asyncio.sleep(0))
