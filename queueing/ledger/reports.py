"""Admin reports: one SQL text per report, the same on PostgreSQL and SQLite up to a few snippets.

The migrations create each report as a view (``report_<name with _>``) on both databases; ``queueing
report`` runs the report's SQL with the time filters bound as parameters, wraps it to apply the column
filters (also bound parameters, column names from a whitelist) and orders the rows. Numbers are
normalised in Python (:func:`normalize`) so that both databases print identical results.

Report SQL conventions: ``{num}(x)`` reads an exact amount as a number; ``{f}`` forces floating point
on SQLite (no integer overflow; exact for integers below 2^53); ``{now_ms}`` is the current time in
epoch milliseconds; ``{day_text}(d)`` prints a day number as YYYY-MM-DD; ``:since_ms``/``:until_ms`` are
optional time bounds (NULL = unbounded).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from queueing.api.quantity import format_amount
from queueing.ledger.types import MS_PER_DAY, from_ms, to_ms


class ReportError(ValueError):
    pass


@dataclass(frozen=True)
class Report:
    name: str
    title: str
    sql: str  # template, see the module docstring
    columns: tuple[str, ...]
    order_by: tuple[str, ...]
    filters: tuple[str, ...]  # columns a user may filter on
    time: str  # "none" | "bounds" (:since_ms/:until_ms inside the SQL) | "day" (filter the day column)
    # columns holding amounts of the resource named in column ``amounts_of``: the table prints them
    # as kubectl prints quantities (``16Gi``, ``500m``); csv and json keep the numbers
    amounts: tuple[str, ...] = ()
    amounts_of: str = "resource"

    @property
    def view(self) -> str:
        return "report_" + self.name.replace("-", "_")


_SNIPPETS: dict[str, dict[str, str]] = {
    "postgresql": {
        "f": "",
        "now_ms": "CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT)",
        "day_text_open": "to_char(DATE '1970-01-01' + CAST(",
        "day_text_close": " AS INTEGER), 'YYYY-MM-DD')",
        "num_open": "(",
        "num_close": ")",
    },
    "sqlite": {
        "f": "1.0 * ",
        "now_ms": "(CAST(strftime('%s', 'now') AS INTEGER) * 1000)",
        "day_text_open": "date(86400 * (",
        "day_text_close": "), 'unixepoch')",
        "num_open": "CAST(",
        "num_close": " AS NUMERIC)",
    },
}

# ---------------------------------------------------------------- the reports
_QUOTA_BASE = """
    SELECT cq.name AS cluster_queue, cq.cohort AS cohort, {num}(cq.fair_sharing_weight) AS weight,
           qt.flavor AS flavor, qt.resource AS resource,
           {num}(qt.nominal) AS nominal, {num}(qt.borrowing_limit) AS borrowing_limit,
           {num}(qt.lending_limit) AS lending_limit,
           COALESCE({num}(u.amount), 0) AS usage
    FROM cluster_queues cq
    JOIN quota_versions qv ON qv.cluster_queue = cq.name AND qv.version = cq.quota_version
    JOIN quotas qt ON qt.quota_version_id = qv.id
    LEFT JOIN queue_usage u
           ON u.cluster_queue = cq.name AND u.flavor = qt.flavor AND u.resource = qt.resource
    WHERE cq.deleted_at_ms IS NULL
"""

_GUARANTEED = (
    "CASE WHEN lending_limit IS NULL THEN 0 "
    "WHEN nominal - lending_limit > 0 THEN nominal - lending_limit ELSE 0 END"
)

USAGE = Report(
    name="usage",
    title="Current usage vs quota per ClusterQueue, flavor and resource (borrowed, lent)",
    sql=f"""
WITH q AS ({_QUOTA_BASE}),
g AS (
    SELECT q.*, {_GUARANTEED} AS guaranteed FROM q
),
b AS (
    SELECT g.*,
           CASE WHEN usage > nominal THEN usage - nominal ELSE 0 END AS borrowed,
           CASE WHEN cohort IS NULL OR nominal - usage <= 0 THEN 0
                WHEN nominal - usage < nominal - guaranteed THEN nominal - usage
                ELSE nominal - guaranteed END AS unused_lendable
    FROM g
),
c AS (
    SELECT b.*,
           SUM(borrowed) OVER (PARTITION BY cohort, flavor, resource) AS cohort_borrowed,
           SUM(unused_lendable) OVER (PARTITION BY cohort, flavor, resource) AS cohort_unused
    FROM b
)
SELECT cluster_queue, cohort, flavor, resource, nominal, borrowing_limit, lending_limit, usage,
       borrowed,
       CASE WHEN cohort IS NULL OR cohort_unused = 0 THEN 0
            WHEN cohort_borrowed < cohort_unused THEN {{f}}unused_lendable * cohort_borrowed / cohort_unused
            ELSE unused_lendable END AS lent
FROM c
""",
    columns=(
        "cluster_queue",
        "cohort",
        "flavor",
        "resource",
        "nominal",
        "borrowing_limit",
        "lending_limit",
        "usage",
        "borrowed",
        "lent",
    ),
    order_by=("cluster_queue", "flavor", "resource"),
    filters=("cluster_queue", "cohort", "flavor", "resource"),
    time="none",
    amounts=("nominal", "borrowing_limit", "lending_limit", "usage", "borrowed", "lent"),
)

DEVICE_HOURS = Report(
    name="device-hours",
    title="Device-hours and GPU-memory-hours (GiB-hours) per namespace, LocalQueue and ClusterQueue per day (UTC)",
    sql="""
WITH RECURSIVE
ev AS (
    SELECT at_ms / 86400000 AS day, namespace, local_queue, cluster_queue, metric, at_ms,
           CASE kind WHEN 'reserve' THEN {num}(amount) ELSE -{num}(amount) END AS delta
    FROM usage_journal WHERE metric IN ('devices', 'device_memory')
),
per_day AS (
    SELECT day, namespace, local_queue, cluster_queue, metric, SUM(delta) AS net,
           SUM({f}delta * ((day + 1) * 86400000 - at_ms)) AS weighted
    FROM ev GROUP BY day, namespace, local_queue, cluster_queue, metric
    UNION ALL
    SELECT day, namespace, local_queue, cluster_queue, metric, {num}(net_amount), {f}{num}(weighted_ms)
    FROM usage_daily WHERE metric IN ('devices', 'device_memory')
),
d AS (
    SELECT CAST(day AS BIGINT) AS day, namespace, local_queue, cluster_queue, metric,
           SUM(net) AS net, SUM(weighted) AS weighted
    FROM per_day GROUP BY day, namespace, local_queue, cluster_queue, metric
),
k AS (
    SELECT namespace, local_queue, cluster_queue, metric, MIN(day) AS first_day,
           CASE WHEN SUM(net) > 0 AND {now_ms} / 86400000 > MAX(day) THEN CAST({now_ms} / 86400000 AS BIGINT)
                ELSE MAX(day) END AS last_day
    FROM d GROUP BY namespace, local_queue, cluster_queue, metric
),
cal (day, namespace, local_queue, cluster_queue, metric, last_day) AS (
    SELECT first_day, namespace, local_queue, cluster_queue, metric, last_day FROM k
    UNION ALL
    SELECT day + 1, namespace, local_queue, cluster_queue, metric, last_day FROM cal WHERE day < last_day
),
filled AS (
    SELECT cal.day, cal.namespace, cal.local_queue, cal.cluster_queue, cal.metric,
           COALESCE(d.net, 0) AS net, COALESCE(d.weighted, 0) AS weighted
    FROM cal LEFT JOIN d
      ON d.day = cal.day AND d.namespace = cal.namespace AND d.local_queue = cal.local_queue
     AND d.cluster_queue = cal.cluster_queue AND d.metric = cal.metric
),
run AS (
    SELECT filled.*,
           SUM(net) OVER (PARTITION BY namespace, local_queue, cluster_queue, metric ORDER BY day
                          ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) - net AS start_usage
    FROM filled
),
integral AS (
    SELECT day, namespace, local_queue, cluster_queue, metric,
           {f}start_usage * 86400000 + weighted
           - CASE WHEN (day + 1) * 86400000 > {now_ms}
                  THEN {f}(start_usage + net) * ((day + 1) * 86400000 - {now_ms}) ELSE 0 END AS amount_ms
    FROM run
)
SELECT {day_text}(day) AS day, namespace, local_queue, cluster_queue,
       ROUND(COALESCE(SUM(CASE WHEN metric = 'devices' THEN amount_ms END), 0) / 3600000.0, 6)
           AS device_hours,
       ROUND(COALESCE(SUM(CASE WHEN metric = 'device_memory' THEN amount_ms END), 0)
             / (3600000.0 * 1073741824), 6) AS gpu_memory_gib_hours
FROM integral
GROUP BY day, namespace, local_queue, cluster_queue
HAVING SUM(CASE WHEN amount_ms <> 0 THEN 1 ELSE 0 END) > 0
""",
    columns=("day", "namespace", "local_queue", "cluster_queue", "device_hours", "gpu_memory_gib_hours"),
    order_by=("day", "namespace", "local_queue", "cluster_queue"),
    filters=("namespace", "local_queue", "cluster_queue"),
    time="day",
)

_TIME_BOUNDS = (
    "(CAST(:since_ms AS BIGINT) IS NULL OR {col} >= CAST(:since_ms AS BIGINT)) AND "
    "(CAST(:until_ms AS BIGINT) IS NULL OR {col} < CAST(:until_ms AS BIGINT))"
)


def _pct(p: int) -> str:
    return f"MAX(CASE WHEN rn = ({p} * n + 99) / 100 THEN wait_ms END) / 1000.0"


WAIT_TIMES = Report(
    name="wait-times",
    title="Wait time (queued to admitted, seconds) p50/p90/p99 per ClusterQueue and per LocalQueue",
    sql=f"""
WITH a AS (
    SELECT cluster_queue, namespace, local_queue, admitted_at_ms - queued_at_ms AS wait_ms
    FROM admissions WHERE {_TIME_BOUNDS.format(col="admitted_at_ms")}
),
g AS (
    SELECT 'ClusterQueue' AS queue_kind, cluster_queue AS queue, wait_ms FROM a
    UNION ALL
    SELECT 'LocalQueue' AS queue_kind, namespace || '/' || local_queue AS queue, wait_ms FROM a
),
r AS (
    SELECT queue_kind, queue, wait_ms,
           ROW_NUMBER() OVER (PARTITION BY queue_kind, queue ORDER BY wait_ms) AS rn,
           COUNT(*) OVER (PARTITION BY queue_kind, queue) AS n
    FROM g
)
SELECT queue_kind, queue, MAX(n) AS admissions,
       ROUND(SUM(wait_ms) / (1000.0 * MAX(n)), 3) AS mean_s,
       {_pct(50)} AS p50_s, {_pct(90)} AS p90_s, {_pct(99)} AS p99_s,
       MAX(wait_ms) / 1000.0 AS max_s
FROM r GROUP BY queue_kind, queue
""",
    columns=("queue_kind", "queue", "admissions", "mean_s", "p50_s", "p90_s", "p99_s", "max_s"),
    order_by=("queue_kind", "queue"),
    filters=("queue_kind", "queue"),
    time="bounds",
)

EVICTIONS_BY_REASON = Report(
    name="evictions-by-reason",
    title="Evictions per reason, with planned vs freed devices",
    sql=f"""
SELECT reason, COUNT(*) AS evictions, COUNT(DISTINCT workload_uid) AS workloads,
       SUM(planned_device_count) AS planned_devices, SUM(freed_device_count) AS freed_devices
FROM evictions WHERE {_TIME_BOUNDS.format(col="evicted_at_ms")}
GROUP BY reason
""",
    columns=("reason", "evictions", "workloads", "planned_devices", "freed_devices"),
    order_by=("reason",),
    filters=("reason",),
    time="bounds",
)

EVICTIONS_BY_QUEUE = Report(
    name="evictions-by-queue",
    title="Evictions per victim ClusterQueue and preemptor ClusterQueue ('' = not a preemption)",
    sql=f"""
SELECT victim_cluster_queue, COALESCE(preemptor_cluster_queue, '') AS preemptor_cluster_queue,
       COUNT(*) AS evictions, SUM(planned_device_count) AS planned_devices,
       SUM(freed_device_count) AS freed_devices
FROM evictions WHERE {_TIME_BOUNDS.format(col="evicted_at_ms")}
GROUP BY victim_cluster_queue, COALESCE(preemptor_cluster_queue, '')
""",
    columns=(
        "victim_cluster_queue",
        "preemptor_cluster_queue",
        "evictions",
        "planned_devices",
        "freed_devices",
    ),
    order_by=("victim_cluster_queue", "preemptor_cluster_queue"),
    filters=("victim_cluster_queue", "preemptor_cluster_queue"),
    time="bounds",
)

FAIR_SHARE = Report(
    name="fair-share",
    title="Fair-share state per cohort member: dominant resource share of the cohort's lendable quota",
    sql=f"""
WITH q AS ({_QUOTA_BASE}),
g AS (
    SELECT q.*, {_GUARANTEED} AS guaranteed,
           CASE WHEN usage > nominal THEN usage - nominal ELSE 0 END AS borrowed
    FROM q WHERE cohort IS NOT NULL
),
c AS (
    SELECT g.*, SUM(nominal - guaranteed) OVER (PARTITION BY cohort, flavor, resource) AS cohort_lendable
    FROM g
),
s AS (
    SELECT c.*, CASE WHEN cohort_lendable > 0 THEN {{f}}borrowed / cohort_lendable ELSE 0 END AS share
    FROM c
),
r AS (
    SELECT s.*, ROW_NUMBER() OVER (PARTITION BY cohort, cluster_queue
                                   ORDER BY share DESC, flavor, resource) AS rn
    FROM s
)
SELECT cohort, cluster_queue, weight,
       CASE WHEN share > 0 THEN flavor END AS dominant_flavor,
       CASE WHEN share > 0 THEN resource END AS dominant_resource,
       borrowed, cohort_lendable, ROUND(share, 6) AS dominant_share,
       CASE WHEN weight > 0 THEN ROUND(share / weight, 6) WHEN share = 0 THEN 0 END AS weighted_share
FROM r WHERE rn = 1
""",
    columns=(
        "cohort",
        "cluster_queue",
        "weight",
        "dominant_flavor",
        "dominant_resource",
        "borrowed",
        "cohort_lendable",
        "dominant_share",
        "weighted_share",
    ),
    order_by=("cohort", "cluster_queue"),
    filters=("cohort", "cluster_queue"),
    time="none",
    amounts=("borrowed", "cohort_lendable"),
    amounts_of="dominant_resource",
)

REPORTS: dict[str, Report] = {
    r.name: r for r in (USAGE, DEVICE_HOURS, WAIT_TIMES, EVICTIONS_BY_REASON, EVICTIONS_BY_QUEUE, FAIR_SHARE)
}


def report_names() -> list[str]:
    return list(REPORTS)


def render_sql(report: Report, dialect: str) -> str:
    """The report's SQL for a dialect (still with :since_ms/:until_ms parameters)."""
    try:
        s = _SNIPPETS[dialect]
    except KeyError:
        raise ReportError(f"reports support postgresql and sqlite, not {dialect}") from None
    sql = report.sql.replace("{f}", s["f"]).replace("{now_ms}", s["now_ms"])
    sql = _replace_call(sql, "{num}", s["num_open"], s["num_close"])
    sql = _replace_call(sql, "{day_text}", s["day_text_open"], s["day_text_close"])
    return sql.strip()


def _replace_call(sql: str, marker: str, open_: str, close: str) -> str:
    """Rewrite ``marker(expr)`` as ``open_ expr close`` (balanced parentheses)."""
    out = []
    i = 0
    while True:
        j = sql.find(marker + "(", i)
        if j < 0:
            out.append(sql[i:])
            return "".join(out)
        out.append(sql[i:j])
        k = j + len(marker) + 1
        depth = 1
        start = k
        while depth:
            if sql[k] == "(":
                depth += 1
            elif sql[k] == ")":
                depth -= 1
            k += 1
        out.append(open_ + sql[start : k - 1] + close)
        i = k


def view_sql(report: Report, dialect: str) -> str:
    """The view body: the report without time bounds."""
    return (
        render_sql(report, dialect)
        .replace("CAST(:since_ms AS BIGINT)", "CAST(NULL AS BIGINT)")
        .replace("CAST(:until_ms AS BIGINT)", "CAST(NULL AS BIGINT)")
    )


# ---------------------------------------------------------------- running
@dataclass(frozen=True)
class ReportResult:
    report: Report
    columns: tuple[str, ...]
    rows: list[tuple[Any, ...]]

    def as_dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, r, strict=True)) for r in self.rows]


async def run_report(
    engine: AsyncEngine,
    name: str,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    where: Mapping[str, str] | None = None,
    from_view: bool = False,
) -> ReportResult:
    """Run a report. ``where`` filters columns by exact value (bound parameters). ``from_view`` reads the
    database view instead of the SQL text (no time bounds then; used to check the views)."""
    report = get_report(name)
    where = dict(where or {})
    for col in where:
        if col not in report.filters:
            raise ReportError(
                f"report {name}: cannot filter on {col!r}; filters: {', '.join(report.filters) or 'none'}"
            )
    if report.time == "none" and (since is not None or until is not None):
        raise ReportError(f"report {name} shows the current state; --since/--until do not apply")
    dialect = engine.dialect.name
    params: dict[str, Any] = {}
    conds: list[str] = []
    inner = report.view if from_view else f"({render_sql(report, dialect)})"
    if report.time == "bounds" and not from_view:
        params["since_ms"] = to_ms(since) if since is not None else None
        params["until_ms"] = to_ms(until) if until is not None else None
    elif report.time == "bounds" and (since is not None or until is not None):
        raise ReportError("time bounds cannot be applied to the view")
    if report.time == "day":
        if since is not None:
            conds.append("r.day >= :since_day")
            params["since_day"] = _day_text(to_ms(since))
        if until is not None:
            # days that start before `until`
            conds.append("r.day < :until_day")
            ums = to_ms(until)
            params["until_day"] = _day_text(ums + MS_PER_DAY - 1)
    for i, (col, value) in enumerate(sorted(where.items())):
        conds.append(f"r.{col} = :w{i}")  # col is from the report's whitelist
        params[f"w{i}"] = value
    sql = f"SELECT {', '.join('r.' + c for c in report.columns)} FROM {inner} r"
    if conds:
        sql += " WHERE " + " AND ".join(conds)
    sql += " ORDER BY " + ", ".join("r." + c for c in report.order_by)
    async with engine.connect() as c:
        if dialect == "postgresql":
            # JIT compilation costs more (~1 s) than these analytic queries take without it
            await c.execute(text("SET LOCAL jit = off"))
        rows = [tuple(normalize(v) for v in row) for row in (await c.execute(text(sql), params)).all()]
    return ReportResult(report, report.columns, rows)


def get_report(name: str) -> Report:
    try:
        return REPORTS[name]
    except KeyError:
        raise ReportError(f"unknown report {name!r}; reports: {', '.join(REPORTS)}") from None


def _day_text(ms: int) -> str:
    return from_ms((ms // MS_PER_DAY) * MS_PER_DAY).strftime("%Y-%m-%d")


_PLACES = Decimal("0.000001")


def normalize(v: Any) -> Any:
    """Numbers as int, or Decimal rounded to 6 places without trailing zeros; text and None unchanged."""
    if v is None or isinstance(v, str | bool):
        return v
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        d = Decimal(repr(v))
    elif isinstance(v, Decimal):
        d = v
    else:
        return v
    d = d.quantize(_PLACES, rounding=ROUND_HALF_EVEN)
    if d == d.to_integral_value():
        return int(d)
    return d.normalize()


def format_rows(result: ReportResult, fmt: str) -> str:
    import csv
    import io
    import json

    cols = list(result.columns)
    if fmt == "json":

        def enc(v: Any) -> Any:
            return float(v) if isinstance(v, Decimal) else v

        return (
            json.dumps([{c: enc(v) for c, v in zip(cols, r, strict=True)} for r in result.rows], indent=2)
            + "\n"
        )
    cells = [["" if v is None else str(v) for v in r] for r in result.rows]
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(cols)
        w.writerows(cells)
        return buf.getvalue()
    if fmt == "table":
        cells = [_table_cells(result.report, cols, r) for r in result.rows]
        widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(cols)]
        lines = ["  ".join(c.upper().ljust(w) for c, w in zip(cols, widths, strict=True)).rstrip()]
        for r in cells:
            lines.append("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
        return "\n".join(lines) + "\n"
    raise ReportError(f"unknown output format {fmt!r} (table, csv, json)")


def _table_cells(report: Report, cols: Sequence[str], row: Sequence[Any]) -> list[str]:
    """A row as the table prints it: amounts of a named resource as quantities (``16Gi``)."""
    values = dict(zip(cols, row, strict=True))
    resource = values.get(report.amounts_of)
    out = []
    for c, v in values.items():
        if v is None:
            out.append("")
        elif c in report.amounts and isinstance(resource, str) and isinstance(v, int | Decimal):
            out.append(format_amount(Fraction(v), resource))
        else:
            out.append(str(v))
    return out


def all_reports() -> Sequence[Report]:
    return list(REPORTS.values())
