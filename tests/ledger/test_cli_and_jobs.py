"""``queueing report`` end to end (SQLite file), and the APScheduler compaction job factory."""

from __future__ import annotations

import csv
import io
import json
import shutil
from datetime import timedelta
from pathlib import Path

import pytest
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from queueing.cli import main
from queueing.ledger.jobs import JOB_ID, compaction_job, register_compaction
from queueing.ledger.reports import REPORTS
from queueing.ledger.repository import Ledger

from . import scenario as sc
from .conftest import run_async


@pytest.fixture(scope="module")
def scenario_db(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> str:
    db = tmp_path_factory.mktemp("cli") / "scenario.db"
    shutil.copy(sqlite_template, db)

    async def build() -> None:
        led = Ledger.from_url(f"sqlite:///{db}")
        try:
            await sc.build(led)
        finally:
            await led.close()

    run_async(build())
    return f"sqlite:///{db}"


def test_report_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "--list"]) == 0
    assert capsys.readouterr().out.splitlines() == list(REPORTS)


def test_report_outputs(scenario_db: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "evictions-by-queue", "--url", scenario_db, "-o", "csv"]) == 0
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert rows == [
        ["victim_cluster_queue", "preemptor_cluster_queue", "evictions", "planned_devices", "freed_devices"],
        ["team-a", "", "1", "0", "0"],
        ["team-a", "team-b", "1", "2", "1"],
    ]
    assert (
        main(
            [
                "report",
                "device-hours",
                "--url",
                scenario_db,
                "-o",
                "json",
                "--namespace",
                "ml",
                "--since",
                "2024-03-02",
                "--until",
                "2024-03-03T00:00:00Z",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out) == [
        {
            "day": "2024-03-02",
            "namespace": "ml",
            "local_queue": "train",
            "cluster_queue": "team-a",
            "device_hours": 2,
            "gpu_memory_gib_hours": 32,
        },
    ]
    assert main(["report", "usage", "--url", scenario_db, "--cluster-queue", "team-b"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:4] == ["CLUSTER_QUEUE", "COHORT", "FLAVOR", "RESOURCE"]
    assert out[1].split() == ["team-b", "research", "h200", "nvidia.com/gpu", "8", "10", "2", "0"]
    assert main(["report", "wait-times", "--url", scenario_db, "--where", "queue=ops/q", "-o", "csv"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == "LocalQueue,ops/q,10,5.5,5,9,10,10"


def test_report_errors(scenario_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "nope", "--url", scenario_db]) == 2
    assert "unknown report 'nope'" in capsys.readouterr().err
    assert main(["report", "usage", "--url", scenario_db, "--namespace", "x"]) == 2
    assert "no namespace column" in capsys.readouterr().err
    assert main(["report", "usage", "--url", scenario_db, "--where", "x"]) == 2
    assert "COLUMN=VALUE" in capsys.readouterr().err
    assert main(["report", "usage", "--url", scenario_db, "--since", "2024-01-01"]) == 2
    assert "--since/--until do not apply" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["report", "usage", "--since", "yesterday"])
    assert "not an ISO 8601" in capsys.readouterr().err
    empty = tmp_path / "empty.db"
    assert main(["report", "usage", "--url", f"sqlite:///{empty}"]) == 1
    assert "queueing migrate upgrade" in capsys.readouterr().err
    assert main(["report"]) == 2


async def test_compaction_job(ledger: Ledger) -> None:
    await sc.build(ledger)
    job = compaction_job(ledger, older_than=timedelta(days=2), clock=lambda: sc.t(3, 5))
    res = await job()
    assert res.cutoff_ms == int(sc.t(1).timestamp() * 1000)  # d3 05:00 - 2 days -> whole days before d1
    assert res.journal_rows > 0
    with pytest.raises(ValueError, match="at least one day"):
        compaction_job(ledger, older_than=timedelta(hours=1))


def test_register_compaction() -> None:
    scheduler = AsyncIOScheduler()
    job = register_compaction(
        scheduler, Ledger.from_url("sqlite://"), older_than=timedelta(days=30), every=timedelta(hours=6)
    )
    assert job.id == JOB_ID
    assert job.trigger.interval == timedelta(hours=6)
    assert job.max_instances == 1
