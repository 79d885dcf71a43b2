"""The same admission path with the ledger on PostgreSQL (skipped when the server does not answer)."""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator

import pytest

from queueing.config import Config
from queueing.kube.client import JOBS, KubeClient
from queueing.ledger.migrate import upgrade_async
from queueing.ledger.repository import Ledger
from queueing.testing import Emulator
from queueing.testing.cluster import StandIns
from tests.controller.conftest import Harness, eventually, job
from tests.controller.test_admission import is_true, running, workload
from tests.controller.test_reliability import admissions_per_workload

PG = os.environ.get("QUEUEING_TEST_PG", "postgresql+asyncpg://postgres@127.0.0.1:5432")


async def _admin(sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(PG.replace("+asyncpg", "") + "/postgres", timeout=5)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@pytest.fixture
async def pg_ledger() -> AsyncIterator[Ledger]:
    name = f"queueing_test_ctl_{secrets.token_hex(4)}"
    try:
        await _admin(f'CREATE DATABASE "{name}"')
    except Exception as e:
        pytest.skip(f"PostgreSQL at {PG} is not available: {type(e).__name__}: {e}")
    lg = Ledger.from_url(f"{PG}/{name}")
    try:
        await upgrade_async(lg.engine)
        yield lg
    finally:
        await lg.close()
        await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.postgres
async def test_admission_with_the_ledger_on_postgresql(
    emu: Emulator, admin: KubeClient, cluster: StandIns, pg_ledger: Ledger
) -> None:
    harness = Harness(emu, pg_ledger, Config())
    try:
        await harness.start()
        for n in ("pa", "pb"):
            await admin.create(JOBS, job(n, template="gpu-2"))
        await eventually(lambda: running(emu, "pa", 1) and running(emu, "pb", 1), "both run")
        state = await pg_ledger.load_state()
        assert len(state.admissions) == 2 and sum(state.usage.values()) == 4
        for n in ("pa", "pb"):
            cluster.finish_pods("default", n)
        await eventually(lambda: all(is_true(workload(emu, f"job-{n}"), "Finished") for n in ("pa", "pb")),
                         "both finished")  # fmt: skip
        state = await pg_ledger.load_state()
        assert not state.admissions and all(v == 0 for v in state.usage.values())
        assert dict(await admissions_per_workload(pg_ledger)) == {"job-pa": 1, "job-pb": 1}
    finally:
        await harness.stop()
