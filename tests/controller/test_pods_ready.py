"""waitForPodsReady end to end: an admitted Job whose pods do not all become Ready within the timeout
is evicted (PodsReadyTimeout) and requeued with exponential backoff, and deactivated once the backoff
limit is reached; a per-Workload annotation overrides the timeout; a planned node that disappears
evicts too. Time is the controller's injected clock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from queueing.config import Config
from queueing.kube.client import JOBS, PODS, KubeClient
from queueing.ledger.repository import Ledger
from queueing.testing import Emulator
from queueing.testing.cluster import StandIns
from tests.controller.conftest import Harness, ManualTime, eventually, job
from tests.controller.test_admission import cond, get, is_true, job_pods, running, workload
from tests.controller.test_eviction import prio_job, priority_classes

TIMEOUT = 60.0


@pytest.fixture
def clock() -> ManualTime:
    return ManualTime()


@pytest.fixture
def config() -> Config:
    return Config(
        wait_for_pods_ready={
            "enable": True,
            "timeout": TIMEOUT,
            "requeuing_strategy": {
                "backoff_base_seconds": 10,
                "backoff_max_seconds": 15,
                "backoff_limit_count": 2,
            },
        }
    )


@pytest.fixture
async def harness(emu: Emulator, ledger: Ledger, config: Config, clock: ManualTime) -> AsyncIterator[Harness]:
    h = Harness(emu, ledger, config, clock=clock)
    try:
        yield h
    finally:
        await h.stop()


def bound(emu: Emulator, name: str) -> list[dict[str, Any]]:
    pods = [p for p in job_pods(emu, name) if p["spec"].get("nodeName")]
    return pods if pods else []


def requeue_count(emu: Emulator, name: str) -> int | None:
    wl = workload(emu, name) or {}
    return ((wl.get("status") or {}).get("requeueState") or {}).get("count")


async def test_pods_ready_timeout_evicts_requeues_with_backoff_then_deactivates(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns, ledger: Ledger, clock: ManualTime
) -> None:
    cluster.not_ready_jobs.add("slow")
    ctl = await harness.start()
    await admin.create(JOBS, job("slow", template="gpu-1"))
    waits = []
    for attempt in (1, 2):
        await eventually(lambda: bound(emu, "slow"), f"slow's pod is bound (attempt {attempt})")
        assert is_true(workload(emu, "job-slow"), "Admitted")
        clock.advance(TIMEOUT - 1)
        ctl.synced.clear()
        ctl.wake()
        await asyncio.wait_for(ctl.synced.wait(), 20)  # a full sync after the change: still in time
        assert is_true(workload(emu, "job-slow"), "Admitted") and not is_true(
            workload(emu, "job-slow"), "Evicted"
        )
        clock.advance(2)
        ctl.wake()
        ev = await eventually(lambda: (c := cond(workload(emu, "job-slow"), "Evicted")) and c["status"] == "True" and c,
                              "evicted for PodsReadyTimeout")  # fmt: skip
        assert ev["reason"] == "PodsReadyTimeout" and "0 of 1 pod(s) Ready" in ev["message"]
        await eventually(lambda n=attempt: requeue_count(emu, "job-slow") == n, f"requeued {attempt}")
        assert not job_pods(emu, "slow")  # the Job was suspended, its pod is gone
        wl = workload(emu, "job-slow")
        assert wl is not None and not is_true(wl, "QuotaReserved") and is_true(wl, "Requeued")
        waits.append(wl["status"]["requeueState"]["requeueAt"])
        # exponential backoff: 10 s, then 20 s capped at backoffMaxSeconds 15 s
        delay = min(10 * 2 ** (attempt - 1), 15)
        clock.advance(delay - 1)
        ctl.wake()
        await eventually(lambda: (c := cond(workload(emu, "job-slow"), "QuotaReserved")) and c["reason"] == "Backoff",
                         "waiting for the backoff")  # fmt: skip
        clock.advance(2)
        ctl.wake()
    # third admission times out too: the backoff limit (2) is reached, the workload is deactivated
    await eventually(lambda: bound(emu, "slow"), "slow's pod is bound (attempt 3)")
    clock.advance(TIMEOUT + 1)
    ctl.wake()
    wl = await eventually(lambda: (w := workload(emu, "job-slow")) and w["spec"].get("active") is False and w,
                          "deactivated")  # fmt: skip
    await eventually(lambda: (c := cond(workload(emu, "job-slow"), "Evicted")) and c["reason"] == "DeactivatedDueToRequeuingLimitExceeded",
                     "evicted condition says deactivated")  # fmt: skip
    assert not job_pods(emu, "slow")
    state = await ledger.load_state()
    assert not state.admissions
    assert (
        ctl.metrics.value(
            "queueing_evicted_workloads_total", {"cluster_queue": "team", "reason": "PodsReadyTimeout"}
        )
        == 3
    )
    assert get(emu, "jobs", "slow", "batch")["spec"]["suspend"] is True  # type: ignore[index]
    assert not cluster.errors


async def test_annotation_overrides_timeout_and_lost_node_evicts(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns, clock: ManualTime
) -> None:
    cluster.not_ready_jobs.add("quick")
    ctl = await harness.start()
    body = job("quick", template="gpu-1")
    body["metadata"]["annotations"] = {"queueing.dra.io/pods-ready-timeout": "5s"}
    await admin.create(JOBS, body)
    await admin.create(JOBS, job("steady", template="gpu-4"))
    await eventually(lambda: bound(emu, "quick"), "quick's pod is bound")
    steady = await eventually(lambda: running(emu, "steady", 1), "steady runs")
    clock.advance(6)  # past the annotation's 5 s, far below the configured 60 s
    ctl.wake()
    ev = await eventually(lambda: (c := cond(workload(emu, "job-quick"), "Evicted")) and c,
                          "quick evicted by its own timeout")  # fmt: skip
    assert ev["reason"] == "PodsReadyTimeout" and "5s" in ev["message"]
    assert not is_true(workload(emu, "job-steady"), "Evicted")  # its pods are Ready

    # the node of steady's plan disappears
    node = steady[0]["spec"]["nodeName"]
    emu.store.delete(emu.store.resource("nodes"), None, node)
    ev = await eventually(lambda: (c := cond(workload(emu, "job-steady"), "Evicted")) and c,
                          "steady evicted: its node is gone")  # fmt: skip
    assert ev["reason"] == "NodeLost" and node in ev["message"]
    await eventually(lambda: is_true(workload(emu, "job-steady"), "Requeued"), "steady requeued")
    assert requeue_count(emu, "job-steady") is None  # only a PodsReady timeout backs off
    assert not job_pods(emu, "steady")


async def test_preemption_requeues_at_once_and_keeps_the_pods_ready_backoff_count(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns, clock: ManualTime
) -> None:
    """A PodsReady timeout backs off (requeueState count 1); a later preemption of the same workload
    requeues it at once and leaves requeueState as it was (Kueue: backoff is waitForPodsReady's)."""
    priority_classes(emu)
    cluster.not_ready_jobs.add("low")
    ctl = await harness.start()
    await admin.create(JOBS, prio_job("low", "low", template="gpu-4"))
    await eventually(lambda: bound(emu, "low"), "low's pod is bound")
    clock.advance(TIMEOUT + 1)
    ctl.wake()
    await eventually(lambda: requeue_count(emu, "job-low") == 1, "low backs off after its PodsReady timeout")
    wl = workload(emu, "job-low")
    assert wl is not None and cond(wl, "Requeued")["reason"] == "PodsReadyTimeout"  # type: ignore[index]
    requeue_at = wl["status"]["requeueState"]["requeueAt"]
    cluster.not_ready_jobs.discard("low")  # this time its pod gets Ready
    clock.advance(11)  # past the 10 s backoff
    ctl.wake()
    await eventually(lambda: running(emu, "low", 1), "low runs after its backoff")
    await admin.create(JOBS, prio_job("mid", "mid", template="gpu-4"))
    await eventually(lambda: running(emu, "mid", 1), "mid runs")  # every GPU in use
    await admin.create(JOBS, prio_job("high", "high", template="gpu-4"))
    ev = await eventually(lambda: (c := cond(workload(emu, "job-low"), "Evicted")) and c["status"] == "True" and c,
                          "low is preempted")  # fmt: skip
    assert ev["reason"] == "Preempted"
    await eventually(lambda: running(emu, "high", 1), "high runs")
    wl = await eventually(lambda: (w := workload(emu, "job-low")) and cond(w, "Requeued")["reason"] == "Preempted" and w,  # type: ignore[index]
                          "low requeued after its preemption")  # fmt: skip
    assert wl["status"]["requeueState"] == {"count": 1, "requeueAt": requeue_at}  # untouched
    assert not is_true(wl, "QuotaReserved")
    # no backoff: it runs again as soon as there is room, without the clock moving
    cluster.finish_pods("default", "high")
    await eventually(lambda: running(emu, "low", 1), "low runs again at once")
    assert requeue_count(emu, "job-low") == 1
    assert not cluster.errors


async def set_pod_ready(admin: KubeClient, pod: dict[str, Any], ready: bool) -> None:
    """What a kubelet writes when a pod's readiness probe fails or passes again."""
    conds = [c for c in pod["status"].get("conditions") or [] if c["type"] != "Ready"]
    conds.append(
        {
            "type": "Ready",
            "status": "True" if ready else "False",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    )
    await admin.patch(
        PODS,
        pod["metadata"]["name"],
        {"status": {"conditions": conds}},
        pod["metadata"]["namespace"],
        subresource="status",
    )


async def test_pods_ready_condition_follows_the_pods_and_holds_the_timeout_across_a_restart(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns, clock: ManualTime
) -> None:
    """PodsReady (Kueue's reasons): False WaitForStart until the pods are Ready, True Started, False
    WaitForRecovery when one stops being Ready, True Recovered when it is again; False once evicted.
    waitForPodsReady reads it: a workload whose pods were Ready once is not evicted by the timeout,
    across a controller restart too."""
    cluster.not_ready_jobs.add("slow")
    ctl = await harness.start()
    await admin.create(JOBS, job("slow", template="gpu-1"))
    await admin.create(JOBS, job("fine", template="gpu-1"))
    (pod,) = await eventually(lambda: running(emu, "fine", 1), "fine runs")

    def pods_ready(name: str) -> tuple[str, str] | None:
        c = cond(workload(emu, name), "PodsReady")
        return (c["status"], c["reason"]) if c else None

    await eventually(lambda: pods_ready("job-fine") == ("True", "Started"), "fine: PodsReady True")
    await eventually(lambda: bound(emu, "slow"), "slow's pod is bound")
    await eventually(lambda: pods_ready("job-slow") == ("False", "WaitForStart"), "slow: waiting for its pod")
    assert cond(workload(emu, "job-fine"), "PodsReady")["message"] == (  # type: ignore[index]
        "All pods reached readiness and the workload is running"
    )

    await set_pod_ready(admin, get(emu, "pods", pod["metadata"]["name"]), False)  # type: ignore[arg-type]
    await eventually(lambda: pods_ready("job-fine") == ("False", "WaitForRecovery"), "fine lost readiness")
    await harness.stop()  # a restart forgets nothing the condition says
    ctl = await harness.start()
    clock.advance(TIMEOUT + 1)
    ctl.synced.clear()
    ctl.wake()
    await asyncio.wait_for(ctl.synced.wait(), 20)
    # slow never was Ready: evicted at its timeout; fine was Ready once: not evicted
    await eventually(lambda: is_true(workload(emu, "job-slow"), "Evicted"), "slow evicted")
    await eventually(lambda: is_true(workload(emu, "job-slow"), "Requeued"), "slow requeued")
    assert pods_ready("job-slow") == ("False", "WaitForStart")
    assert "evicted (PodsReadyTimeout)" in cond(workload(emu, "job-slow"), "PodsReady")["message"]  # type: ignore[index]
    assert is_true(workload(emu, "job-fine"), "Admitted") and not is_true(
        workload(emu, "job-fine"), "Evicted"
    )
    await set_pod_ready(admin, get(emu, "pods", pod["metadata"]["name"]), True)  # type: ignore[arg-type]
    await eventually(lambda: pods_ready("job-fine") == ("True", "Recovered"), "fine recovered")
    assert not cluster.errors
