"""Periodic ledger jobs for the controller's APScheduler (3.x ``AsyncIOScheduler``).

The controller registers them; nothing here starts a scheduler::

    scheduler = AsyncIOScheduler()
    register_compaction(scheduler, ledger, older_than=timedelta(days=30), every=timedelta(hours=6))
    scheduler.start()
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from queueing.ledger.compaction import CompactionResult, compact
from queueing.ledger.repository import Ledger

log = logging.getLogger(__name__)

JOB_ID = "ledger-compaction"


def compaction_job(
    ledger: Ledger,
    *,
    older_than: timedelta,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> Callable[[], Awaitable[CompactionResult]]:
    """A coroutine function compacting journal days older than ``older_than`` (as of ``clock()``)."""
    if older_than < timedelta(days=1):
        raise ValueError(f"ledger compaction age must be at least one day, got {older_than}")

    async def run() -> CompactionResult:
        result = await compact(ledger, older_than=older_than, now=clock())
        log.info(
            "ledger compaction: %d journal rows before %s folded into %d daily rollups",
            result.journal_rows,
            datetime.fromtimestamp(result.cutoff_ms / 1000, tz=UTC).isoformat(),
            result.rollup_rows,
        )
        return result

    return run


def register_compaction(
    scheduler: Any,
    ledger: Ledger,
    *,
    older_than: timedelta,
    every: timedelta = timedelta(hours=6),
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> Any:
    """Add the compaction job to an APScheduler 3 scheduler (one instance at a time); returns the Job."""
    return scheduler.add_job(
        compaction_job(ledger, older_than=older_than, clock=clock),
        "interval",
        seconds=every.total_seconds(),
        id=JOB_ID,
        replace_existing=True,
        max_instances=1,
        coalesce=True,
    )
