"""Retention: fold whole days of the usage journal older than an age into daily rollups.

For each (day, metric, namespace, LocalQueue, ClusterQueue, flavor, resource) a rollup keeps the net
amount (reserved - released) and the weighted amount (sum of signed amount x ms to the day's end). Usage
at any day's end and the amount-time integral of every day follow from these exactly, so every report
gives the same result before and after compaction (a test checks this on both databases).

Sums are exact: SQL ``NUMERIC`` arithmetic on PostgreSQL, :class:`Quantity` arithmetic on SQLite
(which has no exact decimal type).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Numeric, and_, case, cast, delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from queueing.api.quantity import Quantity
from queueing.ledger import models as m
from queueing.ledger.repository import Ledger
from queueing.ledger.types import MS_PER_DAY, quantity_from_number, to_ms

Key = tuple[
    int, str, str, str, str, str, str
]  # day, metric, namespace, local queue, cluster queue, flavor, resource
ZERO = Quantity.from_value(0)


@dataclass(frozen=True)
class CompactionResult:
    cutoff_ms: int  # journal rows before this instant (a UTC midnight) were compacted
    journal_rows: int
    rollup_rows: int


def cutoff_for(now: datetime | int | float, older_than: timedelta) -> int:
    """The UTC midnight at or before ``now - older_than``, in epoch ms (whole days only)."""
    limit = to_ms(now) - int(older_than.total_seconds() * 1000)
    return (limit // MS_PER_DAY) * MS_PER_DAY


async def compact(ledger: Ledger, *, older_than: timedelta, now: datetime | int | float) -> CompactionResult:
    """Compact every journal row of whole UTC days that ended at least ``older_than`` before ``now``."""
    cutoff = cutoff_for(now, older_than)
    async with ledger.engine.begin() as c:
        max_id = (
            await c.execute(select(func.max(m.JournalEntry.id)).where(m.JournalEntry.at_ms < cutoff))
        ).scalar_one()
        if max_id is None:
            return CompactionResult(cutoff, 0, 0)
        in_scope = and_(m.JournalEntry.at_ms < cutoff, m.JournalEntry.id <= max_id)
        if c.dialect.name == "postgresql":
            sums = await _sums_sql(c, in_scope)
        else:
            sums = await _sums_python(c, in_scope)
        rollups = await _merge(c, sums)
        deleted = (await c.execute(delete(m.JournalEntry).where(in_scope))).rowcount
        return CompactionResult(cutoff, int(deleted or 0), rollups)


async def _sums_sql(c: AsyncConnection, in_scope: Any) -> dict[Key, tuple[Quantity, Quantity, int]]:
    j = m.JournalEntry
    day_no = j.at_ms // MS_PER_DAY
    day = day_no.label("day")
    amount = cast(j.__table__.c.amount, Numeric(38, 9))
    delta = case((j.kind == m.RESERVE, amount), else_=-amount)
    weighted = delta * ((day_no + 1) * MS_PER_DAY - j.at_ms)
    q = (
        select(
            day,
            j.metric,
            j.namespace,
            j.local_queue,
            j.cluster_queue,
            j.flavor,
            j.resource,
            func.sum(delta).label("net"),
            func.sum(weighted).label("weighted"),
            func.count().label("n"),
        )
        .where(in_scope)
        .group_by(day, j.metric, j.namespace, j.local_queue, j.cluster_queue, j.flavor, j.resource)
    )
    out: dict[Key, tuple[Quantity, Quantity, int]] = {}
    for r in (await c.execute(q)).all():
        key = (int(r.day), r.metric, r.namespace, r.local_queue, r.cluster_queue, r.flavor, r.resource)
        out[key] = (quantity_from_number(r.net), quantity_from_number(r.weighted), int(r.n))
    return out


async def _sums_python(c: AsyncConnection, in_scope: Any) -> dict[Key, tuple[Quantity, Quantity, int]]:
    j = m.JournalEntry
    out: dict[Key, tuple[Quantity, Quantity, int]] = {}
    result = await c.stream(
        select(
            j.at_ms,
            j.kind,
            j.metric,
            j.namespace,
            j.local_queue,
            j.cluster_queue,
            j.flavor,
            j.resource,
            j.amount,
        ).where(in_scope)
    )
    async for r in result:
        day = r.at_ms // MS_PER_DAY
        key = (day, r.metric, r.namespace, r.local_queue, r.cluster_queue, r.flavor, r.resource)
        delta: Quantity = r.amount if r.kind == m.RESERVE else -r.amount
        net, weighted, n = out.get(key, (ZERO, ZERO, 0))
        out[key] = (net + delta, weighted + delta * ((day + 1) * MS_PER_DAY - r.at_ms), n + 1)
    return out


async def _merge(c: AsyncConnection, sums: dict[Key, tuple[Quantity, Quantity, int]]) -> int:
    """Add the sums to the rollups (a day compacted before may get late rows)."""
    d = m.DailyUsage
    days = sorted({k[0] for k in sums})
    existing: dict[Key, Any] = {}
    for chunk in _chunks(days, 500):
        for r in (await c.execute(select(d).where(d.day.in_(chunk)))).all():
            existing[(r.day, r.metric, r.namespace, r.local_queue, r.cluster_queue, r.flavor, r.resource)] = r
    new_rows = []
    for key, (net, weighted, n) in sums.items():
        old = existing.get(key)
        if old is None:
            new_rows.append(
                dict(
                    zip(
                        ("day", "metric", "namespace", "local_queue", "cluster_queue", "flavor", "resource"),
                        key,
                        strict=True,
                    )
                )
                | {"net_amount": net, "weighted_ms": weighted, "events": n}
            )
        else:
            await c.execute(
                update(d)
                .where(
                    d.day == key[0],
                    d.metric == key[1],
                    d.namespace == key[2],
                    d.local_queue == key[3],
                    d.cluster_queue == key[4],
                    d.flavor == key[5],
                    d.resource == key[6],
                )
                .values(
                    net_amount=old.net_amount + net,
                    weighted_ms=old.weighted_ms + weighted,
                    events=old.events + n,
                )
            )
    for chunk in _chunks(new_rows, 1000):
        await c.execute(insert(d), chunk)
    return len(sums)


def _chunks(items: list[Any], n: int) -> Iterable[list[Any]]:
    for i in range(0, len(items), n):
        yield items[i : i + n]
