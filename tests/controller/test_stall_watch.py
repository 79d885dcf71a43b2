"""The stall watch (controller/health.py) on a real controller: an idle loop with a workload that cannot
be admitted is not a wedge (the watch wakes it and it answers); a loop that no longer completes a sync
is one (``/readyz``'s check and the metric say so past the timeout); a dead loop fails liveness."""

from __future__ import annotations

import asyncio

from queueing.controller.health import StallWatch
from queueing.kube.client import JOBS, KubeClient
from queueing.testing import Emulator
from tests.controller.conftest import Harness, eventually, job
from tests.controller.test_admission import workload


async def test_idle_is_not_stalled_a_failing_loop_is_and_a_dead_loop_fails_liveness(
    emu: Emulator, admin: KubeClient, harness: Harness
) -> None:
    c = await harness.start()
    watch = StallWatch(c, c.metrics, timeout=0.6, period=0.05)
    await admin.create(JOBS, job("too-big", template="gpu-4", parallelism=3))  # 12 GPUs, quota 8: waits
    await eventually(lambda: workload(emu, "job-too-big") is not None, "its Workload")
    # idle for several timeouts: each time the watch asks, a sync completes
    for _ in range(4):
        await asyncio.sleep(0.3)
        assert watch.ready_check() is None, watch.stall
    assert watch.waiting == 1

    # every sync fails from now on (a bug, not an outage): no sync completes, the stall grows
    async def broken() -> None:
        raise RuntimeError("a bug in one step")

    c._bind = broken  # type: ignore[method-assign]
    c.wake()
    why = await eventually(watch.ready_check, "the stall is reported", timeout=20)
    assert why.startswith("no scheduling cycle completed for ") and why.endswith("while 1 workload(s) wait")
    assert watch.health_check() is None  # alive: a restart is not what helps here
    assert c.metrics.registry.get_sample_value("queueing_scheduling_stalled") == 1

    assert c._task is not None
    c._task.cancel()  # the loop dies
    await asyncio.sleep(0)
    await eventually(lambda: c._task is not None and c._task.done(), "the loop is gone")
    assert watch.health_check() == "the sync loop stopped"
    assert watch.ready_check() == "the sync loop stopped"
