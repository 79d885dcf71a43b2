"""The alert rules of deploy/monitoring fire in the situation each names and stay silent otherwise,
evaluated (queueing/testing/promql.py) over what the real controller process serves on /metrics.

The controller is the ``ControllerProcess`` that ``queueing run`` starts, scraped over HTTP as Prometheus
scrapes it (target labels ``job`` = the metrics Service of deploy/base, ``instance``; ``up`` 0 when a
scrape fails). Rules are evaluated at instants of a virtual clock that moves 30 s per scrape: the
situation is held for real (a Job that never fits, a Lease held elsewhere, a wedged loop, a stopped
process) and scraped again at every instant, so a ``for:`` of an hour is an hour of instants, never a
sleep."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from queueing.config import Config
from queueing.controller.process import ControllerProcess
from queueing.kube.client import JOBS, LEASES, WORKLOADS, KubeClient, api_client_for_url
from queueing.ledger.repository import Ledger
from queueing.scheduling.config import parse_duration
from queueing.testing import Emulator
from queueing.testing.promql import Samples, alert_states, labels_of
from tests.controller.conftest import CONTROLLER_TOKEN, eventually, job
from tests.controller.test_admission import is_true, workload
from tests.controller.test_eviction import bare_workload
from tests.controller.test_process import free_port

ROOT = Path(__file__).resolve().parents[2]
RULES = {
    r["alert"]: r
    for d in yaml.safe_load_all((ROOT / "deploy/monitoring/prometheus-rule.yaml").read_text())
    for g in d["spec"]["groups"]
    for r in g["rules"]
}
JOB = next(
    d["metadata"]["name"]
    for d in yaml.safe_load_all((ROOT / "deploy/base/service.yaml").read_text())
    if d and d["kind"] == "Service"
)  # the ServiceMonitor's job label is the Service's name
STEP = 30.0  # virtual seconds between scrapes (and rule evaluations)


class Prometheus:
    """Scrapes targets at instants of a virtual clock and evaluates the rules over what it scraped."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session
        self.samples = Samples()
        self.t = 0.0
        self.instants: list[float] = []
        self.targets: dict[str, ControllerProcess] = {}

    async def scrape(self) -> None:
        self.t += STEP
        for name, proc in self.targets.items():
            target = {"job": JOB, "instance": name}
            try:
                assert proc.http is not None
                url = f"http://127.0.0.1:{proc.http.metrics_port}/metrics"
                async with self.session.get(url, timeout=aiohttp.ClientTimeout(total=5)) as r:
                    r.raise_for_status()
                    text = await r.text()
            except (aiohttp.ClientError, OSError, AssertionError):
                self.samples.add_failed_scrape(self.t, target)
            else:
                self.samples.add_scrape(self.t, text, target)
        self.instants.append(self.t)

    async def hold(self, seconds: float) -> None:
        """Scrape and evaluate for ``seconds`` of virtual time (the situation holds meanwhile)."""
        for _ in range(int(seconds // STEP)):
            await self.scrape()

    def alerts(self) -> dict[str, dict[frozenset[tuple[str, str]], str]]:
        """Every rule's alerts (labels -> pending / firing) after the instants so far."""
        out = {}
        for name, rule in RULES.items():
            states = alert_states(
                rule["expr"], parse_duration(rule.get("for", "0s")), self.samples, self.instants
            )
            if states:
                out[name] = states
        return out

    def firing(self) -> dict[str, set[frozenset[tuple[str, str]]]]:
        return {
            name: {k for k, s in states.items() if s == "firing"}
            for name, states in self.alerts().items()
            if "firing" in states.values()
        }


STORM = 48  # workloads in the eviction storm


def metric(proc: ControllerProcess, name: str, **labels: str) -> float | None:
    return proc.metrics.value(name, labels)


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def alert_config(leader_elect: bool = True, **kw: Any) -> Config:
    # (a renew deadline long enough for a busy machine: a lost Lease here would be a NoLeader of its own)
    return Config(
        namespace="queueing-system",
        leader_election={
            "leader_elect": leader_elect,
            "lease_duration": 20.0,
            "renew_deadline": 15.0,
            "retry_period": 0.2,
        },
        metrics={"bind_address": f"127.0.0.1:{free_port()}"},
        health={"health_probe_bind_address": f"127.0.0.1:{free_port()}", "scheduling_stall_timeout": 1.0},
        **kw,
    )


@contextlib.asynccontextmanager
async def replica(
    emu: Emulator, ledger: Ledger, config: Config, identity: str
) -> AsyncIterator[ControllerProcess]:
    api = api_client_for_url(emu.url, token=CONTROLLER_TOKEN)
    proc = ControllerProcess(KubeClient(api, timeout=5.0), ledger, config, identity=identity)
    try:
        await proc.start()
        yield proc
    finally:
        with contextlib.suppress(Exception):  # stopped by the test already
            await proc.stop()
        await api.close()


async def test_each_alert_fires_in_its_situation_and_is_silent_otherwise(
    emu: Emulator, admin: KubeClient, ledger: Ledger, session: aiohttp.ClientSession
) -> None:
    prom = Prometheus(session)
    # a Lease held by a replica that is gone (it did not release it and it has not expired yet)
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "queueing-controller", "namespace": "queueing-system"},
        "spec": {"holderIdentity": "gone_1234", "leaseDurationSeconds": 3600, "renewTime": "2099-01-01T00:00:00.000000Z"},
    }  # fmt: skip
    await admin.create(LEASES, lease, "queueing-system")
    config = alert_config(wait_for_pods_ready={"enable": False})
    async with replica(emu, ledger, config, "replica-a") as a:
        prom.targets["replica-a"] = a
        await eventually(lambda: a.controller.informers_synced, "replica-a is up")
        # QueueingNoLeader: replicas up, none holds the Lease
        await prom.hold(90)
        assert prom.alerts() == {"QueueingNoLeader": {labels_of(): "pending"}}
        await prom.hold(60)
        assert prom.firing() == {"QueueingNoLeader": {labels_of()}}
        await admin.delete(LEASES, "queueing-controller", "queueing-system")  # the holder is gone for good
        await eventually(lambda: a.leading, "replica-a leads")
        await prom.scrape()
        assert prom.alerts() == {}  # resolved; a leader is silent

        # a Job that fits runs; one that can never fit (12 GPUs, quota 8) is tried and waits
        await admin.create(JOBS, job("fits", template="gpu-4"))
        await eventually(lambda: is_true(workload(emu, "job-fits"), "Admitted"), "fits is admitted")
        await prom.hold(600)
        assert prom.alerts() == {}  # admitting and nothing waiting: silent
        await admin.create(JOBS, job("never-fits", template="gpu-4", parallelism=3))
        await eventually(
            lambda: metric(a, "queueing_pending_workloads", cluster_queue="team", status="inadmissible") == 1,
            "the never-fitting Job is counted inadmissible",
        )
        assert metric(a, "queueing_pending_workloads", cluster_queue="team", status="active") == 0
        await prom.hold(3540)
        team = labels_of(cluster_queue="team")
        assert prom.alerts() == {"QueueingWorkloadsPendingLong": {team: "pending"}}  # not an hour yet
        await prom.hold(90)
        assert prom.firing() == {"QueueingWorkloadsPendingLong": {team}}

        # QueueingSchedulingStalled: every sync fails from now on while the Job waits
        async def broken() -> None:
            raise RuntimeError("a bug in one step")

        a.controller._bind = broken  # type: ignore[method-assign]
        a.controller.wake()
        await eventually(
            lambda: metric(a, "queueing_scheduling_stalled") == 1, "the stall is seen", timeout=30
        )
        await prom.hold(30)
        assert prom.alerts()["QueueingSchedulingStalled"] == {labels_of(): "pending"}
        await prom.hold(60)
        assert prom.firing() == {
            "QueueingWorkloadsPendingLong": {team},
            "QueueingSchedulingStalled": {labels_of()},
        }
        del a.controller._bind  # mended: the loop completes syncs again
        a.controller.wake()
        await eventually(
            lambda: metric(a, "queueing_scheduling_stalled") == 0, "the stall is over", timeout=30
        )
        # the Job that never fits goes: nothing is inadmissible any more
        await admin.delete(JOBS, "never-fits", "default")
        with contextlib.suppress(Exception):  # (or gone with its Job already)
            await admin.delete(WORKLOADS, "job-never-fits", "default")
        await eventually(
            lambda: metric(a, "queueing_pending_workloads", cluster_queue="team", status="inadmissible") == 0,
            "nothing inadmissible",
        )
        await prom.scrape()
        assert prom.alerts() == {}

        # QueueingControllerDown: the process is stopped; its scrapes fail
        await a.stop()
        await prom.hold(270)
        assert prom.alerts() == {"QueueingControllerDown": {labels_of(): "pending"}}
        await prom.hold(60)
        # (the stopped replica's series went stale: no other alert stays)
        assert prom.firing() == {"QueueingControllerDown": {labels_of()}}


@pytest.mark.slow  # ~200 real evictions: the rule needs more than 0.1 a second for 15 minutes, twice over
async def test_eviction_storm_alert_fires_while_workloads_are_evicted_again_and_again(
    emu: Emulator, admin: KubeClient, ledger: Ledger, session: aiohttp.ClientSession
) -> None:
    """Workloads whose pods never become Ready (nothing runs them) are evicted at their PodsReady
    timeout, requeued after a short backoff, admitted and evicted again: a real storm. The virtual
    clock moves a minute per scrape, and a scrape is taken once at least 7 more evictions happened:
    7 a minute is over the rule's 0.1 a second."""
    config = alert_config(
        leader_elect=False,  # one replica: it leads from the start
        wait_for_pods_ready={
            "enable": True,
            "timeout": 0.05,
            "requeuing_strategy": {"backoff_base_seconds": 0.01, "backoff_max_seconds": 0.02},
        },
    )
    prom = Prometheus(session)
    evicted = "queueing_evicted_workloads_total"
    reason = {"cluster_queue": "team", "reason": "PodsReadyTimeout"}
    async with replica(emu, ledger, config, "replica-a") as a:
        prom.targets["replica-a"] = a
        await eventually(lambda: a.leading, "replica-a leads")
        await prom.hold(600)
        assert prom.alerts() == {}
        for i in range(STORM):
            await admin.create(WORKLOADS, bare_workload(f"w{i}", template=None))
        step = 2 * STEP  # a minute a scrape
        last = 0.0
        while "QueueingEvictionStorm" not in prom.firing():
            assert prom.t < 3600, "no storm alert within an hour of storm"
            await eventually(
                lambda last=last: (metric(a, evicted, **reason) or 0) >= last + 7, "7 more evictions"
            )
            last = metric(a, evicted, **reason) or 0
            prom.t += step - STEP
            await prom.scrape()
        storm = prom.firing()["QueueingEvictionStorm"]
        assert storm == {labels_of(cluster_queue="team", reason="PodsReadyTimeout")}
        assert 15 * 60 <= prom.t - 600 <= 35 * 60  # once the rate held for its 15 minutes
        for i in range(STORM):  # the storm ends: the workloads go
            await admin.delete(WORKLOADS, f"w{i}", "default")
        await eventually(lambda: not a.controller.admitted, "nothing admitted")
        await prom.hold(16 * 60)
        assert prom.alerts() == {}  # quiet again once the 15 minutes' window holds no evictions
