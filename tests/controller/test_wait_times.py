"""Honest timings (issue 19, item 5) and the preemptor's ClusterQueue of an in-queue preemption (item
8c), end to end: a Job's wait is from its creation (the ledger records the workload when the
controller first sees it), and from its last eviction once evicted. The wait-time report, ``queueing
explain`` and the controller's wait-time metric say the same. And ``queueing explain`` with the ledger
unreachable (item 8b). Time is the controller's injected clock.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from queueing.config import Config
from queueing.controller.controller import Controller
from queueing.kube.client import JOBS, LOCAL_QUEUES, KubeClient
from queueing.ledger import models as m
from queueing.ledger.reports import run_report
from queueing.ledger.repository import Ledger
from queueing.testing import Emulator
from queueing.testing.cluster import StandIns
from tests.controller.conftest import Harness, ManualTime, eventually
from tests.controller.test_admission import get, is_true, running, workload
from tests.controller.test_eviction import explain, prio_job, priority_classes
from tests.controller.test_explain import pending_reason


@pytest.fixture
def clock() -> ManualTime:
    return ManualTime()


@pytest.fixture
def config() -> Config:
    return Config(wait_for_pods_ready={"enable": False})


@pytest.fixture
async def harness(emu: Emulator, ledger: Ledger, config: Config, clock: ManualTime) -> Any:
    h = Harness(emu, ledger, config, clock=clock)
    try:
        yield h
    finally:
        await h.stop()


def ms(ts: str) -> int:
    return round(datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() * 1000)


def shown(t_ms: int) -> str:
    """A time as ``queueing explain`` prints it."""
    return datetime.fromtimestamp(t_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


async def ledger_row(ledger: Ledger, name: str) -> Any:
    async with ledger.engine.connect() as c:
        return (await c.execute(select(m.Workload).where(m.Workload.name == name))).one()


def wait_metric(ctl: Controller) -> float:
    v = ctl.metrics.value("queueing_admission_wait_time_seconds_sum", {"cluster_queue": "team"})
    assert v is not None
    return v


async def wait_rows(ledger: Ledger) -> dict[str, dict[str, Any]]:
    return {r["queue"]: r for r in (await run_report(ledger.engine, "wait-times")).as_dicts()}


async def test_report_explain_and_metrics_agree_on_the_wait(
    emu: Emulator,
    admin: KubeClient,
    harness: Harness,
    cluster: StandIns,
    ledger: Ledger,
    clock: ManualTime,
    tmp_path: Path,
) -> None:
    priority_classes(emu)  # low / mid / high; team preempts lower priorities within the queue
    await admin.create(
        LOCAL_QUEUES,
        {"apiVersion": "queueing.dra.io/v1beta1", "kind": "LocalQueue",
         "metadata": {"name": "lq2", "namespace": "default"}, "spec": {"clusterQueue": "team"}},
        "default",
    )  # fmt: skip
    await admin.create(JOBS, prio_job("big", "mid", parallelism=2, template="gpu-4"))  # the whole quota
    clock.advance(10)
    ctl = await harness.start()
    await eventually(lambda: running(emu, "big", 2), "big runs")

    # waiting for quota: since its Job's creation, in the ledger and in explain alike
    await admin.create(JOBS, prio_job("waiter", "mid", template="gpu-4", queue="lq2"))
    await eventually(lambda: pending_reason(emu, "job-waiter", "Pending"), "waiter pending for quota")
    created = ms((get(emu, "jobs", "waiter", "batch") or {})["metadata"]["creationTimestamp"])
    row = await ledger_row(ledger, "job-waiter")
    assert (row.state, row.queued_at_ms) == ("pending", created)
    out = await explain(emu, tmp_path, "default/waiter")
    assert out.returncode == 0, out.stderr
    assert f"Waiting:   since {shown(created)}, never admitted" in out.stdout
    assert f"never admitted; queued since {shown(created)}" in out.stdout

    # 1000 s later big finishes and the waiter is admitted: it waited from its Job's creation
    clock.advance(1000)
    admitted_at = round(clock() * 1000)
    cluster.finish_pods("default", "big")
    await eventually(lambda: running(emu, "waiter", 1), "the waiter runs")
    rows = await wait_rows(ledger)
    assert rows["default/lq2"]["admissions"] == 1
    assert float(rows["default/lq2"]["max_s"]) == pytest.approx((admitted_at - created) / 1000, abs=1e-9)
    # (not the −0.1…0 s of a workload recorded at its admission)
    assert float(rows["default/lq2"]["max_s"]) > 500
    # the metric observed the same waits as the report (every admission to team)
    team = rows["team"]
    assert wait_metric(ctl) == pytest.approx(
        float(team["mean_s"]) * team["admissions"], abs=0.002 * team["admissions"]
    )

    # an in-queue preemption: its eviction names the preemptor's ClusterQueue, and resets the wait
    await admin.create(JOBS, prio_job("urgent", "high", parallelism=2, template="gpu-4"))
    await eventually(lambda: running(emu, "urgent", 2), "urgent runs after preempting the waiter")
    await eventually(lambda: pending_reason(emu, "job-waiter", "Pending"), "the waiter is pending again")
    async with ledger.engine.connect() as c:
        ev = (await c.execute(select(m.Eviction))).one()
    assert (ev.victim_cluster_queue, ev.preemptor_cluster_queue) == ("team", "team")
    by_queue = (await run_report(ledger.engine, "evictions-by-queue")).as_dicts()
    assert by_queue == [
        {"victim_cluster_queue": "team", "preemptor_cluster_queue": "team", "evictions": 1,
         "planned_devices": 4, "freed_devices": 4}
    ]  # fmt: skip
    row = await ledger_row(ledger, "job-waiter")
    assert (row.state, row.queued_at_ms) == ("pending", ev.evicted_at_ms)
    assert is_true(workload(emu, "job-waiter"), "Requeued")
    out = await explain(emu, tmp_path, "default/waiter")
    assert f"Waiting:   since {shown(ev.evicted_at_ms)};" in out.stdout
    team = (await wait_rows(ledger))["team"]
    assert wait_metric(ctl) == pytest.approx(
        float(team["mean_s"]) * team["admissions"], abs=0.002 * team["admissions"]
    )

    # item 8b: the ledger cannot be read: the cluster's view is printed, and one line says why
    (tmp_path / "ledger.db").unlink()  # (the controller keeps its open file)
    (tmp_path / "ledger.db").mkdir()  # not a database any more: every read fails
    out = await explain(emu, tmp_path, "default/urgent")
    assert out.returncode == 0, out.stderr
    assert "State:     Admitted to ClusterQueue team" in out.stdout
    assert "Plan:      main[0] -> node-" in out.stdout
    lines = [ln for ln in out.stdout.splitlines() if "the ledger is unreachable" in ln]
    assert len(lines) == 1 and lines[0].endswith("the above is the cluster's view only"), out.stdout
    assert not cluster.errors
