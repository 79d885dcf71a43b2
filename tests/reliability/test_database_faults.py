"""The database goes away for a while (every statement the ledger sends fails, as with a stopped
server or killed connections): the controller admits nothing meanwhile, keeps running, and once the
database is back it resumes without loss — the Job that arrived meanwhile is admitted once, the Job
that finished meanwhile is released once, and the ledger agrees with the cluster."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy import event
from sqlalchemy.exc import OperationalError

from queueing.controller.controller import Controller
from queueing.kube.client import JOBS, KubeClient
from queueing.ledger.repository import Ledger
from queueing.testing import Emulator
from queueing.testing.cluster import StandIns
from tests.controller.conftest import Harness, eventually, job
from tests.controller.test_admission import is_true, running, workload
from tests.controller.test_reliability import admissions_per_workload


class Outage:
    """Every statement on the ledger's engine fails while ``down``."""

    def __init__(self, ledger: Ledger) -> None:
        self.down = False
        self.refused = 0
        event.listen(ledger.engine.sync_engine, "before_cursor_execute", self._check)

    def _check(self, *args: Any) -> None:
        if self.down:
            self.refused += 1
            raise OperationalError("SELECT 1", {}, Exception("database unavailable (injected)"))


async def outage_scenario(
    emu: Emulator,
    admin: KubeClient,
    cluster: StandIns,
    ledger: Ledger,
    c: Controller,
    down: Callable[[], Awaitable[Any]],
    up: Callable[[], Awaitable[Any]],
    *,
    while_down: Callable[[], Awaitable[Any]] | None = None,
    after_up: Callable[[], Awaitable[Any]] | None = None,
) -> None:
    """The outage story shared by the database fault tests: a Job admitted before, the database taken
    ``down``, a Job arriving and another finishing meanwhile (nothing admitted, the finish not marked:
    the ledger release comes first; the loop keeps running), then ``up``: the waiting Job is admitted
    once, the finished one released once, the ledger ends empty."""
    await admin.create(JOBS, job("before"))
    await eventually(lambda: running(emu, "before", 1), "admitted before the outage")

    await down()
    errors = c.stats.errors
    await admin.create(JOBS, job("during"))
    cluster.finish_pods("default", "before")
    await eventually(lambda: workload(emu, "job-during") is not None, "its Workload is created")
    # the controller keeps trying (each sync fails at the ledger) and keeps running
    await eventually(lambda: c.stats.errors >= errors + 3, "failed syncs", timeout=30)
    assert not is_true(workload(emu, "job-during"), "QuotaReserved")
    assert not running(emu, "during", 1)
    assert not is_true(workload(emu, "job-before"), "Finished")  # the ledger release comes first
    assert c._task is not None and not c._task.done()
    if while_down is not None:
        await while_down()

    await up()
    await eventually(lambda: running(emu, "during", 1), "admitted after the outage", timeout=60)
    await eventually(lambda: is_true(workload(emu, "job-before"), "Finished"), "finish recorded", timeout=30)
    if after_up is not None:
        await after_up()
    cluster.finish_pods("default", "during")
    await eventually(lambda: is_true(workload(emu, "job-during"), "Finished"), "all finished")
    per = await admissions_per_workload(ledger)
    assert dict(per) == {"job-before": 1, "job-during": 1}
    state = await ledger.load_state()
    assert not state.admissions and all(v.is_zero() for v in state.usage.values())
    assert not cluster.errors


async def test_database_outage_stops_admission_then_resumes_without_loss(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns, ledger: Ledger
) -> None:
    outage = Outage(ledger)

    async def down() -> None:
        outage.down = True

    async def up() -> None:
        assert outage.refused >= 3  # the failures were the injected ones
        outage.down = False

    c = await harness.start()
    await outage_scenario(emu, admin, cluster, ledger, c, down, up)
