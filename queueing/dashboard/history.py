"""The History page from the ledger: the ``queueing report`` reports (the same SQL, through
:func:`queueing.ledger.reports.run_report`), the latest admissions, releases and evictions, and the
devices in use over time (the ``devices`` metric of the usage journal, the journal ``device-hours``
integrates)."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from queueing.ledger import models as m
from queueing.ledger.reports import ReportError, run_report

__all__ = ["ledger_history"]

UTILISATION_POINTS = 2000


def _value(q: Any) -> Fraction:
    return q.value if hasattr(q, "value") else Fraction(q)


async def ledger_history(engine: AsyncEngine, reports: Sequence[str], events: int) -> dict[str, Any]:
    out: dict[str, Any] = {"events": [], "utilisation": [], "reports": []}
    try:
        async with engine.connect() as c:
            names = {
                r.uid: f"{r.namespace}/{r.name}"
                for r in (
                    await c.execute(select(m.Workload.uid, m.Workload.namespace, m.Workload.name))
                ).all()
            }
            adms = (
                await c.execute(select(m.Admission).order_by(m.Admission.admitted_at_ms.desc()).limit(events))
            ).all()
            evs = (
                await c.execute(select(m.Eviction).order_by(m.Eviction.evicted_at_ms.desc()).limit(events))
            ).all()
            base = (
                await c.execute(select(m.DailyUsage.net_amount).where(m.DailyUsage.metric == "devices"))
            ).all()
            journal = (
                await c.execute(
                    select(m.JournalEntry.at_ms, m.JournalEntry.kind, m.JournalEntry.amount)
                    .where(m.JournalEntry.metric == "devices")
                    .order_by(m.JournalEntry.at_ms, m.JournalEntry.id)
                )
            ).all()
    except (SQLAlchemyError, OSError) as e:
        msg = str(getattr(e, "orig", None) or e).strip().splitlines()[0]
        out["error"] = f"ledger: {msg}"
        return out
    rows: list[dict[str, Any]] = []
    for a in adms:
        who = names.get(a.workload_uid, a.workload_uid)
        rows.append(
            {
                "time": a.admitted_at_ms / 1000,
                "event": "Admitted",
                "workload": who,
                "clusterQueue": a.cluster_queue,
                "detail": f"attempt {a.attempt}",
            }
        )
        if a.released_at_ms is not None:
            rows.append(
                {
                    "time": a.released_at_ms / 1000,
                    "event": "Released",
                    "workload": who,
                    "clusterQueue": a.cluster_queue,
                    "detail": a.release_reason or "",
                }
            )
    for ev in evs:
        by = f" by {names.get(ev.preemptor_uid, ev.preemptor_uid)}" if ev.preemptor_uid else ""
        rows.append(
            {
                "time": ev.evicted_at_ms / 1000,
                "event": "Evicted",
                "workload": names.get(ev.workload_uid, ev.workload_uid),
                "clusterQueue": ev.victim_cluster_queue,
                "detail": f"{ev.reason}{by}: freed {ev.freed_device_count} of {ev.planned_device_count} device(s)",
            }
        )
    rows.sort(key=lambda r: (-r["time"], r["event"]))
    out["events"] = rows[:events]
    level = sum((_value(b.net_amount) for b in base), Fraction(0))
    series: list[list[float]] = []
    for j in journal:
        level += _value(j.amount) if j.kind == "reserve" else -_value(j.amount)
        point = [j.at_ms / 1000, float(level)]
        if series and series[-1][0] == point[0]:
            series[-1] = point
        else:
            series.append(point)
    out["utilisation"] = series[-UTILISATION_POINTS:]
    for name in reports:
        try:
            r = await run_report(engine, name)
        except (ReportError, SQLAlchemyError, OSError) as e:
            out["reports"].append({"name": name, "title": name, "columns": [], "rows": [], "error": str(e)})
            continue
        out["reports"].append(
            {
                "name": name,
                "title": r.report.title,
                "columns": list(r.columns),
                "rows": [list(x) for x in r.rows],
            }
        )
    return out
