"""Periodic jobs on APScheduler: intervals from the configuration, runs observed through events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from queueing.api.quantity import Quantity
from queueing.config import Config
from queueing.controller.metrics import ControllerMetrics
from queueing.controller.periodic import (
    COMPACTION,
    DEFAULT_USAGE_SAMPLING_INTERVAL,
    HEARTBEAT,
    INADMISSIBLE_RECHECK,
    RESYNC,
    USAGE_SAMPLING,
    PeriodicJobs,
)
from queueing.ledger.engine import create_engine
from queueing.ledger.migrate import upgrade_async
from queueing.ledger.models import METRIC_QUOTA
from queueing.ledger.repository import JournalEvent, Ledger


def config(**kw: object) -> Config:
    base: dict[str, object] = {
        "resync_period": "30s",
        "ledger": {"retention": "48h", "compaction_interval": "1h"},
        "admission_fair_sharing": {"usage_half_life_time": "1h", "usage_sampling_interval": "1m"},
    }
    base.update(kw)
    return Config(**base)  # type: ignore[arg-type]


@pytest.fixture
async def jobs() -> AsyncIterator[PeriodicJobs]:
    j = PeriodicJobs(config(), metrics=ControllerMetrics())
    yield j
    await j.shutdown(timeout=5)


def noop() -> None:
    pass


async def test_intervals_come_from_the_configuration() -> None:
    j = PeriodicJobs(config())
    j.add_usage_sampling(noop)
    j.add_resync(noop)
    j.add_compaction(Ledger.from_url("sqlite+aiosqlite://"))
    j.add_inadmissible_recheck(noop, every=45)
    j.add_heartbeat(noop)
    intervals = {job.id: job.trigger.interval for job in j.scheduler.get_jobs()}
    assert intervals == {
        USAGE_SAMPLING: timedelta(minutes=1),
        RESYNC: timedelta(seconds=30),
        COMPACTION: timedelta(hours=1),
        INADMISSIBLE_RECHECK: timedelta(seconds=45),
        HEARTBEAT: timedelta(seconds=30),
    }
    # without admission fair sharing, usage is still sampled (for the metrics) at Kueue's default
    k = PeriodicJobs(Config())
    k.add_usage_sampling(noop)
    assert k.scheduler.get_job(USAGE_SAMPLING).trigger.interval == timedelta(
        seconds=DEFAULT_USAGE_SAMPLING_INTERVAL
    )
    with pytest.raises(ValueError, match="greater than zero"):
        k.add("x", noop, 0, leader_only=False)


async def test_short_interval_jobs_fire_repeatedly(jobs: PeriodicJobs) -> None:
    calls: list[str] = []

    async def tick() -> None:
        calls.append("async")

    jobs.add("tick", tick, 0.02, leader_only=False)
    jobs.add("tock", lambda: calls.append("sync"), 0.02, leader_only=False)
    jobs.start()
    await jobs.wait_for_runs("tick", 3)
    await jobs.wait_for_runs("tock", 3)
    assert calls.count("async") >= 3 and calls.count("sync") >= 3
    assert jobs.stats["tick"].errors == 0


async def test_leader_only_jobs_run_only_while_leading(jobs: PeriodicJobs) -> None:
    ran = asyncio.Event()
    jobs.add_inadmissible_recheck(ran.set)
    jobs.add_resync(noop)
    jobs.start()
    assert jobs.next_run(INADMISSIBLE_RECHECK) is None  # paused: not the leader
    assert jobs.next_run(RESYNC) is not None  # every replica re-syncs
    assert jobs.trigger(INADMISSIBLE_RECHECK) is False
    jobs.set_leader(True)
    next_run = jobs.next_run(INADMISSIBLE_RECHECK)
    assert next_run is not None
    assert next_run > datetime.now(UTC) + timedelta(seconds=30)  # one interval from now, not at once
    assert jobs.trigger(INADMISSIBLE_RECHECK) is True  # event-driven: runs now
    await asyncio.wait_for(ran.wait(), 10)
    jobs.set_leader(False)
    assert jobs.next_run(INADMISSIBLE_RECHECK) is None
    assert jobs.stats[INADMISSIBLE_RECHECK].runs == 1


async def test_a_failing_job_is_counted_and_keeps_its_schedule(jobs: PeriodicJobs) -> None:
    def boom() -> None:
        raise RuntimeError("cluster unreachable")

    jobs.add_resync(boom)
    jobs.start()
    jobs.trigger(RESYNC)
    st = await jobs.wait_for_runs(RESYNC, 1)
    assert (st.errors, st.last_error) == (1, "RuntimeError: cluster unreachable")
    assert jobs.next_run(RESYNC) is not None
    jobs.trigger(RESYNC)
    await jobs.wait_for_runs(RESYNC, 2)
    assert jobs.metrics is not None
    assert jobs.metrics.value("queueing_periodic_job_runs_total", {"job": RESYNC, "result": "error"}) == 2


async def test_trigger_while_running_runs_once_more(jobs: PeriodicJobs) -> None:
    release = asyncio.Event()
    entered = asyncio.Event()
    calls = 0

    async def recheck() -> None:
        nonlocal calls
        calls += 1
        entered.set()
        if calls == 1:
            await release.wait()

    jobs.set_leader(True)
    jobs.add_inadmissible_recheck(recheck)
    jobs.start()
    jobs.trigger(INADMISSIBLE_RECHECK)
    await asyncio.wait_for(entered.wait(), 10)
    # two slice changes arrive while the first re-check runs: one more run covers both
    assert jobs.trigger(INADMISSIBLE_RECHECK)
    assert jobs.trigger(INADMISSIBLE_RECHECK)
    release.set()
    await jobs.wait_for_runs(INADMISSIBLE_RECHECK, 2)
    assert calls == 2
    assert not jobs.stats[INADMISSIBLE_RECHECK].running


async def test_shutdown_waits_for_the_running_job() -> None:
    jobs = PeriodicJobs(config())
    entered = asyncio.Event()
    finished: list[bool] = []

    async def resync() -> None:
        entered.set()
        await asyncio.sleep(0.05)  # a step that must not be cut off
        finished.append(True)

    jobs.add_resync(resync)
    jobs.start()
    jobs.trigger(RESYNC)
    await asyncio.wait_for(entered.wait(), 10)
    await jobs.shutdown(timeout=10)
    assert finished == [True]
    assert not jobs.scheduler.running


async def test_compaction_job_folds_old_journal_rows(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}"
    engine = create_engine(url)
    try:
        await upgrade_async(engine)
    finally:
        await engine.dispose()
    ledger = Ledger.from_url(url)
    now = datetime(2026, 3, 10, 12, tzinfo=UTC)
    ms = lambda d: int(d.timestamp() * 1000)  # noqa: E731
    rows = [
        JournalEvent(ms(now - timedelta(days=5)), "reserve", METRIC_QUOTA, "w1", "ns", "lq", "cq", "f", "gpu", Quantity.parse("2")),
        JournalEvent(ms(now - timedelta(days=4)), "release", METRIC_QUOTA, "w1", "ns", "lq", "cq", "f", "gpu", Quantity.parse("2")),
        JournalEvent(ms(now - timedelta(hours=1)), "reserve", METRIC_QUOTA, "w2", "ns", "lq", "cq", "f", "gpu", Quantity.parse("1")),
    ]  # fmt: skip
    await ledger.append_journal(rows)
    jobs = PeriodicJobs(config())  # retention 48h
    try:
        jobs.add_compaction(ledger, clock=lambda: now)
        jobs.start()
        assert jobs.next_run(COMPACTION) is None  # leader only
        jobs.set_leader(True)
        jobs.trigger(COMPACTION)
        st = await jobs.wait_for_runs(COMPACTION, 1)
        assert st.errors == 0, st.last_error
        # the two rows older than two days were folded into rollups; the recent one stays
        assert await ledger.journal_count() == 1
    finally:
        await jobs.shutdown()
        await ledger.close()
