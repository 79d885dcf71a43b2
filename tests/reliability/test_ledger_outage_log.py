"""A 20 s ledger outage, as operators see it: a real PostgreSQL behind a TCP proxy that is cut (sessions
aborted, new connections refused) while the controller runs as ``queueing run`` does
(:class:`ControllerProcess`: probes, periodic jobs). The shared server itself is never stopped.

While it is down: nothing is admitted (the only thing that pauses all admission), the loop keeps
retrying, ``/readyz`` says the database is unreachable without any exception text (no host, no port),
and once the stall timeout has passed it says no scheduling cycle completed, with the
``queueing_scheduling_stalled`` metric at 1. The whole outage logs a handful of lines — one on entry,
one on recovery with the number of retries — and no traceback. Back up: the waiting Job is admitted
once, ``/readyz`` is 200, the metric 0."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import time
from pathlib import Path

import aiohttp
import pytest
import yaml

from queueing.commands.run import serve
from queueing.config import Config
from queueing.controller.process import ControllerProcess
from queueing.kube.client import JOBS, LEASES, KubeClient, api_client_for_url
from queueing.ledger.repository import Ledger
from queueing.testing import Emulator
from queueing.testing.cluster import StandIns
from tests.controller.conftest import CONTROLLER_TOKEN, eventually, job
from tests.controller.test_admission import is_true, running, workload
from tests.controller.test_postgres import pg_ledger  # noqa: F401
from tests.controller.test_process import free_port
from tests.reliability.tcp_proxy import TcpProxy

OUTAGE = float(os.environ.get("QUEUEING_OUTAGE_SECONDS", "20"))
HANDFUL = 6


async def _get(session: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    async with session.get(url) as r:
        return r.status, await r.text()


def _metric(text: str, name: str) -> float:
    m = re.search(rf"^{name} (\S+)$", text, re.M)
    assert m is not None, name
    return float(m.group(1))


@pytest.mark.postgres
async def test_a_20s_ledger_outage_logs_a_handful_of_lines(
    emu: Emulator,
    admin: KubeClient,
    cluster: StandIns,
    pg_ledger: Ledger,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = pg_ledger.engine.url
    proxy = TcpProxy(url.host or "127.0.0.1", url.port or 5432)
    await proxy.up()
    ledger = Ledger.from_url(url.set(port=proxy.port).render_as_string(hide_password=False))
    config = Config(
        leader_election={"leader_elect": False},
        metrics={"bind_address": f"127.0.0.1:{free_port()}"},
        health={"health_probe_bind_address": f"127.0.0.1:{free_port()}", "scheduling_stall_timeout": 3.0},
    )
    api = api_client_for_url(emu.url, token=CONTROLLER_TOKEN)
    proc = ControllerProcess(KubeClient(api, timeout=5.0), ledger, config, identity="only")
    session = aiohttp.ClientSession()
    try:
        await proc.start()
        assert proc.http is not None
        ready = f"http://127.0.0.1:{proc.http.health_port}/readyz"
        metrics = f"http://127.0.0.1:{proc.http.metrics_port}/metrics"
        c = proc.controller
        await admin.create(JOBS, job("before"))
        await eventually(lambda: running(emu, "before", 1), "admitted before the outage")

        with caplog.at_level(logging.INFO, logger="queueing"):
            caplog.clear()
            await proxy.down()
            t0 = time.monotonic()
            await admin.create(JOBS, job("during"))
            await eventually(lambda: workload(emu, "job-during") is not None, "its Workload is created")
            await eventually(lambda: c.outage.in_outage, "the controller sees the outage", timeout=30)
            status, text = await _get(session, ready)
            assert status == 503 and "ledger: database unreachable" in text, text
            assert str(proxy.port) not in text and "127.0.0.1" not in text, text  # no exception text
            # past the stall timeout: the wedge is visible too
            await eventually(lambda: proc.stall.stall >= 3.0, "the stall passes its timeout", timeout=30)
            status, text = await _get(session, ready)
            assert status == 503 and "scheduling: no scheduling cycle completed" in text, text
            assert _metric((await _get(session, metrics))[1], "queueing_scheduling_stalled") == 1
            print(f"\n/readyz during the outage:\n{text}")
            await asyncio.sleep(max(0.0, OUTAGE - (time.monotonic() - t0)))
            assert not is_true(workload(emu, "job-during"), "QuotaReserved")  # nothing admitted meanwhile
            assert c._task is not None and not c._task.done()
            retries = c.outage.retries
            assert retries >= 5, retries

            await proxy.up()
            await eventually(lambda: running(emu, "during", 1), "admitted after the outage", timeout=60)
            await eventually(lambda: not c.outage.in_outage, "the outage is over")
        lines = [r for r in caplog.records if r.name.startswith("queueing")]
        print(f"{OUTAGE:g} s outage, {retries} retries, {len(lines)} log lines:")
        for r in lines:
            print(f"  {r.levelname} {r.name}: {r.getMessage()}")
        assert len(lines) <= HANDFUL, [r.getMessage() for r in lines]
        assert all(r.exc_info is None and "\n" not in r.getMessage() for r in lines)
        assert any("ledger unreachable" in r.getMessage() for r in lines)
        assert any("reachable again" in r.getMessage() and "retries" in r.getMessage() for r in lines)
        assert all(str(proxy.port) not in r.getMessage() for r in lines)

        await eventually(lambda: proc.stall.stall == 0, "no stall any more", timeout=30)
        assert await _get(session, ready) == (200, "ok\n")
        assert _metric((await _get(session, metrics))[1], "queueing_scheduling_stalled") == 0
        assert not cluster.errors
    finally:
        await session.close()
        if proc.controller._started:
            await proc.stop()
        await api.close()
        await ledger.close()
        await proxy.down()


async def test_run_with_the_ledger_unreachable_at_start_exits_2_with_one_line(
    emu: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``queueing run`` whose database does not answer at start (the cluster checks passed): exit 2, one
    line naming the kind of error (not a traceback, not a misleading "cannot serve the metrics")."""
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        "leaderElection:\n  leaderElect: false\n"
        f"metrics:\n  bindAddress: 127.0.0.1:{free_port()}\n"
        f"health:\n  healthProbeBindAddress: 127.0.0.1:{free_port()}\n"
    )
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(emu.kubeconfig()))
    monkeypatch.setenv(
        "QUEUEING_DATABASE_URL", f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/nothing"
    )
    args = argparse.Namespace(config=str(cfg), kubeconfig=str(kubeconfig), context=None, skip_migrations=True)
    code = await serve(args)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err == "queueing run: the ledger database is unreachable (ConnectionRefusedError)\n", err


@pytest.mark.postgres
async def test_a_replica_elected_while_the_ledger_is_away_leads_once_it_is_back(
    emu: Emulator,
    admin: KubeClient,
    cluster: StandIns,
    pg_ledger: Ledger,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The Lease comes free while the ledger is away: the new holder cannot start its leader term, so it
    retries (one line logged, no traceback) instead of holding the Lease idle; once the ledger is back
    it leads and admits."""
    url = pg_ledger.engine.url
    proxy = TcpProxy(url.host or "127.0.0.1", url.port or 5432)
    await proxy.up()
    ledger = Ledger.from_url(url.set(port=proxy.port).render_as_string(hide_password=False))
    config = Config(
        namespace="queueing-system",
        leader_election={"lease_duration": 2.0, "renew_deadline": 1.5, "retry_period": 0.2},
        metrics={"bind_address": f"127.0.0.1:{free_port()}"},
        health={"health_probe_bind_address": f"127.0.0.1:{free_port()}"},
    )
    # the Lease is held by a replica that is gone: it comes free 2 s after this one first sees it
    await admin.create(
        LEASES,
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": config.leader_election.resource_name, "namespace": "queueing-system"},
            "spec": {"holderIdentity": "gone", "leaseDurationSeconds": 2},
        },
    )
    api = api_client_for_url(emu.url, token=CONTROLLER_TOKEN)
    proc = ControllerProcess(KubeClient(api, timeout=5.0), ledger, config, identity="next")
    try:
        with caplog.at_level(logging.INFO, logger="queueing"):
            await proc.start()
            await proxy.down()
            await eventually(
                lambda: any("cannot start its leader term yet" in r.getMessage() for r in caplog.records),
                "the elected replica waits for the ledger",
                timeout=30,
            )
            assert proc.elector is not None and proc.elector.is_leader and not proc.leading
            await admin.create(JOBS, job("after"))
            await proxy.up()
            await eventually(lambda: proc.leading, "it leads once the ledger is back", timeout=30)
            await eventually(lambda: running(emu, "after", 1), "and admits", timeout=30)
        lines = [r for r in caplog.records if "ledger" in r.getMessage()]
        assert all(r.exc_info is None for r in caplog.records if r.name.startswith("queueing"))
        assert len(lines) <= HANDFUL, [r.getMessage() for r in lines]
    finally:
        if proc.controller._started:
            await proc.stop()
        await api.close()
        await ledger.close()
        await proxy.down()
