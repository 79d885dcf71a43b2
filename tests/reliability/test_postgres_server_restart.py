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
import socket
from collections.abc import Iterator

import aiohttp
import pytest

from queueing.config import Config
from queueing.controller.process import ControllerProcess
from queueing.kube.client import JOBS, KubeClient, api_client_for_url
from queueing.ledger.migrate import upgrade_async
from queueing.ledger.repository import Ledger
from queueing.testing import Emulator
from tests.controller.conftest import CONTROLLER_TOKEN, eventually, job
from tests.controller.standins import StandIns
from tests.controller.test_admission import is_true, running, workload
from tests.controller.test_reliability import admissions_per_workload
from tests.reliability.pg_cluster import PrivatePostgres


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
        metrics={"bind_address": f"127.0.0.1:{_free_port()}"},
        health={"health_probe_bind_address": f"127.0.0.1:{_free_port()}"},
    )
    api = api_client_for_url(emu.url, token=CONTROLLER_TOKEN)
    proc = ControllerProcess(KubeClient(api, timeout=5.0), ledger, config, identity="only")
    session = aiohttp.ClientSession()
    try:
        await proc.start()
        assert proc.http is not None
        health = f"http://127.0.0.1:{proc.http.health_port}"
        c = proc.controller
        await admin.create(JOBS, job("before"))
        await eventually(lambda: running(emu, "before", 1), "admitted before the outage")
        assert await _probe(session, health + "/readyz") == (200, "ok\n")

        await asyncio.to_thread(private_pg.stop)  # the server process exits
        errors = c.stats.errors
        await admin.create(JOBS, job("during"))
        cluster.finish_pods("default", "before")
        await eventually(lambda: workload(emu, "job-during") is not None, "its Workload is created")
        # each sync fails at the ledger; the loop keeps running and retrying
        await eventually(lambda: c.stats.errors >= errors + 3, "failed syncs", timeout=20)
        assert not is_true(workload(emu, "job-during"), "QuotaReserved")
        assert not running(emu, "during", 1)
        assert not is_true(workload(emu, "job-before"), "Finished")  # the ledger release comes first
        assert c._task is not None and not c._task.done()
        assert proc.leading
        status, text = await _probe(session, health + "/readyz")
        assert status == 503 and "ledger: database unreachable" in text, text
        print(f"\n/readyz while the server is down: {text.strip()}")
        assert await _probe(session, health + "/healthz") == (200, "ok\n")  # alive: no restart wanted

        await asyncio.to_thread(private_pg.start)
        await eventually(lambda: running(emu, "during", 1), "admitted after the restart", timeout=20)
        await eventually(lambda: is_true(workload(emu, "job-before"), "Finished"), "finish recorded")
        assert await _probe(session, health + "/readyz") == (200, "ok\n")
        cluster.finish_pods("default", "during")
        await eventually(lambda: is_true(workload(emu, "job-during"), "Finished"), "all finished")
        assert dict(await admissions_per_workload(ledger)) == {"job-before": 1, "job-during": 1}
        state = await ledger.load_state()
        assert not state.admissions and all(v.is_zero() for v in state.usage.values())
        assert c.stats.admissions == 2
        assert not cluster.errors
    finally:
        await session.close()
        if proc.controller._started:
            await proc.stop()
        await api.close()
        await ledger.close()
