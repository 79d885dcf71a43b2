"""The ledger's PostgreSQL goes away for a while, for real: its connections are killed with
``pg_terminate_backend`` and new ones are refused (``ALLOW_CONNECTIONS false``) on a throwaway
database. Meanwhile the controller admits nothing and keeps running; once the database takes
connections again it resumes without loss (the Job that arrived meanwhile is admitted once, the one
that finished meanwhile is released once). Skipped when the server does not answer."""

from __future__ import annotations

import pytest

from queueing.config import Config
from queueing.kube.client import JOBS, KubeClient
from queueing.ledger.repository import Ledger
from queueing.testing import Emulator
from tests.controller.conftest import Harness, eventually, job
from tests.controller.standins import StandIns
from tests.controller.test_admission import is_true, running, workload
from tests.controller.test_postgres import _admin, pg_ledger  # noqa: F401
from tests.controller.test_reliability import admissions_per_workload


def _db(ledger: Ledger) -> str:
    name = ledger.engine.url.database
    assert name is not None and name.startswith("queueing_test_ctl_")  # never a real database
    return name


async def take_down(ledger: Ledger) -> None:
    db = _db(ledger)
    await _admin(f'ALTER DATABASE "{db}" WITH ALLOW_CONNECTIONS false')
    await _admin(
        f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{db}' AND pid <> pg_backend_pid()"
    )


async def bring_up(ledger: Ledger) -> None:
    await _admin(f'ALTER DATABASE "{_db(ledger)}" WITH ALLOW_CONNECTIONS true')


@pytest.mark.postgres
async def test_postgres_connections_killed_then_back(
    emu: Emulator,
    admin: KubeClient,
    cluster: StandIns,
    pg_ledger: Ledger,  # noqa: F811
) -> None:
    harness = Harness(emu, pg_ledger, Config())
    try:
        c = await harness.start()
        await admin.create(JOBS, job("before"))
        await eventually(lambda: running(emu, "before", 1), "admitted before the outage")

        await take_down(pg_ledger)
        try:
            errors = c.stats.errors
            await admin.create(JOBS, job("during"))
            cluster.finish_pods("default", "before")
            await eventually(lambda: workload(emu, "job-during") is not None, "its Workload is created")
            # each sync fails at the ledger; the controller keeps running and retrying
            await eventually(lambda: c.stats.errors >= errors + 3, "failed syncs", timeout=30)
            assert not is_true(workload(emu, "job-during"), "QuotaReserved")
            assert not running(emu, "during", 1)
            assert not is_true(workload(emu, "job-before"), "Finished")  # the ledger release comes first
            assert c._task is not None and not c._task.done()
        finally:
            await bring_up(pg_ledger)

        await eventually(lambda: running(emu, "during", 1), "admitted after the outage", timeout=60)
        await eventually(
            lambda: is_true(workload(emu, "job-before"), "Finished"), "finish recorded", timeout=30
        )
        cluster.finish_pods("default", "during")
        await eventually(lambda: is_true(workload(emu, "job-during"), "Finished"), "all finished")
        per = await admissions_per_workload(pg_ledger)
        assert dict(per) == {"job-before": 1, "job-during": 1}
        state = await pg_ledger.load_state()
        assert not state.admissions and all(v.is_zero() for v in state.usage.values())
        assert not cluster.errors
    finally:
        await harness.stop()
