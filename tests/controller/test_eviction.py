"""Eviction end to end (emulator, real client): a high-priority Job evicts a lower-priority one holding
the GPUs it needs; the victim's pods and claims go, the preemptor lands on exactly the freed devices,
the victim is requeued at once (a preemption does not back off) and runs again once there is room.
Time is the controller's injected clock."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from queueing.config import Config
from queueing.kube.client import JOBS, WORKLOADS, KubeClient
from queueing.ledger import models as m
from queueing.ledger.repository import Ledger
from queueing.testing import Emulator
from queueing.testing.cluster import StandIns
from tests.controller.conftest import Harness, ManualTime, eventually, job
from tests.controller.test_admission import cond, get, is_true, items, job_pods, running, workload

WPC = "workloadpriorityclasses"


def priority_classes(emu: Emulator) -> None:
    emu.load_objects(
        [
            {"apiVersion": "queueing.dra.io/v1beta1", "kind": "WorkloadPriorityClass",
             "metadata": {"name": name}, "value": value}
            for name, value in (("low", 10), ("mid", 20), ("high", 100))
        ]
    )  # fmt: skip
    cq = emu.store.get(emu.store.resource("clusterqueues", "queueing.dra.io"), None, "team")
    cq["spec"]["preemption"] = {"withinClusterQueue": "LowerPriority"}
    emu.store.update(emu.store.resource("clusterqueues", "queueing.dra.io"), None, "team", cq)


def prio_job(name: str, priority: str, **kw: Any) -> dict[str, Any]:
    body = job(name, **kw)
    body["metadata"]["labels"]["queueing.dra.io/priority-class"] = priority
    return body


def plan_devices(wl: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (d["driver"], d["pool"], d["device"])
        for psa in wl["status"]["admission"]["podSetAssignments"]
        for p in psa["placements"]
        for c in p["claims"]
        for d in c["devices"]
    }


def allocated(emu: Emulator) -> dict[str, set[tuple[str, str, str]]]:
    out = {}
    for c in items(emu, "resourceclaims", "resource.k8s.io"):
        alloc = (c.get("status") or {}).get("allocation")
        if alloc:
            out[c["metadata"]["name"]] = {
                (r["driver"], r["pool"], r["device"]) for r in alloc["devices"]["results"]
            }
    return out


@pytest.fixture
def clock() -> ManualTime:
    return ManualTime()


@pytest.fixture
def config() -> Config:
    return Config(
        wait_for_pods_ready={
            "enable": False,
            "requeuing_strategy": {"backoff_base_seconds": 10, "backoff_max_seconds": 100},
        }
    )


@pytest.fixture
async def harness(emu: Emulator, ledger: Ledger, config: Config, clock: ManualTime) -> AsyncIterator[Harness]:
    h = Harness(emu, ledger, config, clock=clock)
    try:
        yield h
    finally:
        await h.stop()


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


async def explain(emu: Emulator, tmp_path: Path, target: str) -> Ran:
    """``queueing explain`` as a process, against the emulator (admin kubeconfig) and the test's ledger."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "queueing", "explain", target,
        "--kubeconfig", str(emu.kubeconfig_path(tmp_path)), "--url", f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return Ran(proc.returncode, out.decode(), err.decode())


async def test_high_priority_job_preempts_and_victim_runs_again(
    emu: Emulator,
    admin: KubeClient,
    harness: Harness,
    cluster: StandIns,
    ledger: Ledger,
    clock: ManualTime,
    tmp_path: Path,
) -> None:
    priority_classes(emu)
    ctl = await harness.start()
    await admin.create(JOBS, prio_job("low", "low", template="gpu-4"))
    await eventually(lambda: running(emu, "low", 1), "low runs")
    await admin.create(JOBS, prio_job("mid", "mid", template="gpu-4"))
    await eventually(lambda: running(emu, "mid", 1), "mid runs")  # every GPU of both nodes is in use
    low_wl = workload(emu, "job-low")
    assert low_wl is not None
    low_devices = plan_devices(low_wl)
    assert len(low_devices) == 4
    (low_pod,) = job_pods(emu, "low")

    await admin.create(JOBS, prio_job("high", "high", template="gpu-4"))
    # the lowest-priority Job is the victim, named with its preemptor
    evicted = await eventually(lambda: cond(workload(emu, "job-low"), "Evicted"), "low is evicted")
    assert evicted["status"] == "True" and evicted["reason"] == "Preempted"
    assert "default/job-high" in evicted["message"] and "InClusterQueue" in evicted["message"]
    preempted = cond(workload(emu, "job-low"), "Preempted")
    assert preempted is not None and preempted["reason"] == "InClusterQueue"
    assert is_true(workload(emu, "job-mid"), "Admitted") and not cond(workload(emu, "job-mid"), "Evicted")

    high = await eventually(lambda: running(emu, "high", 1), "high runs")
    high_wl = workload(emu, "job-high")
    assert high_wl is not None and plan_devices(high_wl) == low_devices  # exactly the freed GPUs
    # the victim's pod and its claim are gone; the preemptor's claim holds those devices
    assert get(emu, "pods", low_pod["metadata"]["name"]) is None
    assert not job_pods(emu, "low")
    claims = allocated(emu)
    holders = [name for name, devs in claims.items() if devs & low_devices]
    assert len(holders) == 1 and holders[0].startswith(high[0]["metadata"]["name"])
    assert get(emu, "jobs", "low", "batch")["spec"]["suspend"] is True  # type: ignore[index]

    low_wl = workload(emu, "job-low")
    assert low_wl is not None
    assert not is_true(low_wl, "QuotaReserved") and "admission" not in low_wl["status"]
    requeued = cond(low_wl, "Requeued")
    assert requeued is not None and requeued["status"] == "True" and requeued["reason"] == "Preempted"
    # a preempted workload is pending again at once: no backoff, no requeueState (as in Kueue)
    assert "requeueState" not in low_wl["status"]
    assert requeued["message"] == "requeued at once after eviction (Preempted)"
    assert cond(low_wl, "Admitted")["reason"] == "Preempted"  # type: ignore[index]

    # the ledger: the eviction is recorded with its preemptor, before the preemptor's admission
    async with ledger.engine.connect() as c:
        (row,) = (await c.execute(select(m.Eviction))).all()
        adms = (await c.execute(select(m.Admission).order_by(m.Admission.id))).all()
    assert row.workload_uid == low_wl["metadata"]["uid"] and row.reason == "Preempted"
    assert row.preemptor_uid == high_wl["metadata"]["uid"]
    assert row.freed_device_count == 4
    high_adm = next(a for a in adms if a.workload_uid == high_wl["metadata"]["uid"])
    low_adm = next(a for a in adms if a.workload_uid == low_wl["metadata"]["uid"])
    assert low_adm.released_at_ms is not None and low_adm.release_reason == "Preempted"
    assert row.evicted_at_ms <= high_adm.admitted_at_ms
    state = await ledger.load_state()
    assert set(state.admissions) == {high_wl["metadata"]["uid"], workload(emu, "job-mid")["metadata"]["uid"]}  # type: ignore[index]

    # the victim is pending at once, waiting for quota (its priority is too low to preempt), not a timer
    reason = await eventually(
        lambda: (c := cond(workload(emu, "job-low"), "QuotaReserved")) and c["reason"] == "Pending" and c,
        "low is pending again",
    )
    assert "insufficient unused quota" in reason["message"] or "couldn't place" in reason["message"]

    # queueing explain, as a person reads it: the victim (pending after an eviction)...
    out = await explain(emu, tmp_path, "default/low")  # a Job's name finds its Workload
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "Workload default/job-low" in text
    assert "State:     Pending — Pending: " in text
    assert "Evicted:   Preempted: Preempted to accommodate workload default/job-high" in text
    assert "Requeued:  requeued at once after eviction (Preempted)" in text
    assert "released (Preempted)" in text
    assert "evicted (Preempted) by default/job-high" in text and "freed 4 of 4 planned device(s)" in text
    # the preemptor finishes; the victim runs again at once (the clock never moves in this test)
    assert cluster.finish_pods("default", "high") == 1
    await eventually(lambda: is_true(workload(emu, "job-high"), "Finished"), "high finishes")
    # ... and the preemptor, finished, with the workload it preempted
    out = await explain(emu, tmp_path, "default/job-high")
    assert out.returncode == 0, out.stderr
    assert "State:     Finished (Succeeded)" in out.stdout
    assert "preempted default/job-low (Preempted, ClusterQueue team)" in out.stdout
    assert "released (Succeeded)" in out.stdout
    missing = await explain(emu, tmp_path, "default/nothing")
    assert missing.returncode == 1 and "not found" in missing.stderr
    bad = await explain(emu, tmp_path, "no-slash")
    assert bad.returncode == 2 and "NAMESPACE/WORKLOAD" in bad.stderr
    await eventually(lambda: running(emu, "low", 1), "low runs again")
    low_wl = workload(emu, "job-low")
    assert is_true(low_wl, "Admitted") and not is_true(low_wl, "Evicted")
    assert (
        ctl.metrics.value(
            "queueing_evicted_workloads_total", {"cluster_queue": "team", "reason": "Preempted"}
        )
        == 1
    )
    assert (
        ctl.metrics.value(
            "queueing_preempted_workloads_total",
            {"preempting_cluster_queue": "team", "reason": "InClusterQueue"},
        )
        == 1
    )
    assert not cluster.errors
    assert not emu.authorizer.denied  # type: ignore[union-attr]


async def test_restart_in_the_middle_resumes_the_eviction(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns, ledger: Ledger
) -> None:
    priority_classes(emu)
    await harness.start()
    await admin.create(JOBS, prio_job("low", "low", template="gpu-4"))
    await admin.create(JOBS, prio_job("mid", "mid", template="gpu-4"))
    await eventually(lambda: running(emu, "low", 1) and running(emu, "mid", 1), "low and mid run")
    low_wl = workload(emu, "job-low")
    assert low_wl is not None
    low_uid, low_devices = low_wl["metadata"]["uid"], plan_devices(low_wl)
    cluster.stuck_jobs.add("low")  # its pod will not go away for now
    await admin.create(JOBS, prio_job("high", "high", template="gpu-4"))
    await eventually(lambda: is_true(workload(emu, "job-low"), "Evicted"), "low is being evicted")
    assert is_true(workload(emu, "job-low"), "QuotaReserved")  # still holds its quota: its pod runs
    assert (await ledger.load_state()).admissions.keys() >= {low_uid}

    await harness.stop()  # the controller goes away in the middle of the eviction
    ctl = await harness.start()
    assert low_uid in ctl.evicting  # resumed from the Workload's condition and the ledger
    assert not is_true(workload(emu, "job-high"), "Admitted")
    cluster.stuck_jobs.discard("low")
    cluster.step()  # the pod goes now
    high = await eventually(lambda: running(emu, "high", 1), "high runs after the resumed eviction")
    assert high
    high_wl = workload(emu, "job-high")
    assert high_wl is not None and plan_devices(high_wl) == low_devices
    await eventually(lambda: is_true(workload(emu, "job-low"), "Requeued"), "low requeued")
    assert requeue_count(workload(emu, "job-low")) is None  # at once: no backoff for a preemption
    async with ledger.engine.connect() as c:
        evictions = (await c.execute(select(m.Eviction))).all()
    assert [e.workload_uid for e in evictions] == [low_uid]  # evicted once, across the restart


async def test_victim_that_does_not_go_away_gets_the_plan_recomputed(
    emu: Emulator, admin: KubeClient, ledger: Ledger, config: Config, clock: ManualTime, cluster: StandIns
) -> None:
    priority_classes(emu)
    h = Harness(emu, ledger, config, clock=clock, eviction_timeout=30.0)
    try:
        ctl = await h.start()
        await admin.create(JOBS, prio_job("low", "low", template="gpu-4"))
        await admin.create(JOBS, prio_job("mid", "mid", template="gpu-4"))
        await eventually(lambda: running(emu, "low", 1) and running(emu, "mid", 1), "low and mid run")
        mid_wl = workload(emu, "job-mid")
        assert mid_wl is not None
        cluster.stuck_jobs.add("low")
        await admin.create(JOBS, prio_job("high", "high", template="gpu-4"))
        await eventually(lambda: is_true(workload(emu, "job-low"), "Evicted"), "low is being evicted")
        assert not is_true(workload(emu, "job-mid"), "Evicted")
        clock.advance(31)  # low's pod is still there after the eviction timeout
        ctl.wake()
        # the preemptor's plan is recomputed without counting on low: mid is the next victim
        await eventually(lambda: is_true(workload(emu, "job-mid"), "Evicted"), "mid is evicted instead")
        await eventually(lambda: running(emu, "high", 1), "high runs on mid's devices")
        high_wl = workload(emu, "job-high")
        assert high_wl is not None and plan_devices(high_wl) == plan_devices(mid_wl)
        assert is_true(workload(emu, "job-low"), "QuotaReserved")  # still being evicted, quota still held
        cluster.stuck_jobs.discard("low")
        cluster.step()
        await eventually(lambda: is_true(workload(emu, "job-low"), "Requeued"), "low finally requeued")
        assert requeue_count(workload(emu, "job-low")) is None
    finally:
        await h.stop()


def requeue_count(wl: dict[str, Any] | None) -> int | None:
    return (((wl or {}).get("status") or {}).get("requeueState") or {}).get("count")


async def test_partial_admission_parallelism_restored_when_evicted(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns
) -> None:
    """A Job admitted with a lowered parallelism (minCount) gets its own parallelism back when it is
    suspended by its eviction (Kueue restores the pod set info); admitted again, it is lowered again."""
    priority_classes(emu)
    await harness.start()
    await admin.create(JOBS, prio_job("mid", "mid", template="gpu-4"))
    await eventually(lambda: running(emu, "mid", 1), "mid runs")  # one node's 4 GPUs
    body = prio_job("part", "low", parallelism=4, template="gpu-2")  # 8 GPUs wanted, 4 free
    body["metadata"]["annotations"] = {"queueing.dra.io/min-parallelism": "1"}
    await admin.create(JOBS, body)
    await eventually(lambda: running(emu, "part", 2), "part runs 2 of its 4 pods")
    part = get(emu, "jobs", "part", "batch")
    assert part is not None and part["spec"]["parallelism"] == 2
    assert part["metadata"]["annotations"]["queueing.dra.io/original-parallelism"] == "4"
    wl = workload(emu, "job-part")
    assert wl is not None and wl["status"]["admission"]["podSetAssignments"][0]["count"] == 2

    await admin.create(JOBS, prio_job("high", "high", template="gpu-4"))
    await eventually(lambda: is_true(workload(emu, "job-part"), "Evicted"), "part is preempted")
    part = await eventually(
        lambda: (j := get(emu, "jobs", "part", "batch")) and j["spec"].get("suspend") and j,
        "part is suspended",
    )
    # suspended with its own parallelism back, in the same write; the bookkeeping annotation is gone
    assert part["spec"]["parallelism"] == 4
    assert "queueing.dra.io/original-parallelism" not in (part["metadata"].get("annotations") or {})
    await eventually(lambda: running(emu, "high", 1), "high runs on part's devices")
    wl = workload(emu, "job-part")
    assert wl is not None and wl["spec"]["podSets"][0]["count"] == 4 and "admission" not in wl["status"]

    # high finishes: part is admitted partially again (the Workload still asks for 4) and lowered again
    cluster.finish_pods("default", "high")
    await eventually(lambda: running(emu, "part", 2), "part runs 2 of 4 again")
    part = get(emu, "jobs", "part", "batch")
    assert part is not None and part["spec"]["parallelism"] == 2
    assert part["metadata"]["annotations"]["queueing.dra.io/original-parallelism"] == "4"
    assert not cluster.errors
    assert not emu.authorizer.denied  # type: ignore[union-attr]


def bare_workload(name: str, priority: int | None = None, template: str | None = "gpu-4") -> dict[str, Any]:
    """A Workload created directly (no Job, no pods: nothing will ever run it); ``template``: the
    ResourceClaimTemplate of its one pod (None: it asks for no devices)."""
    pod: dict[str, Any] = {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}
    if template:
        pod["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
        pod["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": template}]
    spec: dict[str, Any] = {
        "queueName": "lq",
        "podSets": [{"name": "main", "count": 1, "template": {"spec": pod}}],
    }
    if priority is not None:
        spec["priority"] = priority
    return {
        "apiVersion": "queueing.dra.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


async def test_eviction_of_a_victim_without_pods_completes_on_its_own_events(
    emu: Emulator, admin: KubeClient, ledger: Ledger, config: Config
) -> None:
    """A victim with nothing to wait for (a Workload without a Job: it never had pods) is released and
    requeued at once: no periodic sync (this harness runs none; the eviction timeout's and the queue
    status throttle's wake-ups are an hour away) and no other event is needed. The clock is real."""
    cq = emu.store.get(emu.store.resource("clusterqueues", "queueing.dra.io"), None, "team")
    cq["spec"]["preemption"] = {"withinClusterQueue": "LowerPriority"}
    emu.store.update(emu.store.resource("clusterqueues", "queueing.dra.io"), None, "team", cq)
    h = Harness(emu, ledger, config, eviction_timeout=3600.0, queue_status_period=3600.0)
    try:
        await h.start()
        await admin.create(WORKLOADS, bare_workload("low", 10))
        await admin.create(WORKLOADS, bare_workload("mid", 20))
        await eventually(
            lambda: is_true(workload(emu, "low"), "Admitted") and is_true(workload(emu, "mid"), "Admitted"),
            "low and mid admitted",
        )
        await admin.create(WORKLOADS, bare_workload("high", 100))
        await eventually(lambda: is_true(workload(emu, "low"), "Evicted"), "low is evicted")
        # released, requeued, and the preemptor admitted: within a couple of seconds of the eviction
        await eventually(
            lambda: is_true(workload(emu, "low"), "Requeued") and is_true(workload(emu, "high"), "Admitted"),
            "low requeued and high admitted without a periodic sync",
            timeout=3.0,
        )
        assert not is_true(workload(emu, "low"), "QuotaReserved")
        assert (await ledger.load_state()).admissions.keys() == {
            workload(emu, "mid")["metadata"]["uid"],  # type: ignore[index]
            workload(emu, "high")["metadata"]["uid"],  # type: ignore[index]
        }
    finally:
        await h.stop()
