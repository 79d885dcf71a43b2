"""``queueing explain`` (as a process, against the emulator and the test's ledger) for workloads that
were never admitted: pending for quota (with their position in the queue), inadmissible (a LocalQueue
that does not exist, a stopped LocalQueue) and deactivated."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from queueing.kube.client import JOBS, LOCAL_QUEUES, WORKLOADS, KubeClient
from queueing.ledger.repository import Ledger
from queueing.testing import Emulator
from queueing.testing.cluster import StandIns
from tests.controller.conftest import Harness, eventually, job
from tests.controller.test_admission import cond, get, running, workload
from tests.controller.test_eviction import explain


def pending_reason(emu: Emulator, name: str, reason: str) -> dict[str, Any] | None:
    c = cond(workload(emu, name), "QuotaReserved")
    return c if c is not None and c["status"] == "False" and c["reason"] == reason else None


async def test_explain_never_admitted_inadmissible_and_deactivated(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns, ledger: Ledger, tmp_path: Path
) -> None:
    emu.load_objects(
        [{"apiVersion": "queueing.dra.io/v1beta1", "kind": "WorkloadPriorityClass",
          "metadata": {"name": "urgent"}, "value": 100}]
    )  # fmt: skip
    await admin.create(
        LOCAL_QUEUES,
        {"apiVersion": "queueing.dra.io/v1beta1", "kind": "LocalQueue",
         "metadata": {"name": "held", "namespace": "default"}, "spec": {"clusterQueue": "team", "stopPolicy": "Hold"}},
        "default",
    )  # fmt: skip
    await harness.start()
    await admin.create(JOBS, job("big", parallelism=2, template="gpu-4"))  # the whole quota (8 GPUs)
    await eventually(lambda: running(emu, "big", 2), "big runs")
    for name in ("w1", "w2"):
        await admin.create(JOBS, job(name, template="gpu-4"))
    urgent = job("w3", template="gpu-4")
    urgent["metadata"]["labels"]["queueing.dra.io/priority-class"] = "urgent"  # no preemption in team
    await admin.create(JOBS, urgent)
    await admin.create(JOBS, job("lost", queue="nope"))
    await admin.create(JOBS, job("stopped", queue="held"))
    for name in ("job-w1", "job-w2", "job-w3"):
        await eventually(lambda n=name: pending_reason(emu, n, "Pending"), f"{name} pending for quota")
    await eventually(lambda: pending_reason(emu, "job-lost", "Inadmissible"), "lost is inadmissible")
    await eventually(lambda: pending_reason(emu, "job-stopped", "Inadmissible"), "stopped is inadmissible")

    # pending for quota, never admitted: the reason, the queue, the position, nothing in the ledger
    out = await explain(emu, tmp_path, "default/w1")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "Workload default/job-w1" in text
    assert "Queue:     LocalQueue default/lq -> ClusterQueue team, priority 0" in text
    assert "State:     Pending — Pending: insufficient unused quota for gpu.example.com" in text
    assert "never admitted; reason Pending since" in text
    assert (
        "Position:  2 of 3 pending in ClusterQueue team, 2 of 3 in LocalQueue default/lq "
        "(by priority, then creation time; fair sharing can reorder)"
    ) in text
    assert "ahead of it: default/job-w3" in text  # the higher priority goes first
    # the wait is from the Job's creation: the ledger recorded the workload when the controller saw it
    created = get(emu, "jobs", "w1", "batch")["metadata"]["creationTimestamp"]  # type: ignore[index]
    since = created.replace("T", " ").rstrip("Z")
    assert f"Waiting:   since {since}, never admitted" in text
    assert f"never admitted; queued since {since}" in text

    # inadmissible: its LocalQueue does not exist
    out = await explain(emu, tmp_path, "default/lost")
    assert out.returncode == 0, out.stderr
    assert "Queue:     LocalQueue default/nope (does not exist: create it, or move the workload" in out.stdout
    assert "State:     Pending — Inadmissible: LocalQueue default/nope doesn't exist" in out.stdout
    assert "Position:" not in out.stdout
    # inadmissible: its LocalQueue is stopped (and it is not counted among the pending above)
    out = await explain(emu, tmp_path, "default/stopped")
    assert "Queue:     LocalQueue default/held -> ClusterQueue team" in out.stdout
    assert "the LocalQueue is stopped (stopPolicy Hold)" in out.stdout
    assert "State:     Pending — Inadmissible: LocalQueue default/held is stopped" in out.stdout
    assert "Position:" not in out.stdout

    # deactivated: how to reactivate it; it no longer counts as pending, so the others move up
    await admin.patch(WORKLOADS, "job-w3", {"spec": {"active": False}}, "default")
    await eventually(lambda: pending_reason(emu, "job-w3", "Deactivated"), "w3 deactivated")
    out = await explain(emu, tmp_path, "default/job-w3")
    assert out.returncode == 0, out.stderr
    assert "priority 100" in out.stdout
    assert (
        "State:     Deactivated (spec.active is false): it will not be admitted until reactivated"
        in out.stdout
    )
    assert (
        'Reactivate: kubectl patch workload job-w3 -n default --type merge -p \'{"spec":{"active":true}}\''
        in out.stdout
    )
    assert "Position:" not in out.stdout
    out = await explain(emu, tmp_path, "default/w1")
    assert "Position:  1 of 2 pending in ClusterQueue team, 1 of 2 in LocalQueue default/lq" in out.stdout
    assert "ahead of it" not in out.stdout
    assert not cluster.errors
