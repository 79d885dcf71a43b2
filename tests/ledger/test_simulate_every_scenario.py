"""``queueing simulate --ledger`` on every scenario the project ships as files (``examples/simulate``
and the Kueue parity scenarios under ``tests/simulate/kueue_parity``): the ledger takes every
admission and every eviction of the run (a refusal would exit 2), so the one quota model of the core
and the ledger agree on each of them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from sqlalchemy import func, select

from queueing.cli import main
from queueing.ledger import models as m
from queueing.ledger.repository import Ledger
from tests.ledger.conftest import run_async

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = [
    REPO / "examples" / "simulate",
    *sorted((REPO / "tests" / "simulate" / "kueue_parity").glob("*.yaml")),
]


async def _admissions(url: str) -> int:
    led = Ledger.from_url(url)
    try:
        async with led.engine.connect() as c:
            return int((await c.execute(select(func.count()).select_from(m.Admission))).scalar_one())
    finally:
        await led.close()


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: p.stem if p.suffix else p.name)
def test_every_admission_is_recorded(
    scenario: Path, sqlite_template: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "ledger.db"
    shutil.copy(sqlite_template, db)
    url = f"sqlite+aiosqlite:///{db}"
    rc = main(["simulate", "-f", str(scenario), "-o", "json", "--ledger", url])
    out, err = capsys.readouterr()
    assert rc == 0, err
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    admitted = sum(1 for e in events if e["event"] == "Admitted")
    assert admitted > 0
    recorded = run_async(_admissions(url))
    assert recorded == admitted, f"{scenario.name}: {admitted} admitted, {recorded} in the ledger"
