"""Benchmark the SQL ledger on PostgreSQL: journal events/s and the admin reports over 1 M journal rows.

    python bench/ledger.py                       # throwaway database on 127.0.0.1:5432, dropped at the end
    python bench/ledger.py --rows 200000         # smaller
    python bench/ledger.py --url postgresql+asyncpg://postgres@127.0.0.1:5432/mydb --keep

Measures
  1. raw journal appends (``Ledger.append_journal``, batches of --batch rows): events/s;
  2. full admissions and releases (``Ledger.admit_many`` / ``Ledger.finish_many`` in batches): journal
     events/s through the transactional path with quota checks and row locks;
  3. every report (``queueing.ledger.reports.run_report``) over the journal of --rows rows (plus matching
     admissions and evictions), best of --repeat runs. Targets: >= 5,000 events/s; each report <= 2 s.
Results go to stdout as a Markdown table (docs/performance/ledger.md keeps the last run).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import secrets
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import insert

from queueing.api.quantity import Quantity
from queueing.ledger import models as m
from queueing.ledger.engine import create_engine
from queueing.ledger.migrate import upgrade_async
from queueing.ledger.reports import REPORTS, run_report
from queueing.ledger.repository import JournalEvent, Ledger
from queueing.ledger.state import (
    AdmissionRequest,
    Charge,
    ClusterQueueSpec,
    LocalQueueSpec,
    PlannedDevice,
    PodPlan,
    QuotaSpec,
    WorkloadSpec,
)

DAY_MS = 86_400_000
T0 = 1_704_067_200_000  # 2024-01-01T00:00:00Z
GPU = "nvidia.com/gpu"
MEM = Quantity.parse("143771Mi")
N_CQ = 20
N_NS = 50
ROWS_PER_ADMISSION = 8  # reserve+release of gpu quota, cpu quota, devices, device memory


async def _admin(server: str, sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(server.replace("+asyncpg", "") + "/postgres")
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def setup_queues(led: Ledger) -> None:
    for i in range(N_CQ):
        await led.upsert_cluster_queue(
            ClusterQueueSpec(
                f"cq-{i:02d}",
                cohort=f"cohort-{i % 4}",
                quotas=(
                    QuotaSpec("h200", GPU, Quantity.parse("1000000")),
                    QuotaSpec("default", "cpu", Quantity.parse("100000000")),
                ),
            ),
            at=T0 / 1000,
        )
    for j in range(N_NS):
        await led.upsert_local_queue(
            LocalQueueSpec(f"ns-{j:02d}", "main", f"cq-{j % N_CQ:02d}"), at=T0 / 1000
        )


async def bench_raw_journal(led: Ledger, rows: int, batch: int) -> tuple[float, int]:
    """Append `rows` journal rows (reserve/release pairs) in batches; returns (events/s, admissions)."""
    rng = random.Random(1)
    admissions = rows // ROWS_PER_ADMISSION
    span_ms = 90 * DAY_MS
    buf: list[JournalEvent] = []
    written = 0
    start = time.perf_counter()
    adm_rows = []
    ev_rows = []
    for a in range(admissions):
        ns = rng.randrange(N_NS)
        cq = f"cq-{ns % N_CQ:02d}"
        n = rng.choice((1, 2, 4, 8))
        t_in = T0 + rng.randrange(span_ms)
        t_out = t_in + rng.randrange(60_000, 2 * DAY_MS)
        uid = f"wl-{a}"
        base = dict(
            workload_uid=uid,
            namespace=f"ns-{ns:02d}",
            local_queue="main",
            cluster_queue=cq,
            admission_id=a + 1,
        )
        for kind, at in (("reserve", t_in), ("release", t_out)):
            buf.append(
                JournalEvent(
                    at_ms=at,
                    kind=kind,
                    metric="quota",
                    flavor="h200",
                    resource=GPU,
                    amount=Quantity.from_value(n),
                    **base,
                )
            )
            buf.append(
                JournalEvent(
                    at_ms=at,
                    kind=kind,
                    metric="quota",
                    flavor="default",
                    resource="cpu",
                    amount=Quantity.from_value(16 * n),
                    **base,
                )
            )
            buf.append(
                JournalEvent(
                    at_ms=at,
                    kind=kind,
                    metric="devices",
                    flavor="",
                    resource="gpu.nvidia.com",
                    amount=Quantity.from_value(n),
                    **base,
                )
            )
            buf.append(
                JournalEvent(
                    at_ms=at,
                    kind=kind,
                    metric="device_memory",
                    flavor="",
                    resource="gpu.nvidia.com",
                    amount=MEM * n,
                    **base,
                )
            )
        adm_rows.append((uid, cq, ns, t_in - rng.randrange(0, 3_600_000), t_in, t_out))
        if a % 10 == 0:
            ev_rows.append(
                (
                    a + 1,
                    uid,
                    cq,
                    ns,
                    t_out,
                    rng.choice(("Preempted", "PodsReadyTimeout", "NodeLost")),
                    f"cq-{rng.randrange(N_CQ):02d}",
                    n,
                    rng.randrange(n + 1),
                )
            )
        if len(buf) >= batch:
            written += await led.append_journal(buf)
            buf = []
    if buf:
        written += await led.append_journal(buf)
    elapsed = time.perf_counter() - start
    await _bulk_admissions(led, adm_rows, ev_rows)
    return written / elapsed, admissions


async def _bulk_admissions(led: Ledger, adm_rows: list, ev_rows: list) -> None:
    """Workloads, admissions and evictions matching the journal (for the wait-time and eviction reports)."""
    async with led.engine.begin() as c:
        for i in range(0, len(adm_rows), 5000):
            chunk = adm_rows[i : i + 5000]
            await c.execute(
                insert(m.Workload),
                [
                    dict(
                        uid=uid,
                        namespace=f"ns-{ns:02d}",
                        name=uid,
                        local_queue="main",
                        cluster_queue=cq,
                        priority=0,
                        requests_json="{}",
                        state="finished",
                        created_at_ms=q,
                        queued_at_ms=q,
                        admitted_at_ms=t_in,
                        finished_at_ms=t_out,
                        updated_at_ms=t_out,
                    )
                    for uid, cq, ns, q, t_in, t_out in chunk
                ],
            )
            await c.execute(
                insert(m.Admission),
                [
                    dict(
                        id=i + k + 1,
                        workload_uid=uid,
                        attempt=1,
                        cluster_queue=cq,
                        quota_version=1,
                        namespace=f"ns-{ns:02d}",
                        local_queue="main",
                        flavors_json="{}",
                        queued_at_ms=q,
                        admitted_at_ms=t_in,
                        released_at_ms=t_out,
                        release_reason="Finished",
                    )
                    for k, (uid, cq, ns, q, t_in, t_out) in enumerate(chunk)
                ],
            )
        for i in range(0, len(ev_rows), 5000):
            await c.execute(
                insert(m.Eviction),
                [
                    dict(
                        admission_id=aid,
                        workload_uid=uid,
                        victim_cluster_queue=cq,
                        victim_namespace=f"ns-{ns:02d}",
                        victim_local_queue="main",
                        preemptor_uid=None,
                        preemptor_cluster_queue=pcq if reason == "Preempted" else None,
                        reason=reason,
                        message="",
                        evicted_at_ms=t,
                        planned_devices_json="[]",
                        freed_devices_json="[]",
                        planned_device_count=n,
                        freed_device_count=freed,
                    )
                    for aid, uid, cq, ns, t, reason, pcq, n, freed in ev_rows[i : i + 5000]
                ],
            )
        if c.dialect.name == "postgresql":
            from sqlalchemy import text

            await c.execute(
                text(
                    "SELECT setval(pg_get_serial_sequence('admissions', 'id'), "
                    "(SELECT MAX(id) FROM admissions))"
                )
            )
            await c.execute(text("ANALYZE"))


async def bench_admissions(led: Ledger, n: int, batch: int) -> tuple[float, float]:
    """Full admit (quota check, locks, plan, journal), then finish, in batches (one transaction each,
    8 concurrent); returns journal events/s of both."""
    specs = [WorkloadSpec(f"b-{i}", f"ns-{i % N_NS:02d}", f"b-{i}", "main") for i in range(n)]
    for s in specs:
        await led.add_workload(s, at=T0 / 1000)
    reqs = [
        AdmissionRequest(
            s.uid,
            f"cq-{i % N_NS % N_CQ:02d}",
            (Charge("h200", GPU, Quantity.from_value(1)), Charge("default", "cpu", Quantity.from_value(16))),
            (PodPlan(0, "node-1", (PlannedDevice("gpu.nvidia.com/node-1/gpu-0", "gpu.nvidia.com", MEM),)),),
        )
        for i, s in enumerate(specs)
    ]
    before = await led.journal_count()
    start = time.perf_counter()
    by_cq: dict[str, list[AdmissionRequest]] = {}
    for r in reqs:
        by_cq.setdefault(r.cluster_queue, []).append(r)
    batches = [lst[i : i + batch] for lst in by_cq.values() for i in range(0, len(lst), batch)]
    sem = asyncio.Semaphore(8)

    async def run(b: list[AdmissionRequest]) -> None:
        async with sem:
            await led.admit_many(b, at=T0 / 1000 + 1)

    await asyncio.gather(*(run(b) for b in batches))
    admit_s = time.perf_counter() - start
    admitted_rows = await led.journal_count() - before
    start = time.perf_counter()

    async def fin(b: list[AdmissionRequest]) -> None:
        async with sem:
            await led.finish_many([r.workload_uid for r in b], at=T0 / 1000 + 3600)

    await asyncio.gather(*(fin(b) for b in batches))  # (reports should not see them running until today)
    release_s = time.perf_counter() - start
    return admitted_rows / admit_s, admitted_rows / release_s


async def bench_reports(led: Ledger, repeat: int) -> dict[str, tuple[float, int]]:
    out = {}
    for name in REPORTS:
        best = float("inf")
        rows = 0
        for _ in range(repeat):
            t = time.perf_counter()
            res = await run_report(led.engine, name)
            best = min(best, time.perf_counter() - t)
            rows = len(res.rows)
        out[name] = (best, rows)
    return out


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", default="postgresql+asyncpg://postgres@127.0.0.1:5432")
    ap.add_argument("--url", help="use this (empty) database instead of a throwaway one")
    ap.add_argument("--rows", type=int, default=1_000_000, help="journal rows for the report benchmark")
    ap.add_argument("--batch", type=int, default=5000, help="rows per INSERT batch")
    ap.add_argument("--admissions", type=int, default=2000, help="full admissions to time")
    ap.add_argument("--admit-batch", type=int, default=50, help="admissions per transaction")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="keep the throwaway database")
    args = ap.parse_args()

    dbname = None
    url = args.url
    if url is None:
        dbname = f"queueing_bench_{secrets.token_hex(4)}"
        await _admin(args.server, f'CREATE DATABASE "{dbname}"')
        url = f"{args.server}/{dbname}"
    engine = create_engine(url)
    led = Ledger(engine)
    try:
        await upgrade_async(engine)
        await setup_queues(led)
        raw_rate, _ = await bench_raw_journal(led, args.rows, args.batch)
        print(
            f"raw journal append: {raw_rate:,.0f} events/s ({args.rows:,} rows, batches of {args.batch})",
            flush=True,
        )
        adm_rate, rel_rate = await bench_admissions(led, args.admissions, args.admit_batch)
        print(
            f"full admissions: {adm_rate:,.0f} journal events/s ({args.admissions} admissions, "
            f"{args.admit_batch} per transaction, 8 concurrent)",
            flush=True,
        )
        print(
            f"full releases (finish_many): {rel_rate:,.0f} journal events/s (same batches)",
            flush=True,
        )
        total = await led.journal_count()
        results = await bench_reports(led, args.repeat)
        print(f"\n| report | rows out | best of {args.repeat} (s) | target <= 2 s |")
        print("|---|---|---|---|")
        for name, (secs, rows) in results.items():
            print(f"| {name} | {rows} | {secs:.3f} | {'ok' if secs <= 2 else 'MISSED'} |")
        print(f"\njournal rows: {total:,}")
        ok = raw_rate >= 5000 and all(s <= 2 for s, _ in results.values())
        return 0 if ok else 1
    finally:
        await led.close()
        if dbname and not args.keep:
            await _admin(args.server, f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
