"""Controller replicas end to end (emulator, real client, RBAC enforced): two replicas with one Lease
never both admit (checked in the ledger: leader terms do not overlap and every admission lies in a
term), killing the leader hands over; /metrics scraped over HTTP shows the counters moving; /readyz
is green once the informers synced."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sqlalchemy import select

from queueing.config import Config
from queueing.controller.process import ControllerProcess
from queueing.kube.client import JOBS, LEASES, KubeClient, api_client_for_url
from queueing.ledger import models as m
from queueing.ledger.repository import Ledger
from queueing.testing import Emulator
from queueing.testing.cluster import StandIns
from tests.controller.conftest import CONTROLLER_TOKEN, eventually, job
from tests.controller.test_admission import running
from tests.controller.test_eviction import explain


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def config() -> Config:
    return Config(
        namespace="queueing-system",
        leader_election={"lease_duration": 2.0, "renew_deadline": 1.5, "retry_period": 0.4},
        metrics={"bind_address": f"127.0.0.1:{free_port()}"},
        health={"health_probe_bind_address": f"127.0.0.1:{free_port()}"},
    )


class Replicas:
    def __init__(self, emu: Emulator, ledger: Ledger, config: Config) -> None:
        self.emu, self.ledger, self.config = emu, ledger, config
        self.procs: list[ControllerProcess] = []
        self._apis: list[Any] = []

    async def start(self, identity: str, *, serve_http: bool = False) -> ControllerProcess:
        api = api_client_for_url(self.emu.url, token=CONTROLLER_TOKEN)
        self._apis.append(api)
        proc = ControllerProcess(
            KubeClient(api, timeout=5.0), self.ledger, self.config, identity=identity, serve_http=serve_http
        )
        await proc.start()
        self.procs.append(proc)
        return proc

    async def close(self) -> None:
        for p in self.procs:
            if p.controller._started and p.run_id is not None:
                with contextlib.suppress(Exception):  # already killed or stopped by the test
                    await p.stop()
        for api in self._apis:
            await api.close()


@pytest.fixture
async def replicas(emu: Emulator, ledger: Ledger, config: Config) -> AsyncIterator[Replicas]:
    r = Replicas(emu, ledger, config)
    try:
        yield r
    finally:
        await r.close()


async def terms_and_admissions(ledger: Ledger) -> tuple[list[Any], list[Any]]:
    async with ledger.engine.connect() as c:
        terms = (await c.execute(select(m.LeaderTerm).order_by(m.LeaderTerm.term))).all()
        adms = (await c.execute(select(m.Admission).order_by(m.Admission.id))).all()
    return list(terms), list(adms)


def term_of(terms: list[Any], at_ms: int) -> list[int]:
    return [
        t.term
        for t in terms
        if t.acquired_at_ms <= at_ms and (t.ended_at_ms is None or at_ms <= t.ended_at_ms)
    ]


async def test_two_replicas_one_lease_never_both_admit_and_the_leader_hands_over(
    emu: Emulator, admin: KubeClient, replicas: Replicas, cluster: StandIns, ledger: Ledger
) -> None:
    a = await replicas.start("replica-a")
    b = await replicas.start("replica-b")
    leader = await eventually(lambda: next((p for p in (a, b) if p.leading), None), "one replica leads")
    standby = b if leader is a else a
    for i in range(3):
        await admin.create(JOBS, job(f"j{i}"))
    for i in range(3):
        await eventually(lambda i=i: running(emu, f"j{i}", 1), f"j{i} runs")
    assert not standby.leading
    assert standby.controller.stats.admissions == 0 and standby.controller.stats.syncs == 0
    assert leader.controller.stats.admissions == 3
    # the standby's caches are warm all the same
    assert {j.name for j in standby.controller.jobs.list()} >= {"j0", "j1", "j2"}

    await leader.kill()  # a crash: no release, the Lease expires
    await eventually(lambda: standby.leading, "the standby takes over", timeout=30)
    await admin.create(JOBS, job("after"))
    await eventually(lambda: running(emu, "after", 1), "a Job created after the handover runs")
    assert standby.controller.stats.admissions == 1  # it recovered the 3 admissions, did not repeat them

    terms, adms = await terms_and_admissions(ledger)
    assert [t.term for t in terms] == [1, 2]
    assert terms[0].run_id == leader.run_id and terms[1].run_id == standby.run_id
    assert terms[0].ended_at_ms is not None and terms[0].ended_at_ms <= terms[1].acquired_at_ms
    assert len(adms) == 4 and all(x.released_at_ms is None for x in adms)
    assert [term_of(terms, x.admitted_at_ms) for x in adms[:3]] == [[1], [1], [1]]
    assert term_of(terms, adms[3].admitted_at_ms) == [2]
    assert not cluster.errors
    assert not emu.authorizer.denied  # type: ignore[union-attr]


def sample(text: str, name: str, **labels: str) -> float | None:
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m_ = re.match(r"([a-zA-Z_:]+)(\{([^}]*)\})? (\S+)$", line)
        if not m_ or m_.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', m_.group(3) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            return float(m_.group(4))
    return None


async def test_metrics_endpoint_shows_counters_moving_and_probes(
    emu: Emulator, admin: KubeClient, replicas: Replicas, cluster: StandIns, config: Config, tmp_path: Path
) -> None:
    proc = await replicas.start("only", serve_http=True)
    assert proc.http is not None
    base_m = f"http://127.0.0.1:{proc.http.metrics_port}"
    base_h = f"http://127.0.0.1:{proc.http.health_port}"
    await eventually(lambda: proc.leading, "leads")
    async with aiohttp.ClientSession() as s:

        async def scrape() -> str:
            async with s.get(base_m + "/metrics") as r:
                assert r.status == 200
                return await r.text()

        async with s.get(base_h + "/readyz") as r:
            assert r.status == 200
        async with s.get(base_h + "/healthz") as r:
            assert r.status == 200
        before = await scrape()
        assert sample(before, "queueing_admitted_workloads_total", cluster_queue="team") in (None, 0.0)
        assert sample(before, "queueing_leader_election_master_status") == 1.0
        await admin.create(JOBS, job("m1", template="gpu-4"))
        await admin.create(JOBS, job("m2", template="gpu-4"))
        await admin.create(JOBS, job("m3", template="gpu-4"))  # 12 GPUs asked, 8 in quota: one waits
        await eventually(lambda: running(emu, "m1", 1) and running(emu, "m2", 1), "two run")
        deadline = time.monotonic() + 20
        while True:  # the gauges follow the next sync: scrape until they show the waiting Job
            text = await scrape()
            # tried and not fitting: inadmissible, as Kueue counts it, until something changes
            if (
                sample(text, "queueing_pending_workloads", cluster_queue="team", status="inadmissible") == 1.0
                and (sample(text, "queueing_admission_attempts_total", result="inadmissible") or 0) >= 1
            ):  # (and a later cycle that admitted nothing)
                break
            assert time.monotonic() < deadline, "the pending gauge never showed the waiting Job"
            proc.controller.synced.clear()
            proc.controller.wake()
            await asyncio.wait_for(proc.controller.synced.wait(), 20)
        assert sample(text, "queueing_admitted_workloads_total", cluster_queue="team") == 2.0
        assert sample(text, "queueing_quota_reserved_workloads_total", cluster_queue="team") == 2.0
        assert (sample(text, "queueing_admission_attempts_total", result="success") or 0) >= 1
        assert (sample(text, "queueing_admission_attempts_total", result="inadmissible") or 0) >= 1
        assert sample(text, "queueing_pending_workloads", cluster_queue="team", status="inadmissible") == 1.0
        assert sample(text, "queueing_pending_workloads", cluster_queue="team", status="active") == 0.0
        assert sample(text, "queueing_admitted_active_workloads", cluster_queue="team") == 2.0
        assert (
            sample(text, "queueing_cluster_queue_resource_usage", cluster_queue="team", flavor="default",
                   resource="gpu.example.com") == 8.0
        )  # fmt: skip
        assert (sample(text, "queueing_allocator_duration_seconds_count", result="allocated") or 0) >= 1
        assert (
            sample(text, "queueing_cluster_queue_nominal_quota", cluster_queue="team", flavor="default",
                   resource="gpu.example.com") == 8.0
        )  # fmt: skip
        # set every cycle from the admitted usage; a queue without a cohort never borrows: share 0
        assert sample(text, "queueing_cluster_queue_weighted_share", cluster_queue="team") == 0.0
    # queueing explain for the waiting Job: pending, why, never admitted
    out = await explain(emu, tmp_path, "default/job-m3")
    assert out.returncode == 0, out.stderr
    assert "State:     Pending — Pending: insufficient unused quota for gpu.example.com" in out.stdout
    assert "never admitted; queued since" in out.stdout  # recorded when the controller saw it
    await proc.stop()  # graceful: the Lease is released at once
    lease = await admin.get(LEASES, "queueing-controller", "queueing-system")
    assert not lease["spec"].get("holderIdentity")
    assert not proc.leading
