"""The ledger's PostgreSQL goes away for a while, for real: its connections are killed with
``pg_terminate_backend`` and new ones are refused (``ALLOW_CONNECTIONS false``) on a throwaway
database. Meanwhile the controller admits nothing and keeps running; once the database takes
connections again it resumes without loss (the Job that arrived meanwhile is admitted once, the one
that finished meanwhile is released once). Skipped when the server does not answer."""

from __future__ import annotations

import pytest

from queueing.config import Config
from queueing.kube.client import KubeClient
from queueing.ledger.repository import Ledger
from queueing.testing import Emulator
from queueing.testing.cluster import StandIns
from tests.controller.conftest import Harness
from tests.controller.test_postgres import _admin, pg_ledger  # noqa: F401
from tests.reliability.test_database_faults import outage_scenario


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
        await outage_scenario(
            emu, admin, cluster, pg_ledger, c, lambda: take_down(pg_ledger), lambda: bring_up(pg_ledger)
        )
    finally:
        await bring_up(pg_ledger)
        await harness.stop()
