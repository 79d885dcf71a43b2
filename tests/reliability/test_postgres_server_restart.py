"""The ledger's PostgreSQL server itself stops and starts again while the controller runs.

A private throwaway server (``initdb`` into a temporary directory, ``pg_ctl`` on a free port; see
``pg_cluster.py``), never the shared one on 127.0.0.1:5432. The controller runs as ``queueing run`` does
(:class:`ControllerProcess` with its HTTP probes and periodic jobs). While the server is down
(``pg_ctl stop -m fast``: sessions disconnected, new connections refused): a Job arrives and another
finishes; nothing is admitted, the finish is not marked (the ledger release comes first), the sync loop
keeps running and retrying, ``/healthz`` stays 200 and ``/readyz`` is 503 naming the ledger. After
``pg_ctl start``: ``/readyz`` is 200 again, the pool reconnects, the waiting Job is admitted once, the
finished one released once, and the ledger ends with no active admission and zero usage.
Skipped only when PostgreSQL (``initdb``) is not installed."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import aiohttp
import pytest

from queueing.config import Config
from queueing.controller.process import ControllerProcess
from queueing.kube.client import KubeClient, api_client_for_url
from queueing.ledger.migrate import upgrade_async
from queueing.ledger.repository import Ledger
from queueing.testing import Emulator
from queueing.testing.cluster import StandIns
from tests.controller.conftest import CONTROLLER_TOKEN, eventually
from tests.controller.test_process import free_port
from tests.reliability.pg_cluster import PrivatePostgres
from tests.reliability.test_database_faults import outage_scenario


@pytest.fixture
def private_pg() -> Iterator[PrivatePostgres]:
    with PrivatePostgres.create() as pg:
        yield pg


async def _probe(session: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    async with session.get(url) as r:
        return r.status, await r.text()


async def test_postgres_server_stopped_and_started_while_the_controller_runs(
    emu: Emulator, admin: KubeClient, cluster: StandIns, private_pg: PrivatePostgres
) -> None:
    ledger = Ledger.from_url(await asyncio.to_thread(private_pg.create_database, "queueing"))
    await upgrade_async(ledger.engine)
    config = Config(
        leader_election={"leader_elect": False},
        metrics={"bind_address": f"127.0.0.1:{free_port()}"},
        health={"health_probe_bind_address": f"127.0.0.1:{free_port()}"},
    )
    api = api_client_for_url(emu.url, token=CONTROLLER_TOKEN)
    proc = ControllerProcess(KubeClient(api, timeout=5.0), ledger, config, identity="only")
    session = aiohttp.ClientSession()
    try:
        await proc.start()
        assert proc.http is not None
        health = f"http://127.0.0.1:{proc.http.health_port}"
        ready = health + "/readyz"

        async def while_down() -> None:
            assert proc.leading
            status, text = await _probe(session, ready)
            assert status == 503 and "ledger: database unreachable" in text, text
            print(f"\n/readyz while the server is down: {text.strip()}")
            assert await _probe(session, health + "/healthz") == (200, "ok\n")  # alive: no restart wanted

        async def after_up() -> None:
            assert await _probe(session, ready) == (200, "ok\n")

        await eventually(lambda: proc.leading, "leads")
        assert await _probe(session, ready) == (200, "ok\n")
        await outage_scenario(
            emu,
            admin,
            cluster,
            ledger,
            proc.controller,
            lambda: asyncio.to_thread(private_pg.stop),  # the server process exits
            lambda: asyncio.to_thread(private_pg.start),
            while_down=while_down,
            after_up=after_up,
        )
        assert proc.controller.stats.admissions == 2
    finally:
        await session.close()
        if proc.controller._started:
            await proc.stop()
        await api.close()
        await ledger.close()
