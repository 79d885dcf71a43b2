"""Reports over the known history of scenario.py: exact numbers, derived by hand (see each comment)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from sqlalchemy import text

from queueing.ledger.compaction import compact
from queueing.ledger.reports import REPORTS, ReportError, format_rows, run_report
from queueing.ledger.repository import Ledger
from queueing.ledger.state import ClusterQueueSpec, QuotaSpec

from . import scenario as sc

D = Decimal

# usage now: team-a holds w5 (2 GPU, 16 CPU); team-b holds w4 (10 GPU: 2 above its nominal 8).
# team-a's unused lendable GPUs = min(8-2, lending limit 4) = 4; the cohort borrows 2 of them -> lent 2.
EXPECTED_USAGE = [
    ("solo", None, "h200", "nvidia.com/gpu", 2, None, None, 0, 0, 0),
    ("team-a", "research", "default", "cpu", 64, None, None, 16, 0, 0),
    ("team-a", "research", "h200", "nvidia.com/gpu", 8, 4, 4, 2, 0, 2),
    ("team-b", "research", "h200", "nvidia.com/gpu", 8, None, None, 10, 2, 0),
]

# device-hours: w1 4 devices x 2 h on d0; w2 12 devices 22:00 d0 -> 02:00 d2; w6 2 devices x 1 h on d1.
# GiB-hours = device-hours x 16 (every device has 16Gi).
EXPECTED_DEVICE_HOURS = [
    ("2024-03-01", "bio", "main", "team-b", 24, 384),
    ("2024-03-01", "ml", "train", "team-a", 8, 128),
    ("2024-03-02", "bio", "main", "team-b", 288, 4608),
    ("2024-03-02", "ml", "train", "team-a", 2, 32),
    ("2024-03-03", "bio", "main", "team-b", 24, 384),
]

# waits (s): team-a w1 3600, w6 3600, w7 0, w5 60; team-b w2 3600, w4 59400 (d1 10:30 -> d2 03:00);
# solo 1..10. Nearest-rank percentiles: rank = ceil(p * n / 100).
EXPECTED_WAITS = [
    ("ClusterQueue", "solo", 10, D("5.5"), 5, 9, 10, 10),
    ("ClusterQueue", "team-a", 4, 1815, 60, 3600, 3600, 3600),
    ("ClusterQueue", "team-b", 2, 31500, 3600, 59400, 59400, 59400),
    ("LocalQueue", "bio/main", 2, 31500, 3600, 59400, 59400, 59400),
    ("LocalQueue", "ml/infer", 1, 0, 0, 0, 0, 0),
    ("LocalQueue", "ml/train", 3, 2420, 3600, 3600, 3600, 3600),
    ("LocalQueue", "ops/q", 10, D("5.5"), 5, 9, 10, 10),
]

EXPECTED_EVICTIONS_BY_REASON = [
    ("PodsReadyTimeout", 1, 1, 0, 0),
    ("Preempted", 1, 1, 2, 1),
]
EXPECTED_EVICTIONS_BY_QUEUE = [
    ("team-a", "", 1, 0, 0),
    ("team-a", "team-b", 1, 2, 1),
]
# cohort lendable GPUs = (8 - (8-4)) + 8 = 12; team-b borrows 2 -> 2/12; weight 2 -> 1/12.
EXPECTED_FAIR_SHARE = [
    ("research", "team-a", 1, None, None, 0, 64, 0, 0),
    ("research", "team-b", 2, "h200", "nvidia.com/gpu", 2, 12, D("0.166667"), D("0.083333")),
]

EXPECTED = {
    "usage": EXPECTED_USAGE,
    "device-hours": EXPECTED_DEVICE_HOURS,
    "wait-times": EXPECTED_WAITS,
    "evictions-by-reason": EXPECTED_EVICTIONS_BY_REASON,
    "evictions-by-queue": EXPECTED_EVICTIONS_BY_QUEUE,
    "fair-share": EXPECTED_FAIR_SHARE,
}


async def all_reports(led: Ledger, **kw: object) -> dict[str, list[tuple[object, ...]]]:
    return {name: (await run_report(led.engine, name, **kw)).rows for name in REPORTS}  # type: ignore[arg-type]


def test_every_report_has_expectations() -> None:
    assert set(EXPECTED) == set(REPORTS)


async def test_reports_give_the_hand_computed_numbers(ledger: Ledger) -> None:
    await sc.build(ledger)
    got = await all_reports(ledger)
    for name, rows in EXPECTED.items():
        assert got[name] == rows, name


async def test_views_equal_the_report_command(ledger: Ledger) -> None:
    await sc.build(ledger)
    for name in REPORTS:
        via_view = await run_report(ledger.engine, name, from_view=True)
        assert via_view.rows == EXPECTED[name], name


async def test_time_filters(ledger: Ledger) -> None:
    await sc.build(ledger)
    # device-hours: days that start in [since, until)
    r = await run_report(ledger.engine, "device-hours", since=sc.t(1), until=sc.t(2))
    assert r.rows == EXPECTED_DEVICE_HOURS[2:4]
    r = await run_report(ledger.engine, "device-hours", since=sc.t(1, 12), until=sc.t(2, 1))
    assert r.rows == EXPECTED_DEVICE_HOURS[2:]  # d1 (partly in range) .. d2 (starts before until)
    # wait times by admission time: only the solo queue on day 3
    r = await run_report(ledger.engine, "wait-times", since=sc.t(3))
    assert [row[:2] for row in r.rows] == [("ClusterQueue", "solo"), ("LocalQueue", "ops/q")]
    r = await run_report(ledger.engine, "evictions-by-reason", until=sc.t(1, 12))
    assert r.rows == [("Preempted", 1, 1, 2, 1)]
    with pytest.raises(ReportError, match="current state"):
        await run_report(ledger.engine, "usage", since=sc.t(1))


async def test_filters_are_bound_parameters(ledger: Ledger) -> None:
    await sc.build(ledger)
    hostile = [
        "team-a' OR '1'='1",
        "team-a'; DROP TABLE usage_journal; --",
        'x" OR 1=1 --',
        "%",
        "team-a\\",
    ]
    for value in hostile:
        for name, col in (
            ("usage", "cluster_queue"),
            ("device-hours", "namespace"),
            ("fair-share", "cohort"),
        ):
            r = await run_report(ledger.engine, name, where={col: value})
            assert r.rows == [], (name, value)
    # the tables are all still there and intact
    assert (await run_report(ledger.engine, "device-hours")).rows == EXPECTED_DEVICE_HOURS
    # a queue whose name is itself hostile is found exactly, and only it
    evil = "o'brien\"; DELETE FROM quotas; --"
    await ledger.upsert_cluster_queue(
        ClusterQueueSpec(evil, quotas=(QuotaSpec("f", "r", sc.Q("3")),)), at=sc.t(5)
    )
    r = await run_report(ledger.engine, "usage", where={"cluster_queue": evil})
    assert r.rows == [(evil, None, "f", "r", 3, None, None, 0, 0, 0)]
    assert len((await run_report(ledger.engine, "usage")).rows) == len(EXPECTED_USAGE) + 1
    # column names come from a whitelist
    with pytest.raises(ReportError, match="cannot filter"):
        await run_report(ledger.engine, "usage", where={"1=1; DROP TABLE quotas; --": "x"})


@pytest.mark.postgres
async def test_sqlite_and_postgres_print_identical_reports(pg_url: str, sqlite_template, tmp_path) -> None:
    import shutil

    db = tmp_path / "same.db"
    shutil.copy(sqlite_template, db)
    outputs = []
    for url in (f"sqlite+aiosqlite:///{db}", pg_url):
        led = Ledger.from_url(url)
        try:
            await led.delete_everything()
            await sc.build(led)
            texts = {}
            for name in REPORTS:
                res = await run_report(led.engine, name)
                texts[name] = {fmt: format_rows(res, fmt) for fmt in ("table", "csv", "json")}
            outputs.append(texts)
        finally:
            await led.close()
    assert outputs[0] == outputs[1]


async def test_compaction_changes_no_report(ledger: Ledger) -> None:
    await sc.build(ledger)
    before = await all_reports(ledger)
    journal_before = await ledger.journal_count()
    usage_d2 = await ledger.usage_at(sc.t(2))  # a day end

    # first only day 0 (cutoff d1 00:00), then everything up to d4 00:00
    r1 = await compact(ledger, older_than=timedelta(days=1), now=sc.t(2, 12))
    assert r1.cutoff_ms == int(sc.t(1).timestamp() * 1000)
    assert 0 < r1.journal_rows < journal_before
    assert await all_reports(ledger) == before
    r2 = await compact(ledger, older_than=timedelta(days=1), now=sc.t(5, 6))
    assert r1.journal_rows + r2.journal_rows == journal_before
    assert await ledger.journal_count() == 0
    assert await all_reports(ledger) == before
    assert await ledger.usage_at(sc.t(2)) == usage_d2
    # nothing left: a second run is a no-op
    r3 = await compact(ledger, older_than=timedelta(days=1), now=sc.t(5, 6))
    assert (r3.journal_rows, r3.rollup_rows) == (0, 0)


async def test_compaction_merges_late_rows_into_an_existing_rollup(ledger: Ledger) -> None:
    await sc.build(ledger)
    await compact(ledger, older_than=timedelta(days=1), now=sc.t(5))
    before = await all_reports(ledger)
    # a late 1-device reservation+release on day 1 (00:00 -> 06:00), then compact again
    from queueing.ledger.repository import JournalEvent

    ev = dict(
        workload_uid="late",
        namespace="ml",
        local_queue="train",
        cluster_queue="team-a",
        flavor="",
        resource="gpu.nvidia.com",
        metric="devices",
        amount=sc.Q("1"),
    )
    await ledger.append_journal(
        [
            JournalEvent(at_ms=int(sc.t(1).timestamp() * 1000), kind="reserve", **ev),  # type: ignore[arg-type]
            JournalEvent(at_ms=int(sc.t(1, 6).timestamp() * 1000), kind="release", **ev),  # type: ignore[arg-type]
        ]
    )
    res = await compact(ledger, older_than=timedelta(days=1), now=sc.t(5))
    assert res.journal_rows == 2
    after = await all_reports(ledger)
    expected = list(before["device-hours"])
    expected[3] = ("2024-03-02", "ml", "train", "team-a", 8, 32)  # 2 + 6 device-hours
    assert after["device-hours"] == expected


async def test_running_workloads_count_up_to_now(ledger: Ledger) -> None:
    """A workload admitted 2 days ago and still running: full days count 24 h."""
    from queueing.ledger.state import AdmissionRequest, WorkloadSpec

    await sc.queues(ledger)
    start = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=2)
    await ledger.add_workload(WorkloadSpec("r1", "ml", "r1", "train"), at=start)
    await ledger.admit(AdmissionRequest("r1", "team-a", sc.gpu(1), sc.devices(1)), at=start)
    rows = (await run_report(ledger.engine, "device-hours", until=start + timedelta(days=2))).rows
    assert rows == [
        (start.strftime("%Y-%m-%d"), "ml", "train", "team-a", 24, 384),
        ((start + timedelta(days=1)).strftime("%Y-%m-%d"), "ml", "train", "team-a", 24, 384),
    ]
    today = (await run_report(ledger.engine, "device-hours", since=start + timedelta(days=2))).rows
    assert len(today) == 1 and 0 <= today[0][4] <= 24


def test_json_and_csv_output() -> None:
    from queueing.ledger.reports import ReportResult

    res = ReportResult(
        REPORTS["wait-times"],
        REPORTS["wait-times"].columns,
        [("ClusterQueue", "solo", 10, D("5.5"), 5, 9, 10, 10)],
    )
    data = json.loads(format_rows(res, "json"))
    assert data == [
        {
            "queue_kind": "ClusterQueue",
            "queue": "solo",
            "admissions": 10,
            "mean_s": 5.5,
            "p50_s": 5,
            "p90_s": 9,
            "p99_s": 10,
            "max_s": 10,
        }
    ]
    assert format_rows(res, "csv").splitlines() == [
        "queue_kind,queue,admissions,mean_s,p50_s,p90_s,p99_s,max_s",
        "ClusterQueue,solo,10,5.5,5,9,10,10",
    ]
    table = format_rows(res, "table").splitlines()
    assert table[0].split() == [c.upper() for c in res.columns]
    assert table[1].split() == ["ClusterQueue", "solo", "10", "5.5", "5", "9", "10", "10"]


def test_table_prints_amounts_as_quantities() -> None:
    from queueing.ledger.reports import ReportResult

    usage = REPORTS["usage"]
    rows = [
        ("team-a", "research", "default", "memory", 68719476736, None, 34359738368, 17179869184, 0, 0),
        ("team-a", "research", "default", "cpu", 64, None, None, D("0.5"), 0, D("1.5")),
        ("team-a", "research", "h200", "gpu.nvidia.com", 8, 4, None, 2, 0, 2),
    ]
    res = ReportResult(usage, usage.columns, rows)
    table = [line.split() for line in format_rows(res, "table").splitlines()[1:]]
    assert table == [
        ["team-a", "research", "default", "memory", "64Gi", "32Gi", "16Gi", "0", "0"],
        ["team-a", "research", "default", "cpu", "64", "500m", "0", "1500m"],
        ["team-a", "research", "h200", "gpu.nvidia.com", "8", "4", "2", "0", "2"],
    ]
    # csv and json keep the numbers
    assert (
        format_rows(res, "csv").splitlines()[1]
        == "team-a,research,default,memory,68719476736,,34359738368,17179869184,0,0"
    )
    assert json.loads(format_rows(res, "json"))[1]["usage"] == 0.5
    fair = REPORTS["fair-share"]
    rows = [("research", "team-b", 1, "default", "memory", 2147483648, 8589934592, D("0.25"), D("0.25"))]
    line = format_rows(ReportResult(fair, fair.columns, rows), "table").splitlines()[1].split()
    assert line == ["research", "team-b", "1", "default", "memory", "2Gi", "8Gi", "0.25", "0.25"]


async def test_views_exist_in_the_database(ledger: Ledger) -> None:
    async with ledger.engine.connect() as c:
        for report in REPORTS.values():
            rows = (await c.execute(text(f"SELECT COUNT(*) FROM {report.view}"))).scalar_one()
            assert rows == 0
