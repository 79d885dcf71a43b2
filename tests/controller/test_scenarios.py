"""The controller's own suspend of a running unadmitted Job, a gang that does not fit by devices, and a
ResourceClaim shared by every pod of a gang."""

from __future__ import annotations

from queueing.kube.client import JOBS, RESOURCE_CLAIMS, KubeClient
from queueing.ledger.repository import Ledger
from queueing.testing import Emulator
from queueing.testing.cluster import StandIns
from tests.controller.conftest import CONTROLLER_USER, GPU_CLASS, Harness, eventually, job
from tests.controller.test_admission import (
    claim_devices,
    cond,
    get,
    is_true,
    items,
    planned,
    running,
    workload,
)


def events_for(emu: Emulator, name: str, reason: str) -> list[dict]:
    return [e for e in items(emu, "events") if e["involvedObject"]["name"] == name and e["reason"] == reason]


async def test_running_unadmitted_job_is_suspended_then_admitted(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns
) -> None:
    # no admission policy (its binding removed): the Job starts running
    bindings = emu.store.resource("mutatingadmissionpolicybindings", "admissionregistration.k8s.io")
    emu.store.delete(bindings, None, "queueing-suspend-queued-jobs")
    created = await admin.create(JOBS, job("eager", suspend=False))
    assert created["spec"].get("suspend") is False
    await eventually(lambda: cluster.pods_created >= 1, "the Job controller started a pod")
    await harness.start()
    await eventually(lambda: events_for(emu, "eager", "Suspended"), "the controller suspended the Job")
    wl = await eventually(lambda: is_true(workload(emu, "job-eager"), "Admitted") and workload(emu, "job-eager"),
                          "admitted")  # fmt: skip
    (pod,) = await eventually(lambda: running(emu, "eager", 1), "the pod runs")
    assert pod["spec"]["nodeName"] == planned(wl)[0]["nodeName"]
    assert cluster.pods_created == 2  # the unadmitted pod was deleted on suspend, a new one made
    assert not cluster.errors


async def test_gang_that_does_not_fit_by_devices_stays_pending(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns, ledger: Ledger
) -> None:
    # someone else's claim holds one GPU on each node: 3 + 3 free, quota 8 free
    for node in ("node-a", "node-b"):
        claims = emu.store.resource("resourceclaims", "resource.k8s.io")
        c = emu.store.create(claims, "default", {
            "metadata": {"name": f"other-{node}", "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": GPU_CLASS}}]}},
        })  # fmt: skip
        c["status"] = {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": GPU_CLASS, "pool": node, "device": "gpu-0"}]}}}  # fmt: skip
        emu.store.update(claims, "default", c["metadata"]["name"], c, subresource="status")
    await harness.start()
    await admin.create(JOBS, job("big", parallelism=2, template="gpu-4"))

    def pending_reason() -> dict | None:
        c = cond(workload(emu, "job-big"), "QuotaReserved")
        return c if c is not None and c["status"] == "False" else None

    c = await eventually(pending_reason, "a pending reason")
    assert c["reason"] == "Pending"
    assert "4" in c["message"] and ("gpu" in c["message"]) and "node-" in c["message"], c["message"]
    wl = workload(emu, "job-big")
    assert wl is not None and wl["status"]["reason"] == c["message"][:316]
    assert "admission" not in wl["status"] or wl["status"]["admission"] is None
    assert get(emu, "jobs", "big", "batch")["spec"]["suspend"] is True  # type: ignore[index]
    assert not (await ledger.load_state()).admissions
    assert events_for(emu, "job-big", "Pending")

    # a smaller job still gets in (BestEffortFIFO): 1 pod x 2 GPUs
    await admin.create(JOBS, job("small", template="gpu-2"))
    await eventually(lambda: running(emu, "small", 1), "the small job runs")
    assert not is_true(workload(emu, "job-big"), "QuotaReserved")


async def test_shared_claim_is_allocated_once_for_the_gang(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns, ledger: Ledger
) -> None:
    await admin.create(RESOURCE_CLAIMS, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "team-gpus", "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": GPU_CLASS, "count": 2}}]}},
    })  # fmt: skip
    await harness.start()
    before = emu.writes_by(CONTROLLER_USER).snapshot()
    await admin.create(JOBS, job("gang", parallelism=3, template=None, shared_claim="team-gpus"))
    pods = await eventually(lambda: running(emu, "gang", 3), "all three pods run")
    wl = workload(emu, "job-gang")
    assert wl is not None
    assert wl["status"]["admission"]["plannedDevices"] == 2
    claim = get(emu, "resourceclaims", "team-gpus", "resource.k8s.io")
    assert claim is not None
    devices = claim_devices(claim)
    assert len(devices) == 2
    (node,) = {pool for _, pool, _ in devices}
    assert {p["spec"]["nodeName"] for p in pods} == {node}
    writes = emu.writes_by(CONTROLLER_USER).since(before)
    assert writes.total("patch", "resourceclaims/status") == 1  # allocated once, before the Job starts
    assert writes.total("patch", "pods") == 0  # one node for all: no gate, no per-pod write
    state = await ledger.load_state()
    assert sum(state.usage.values()) == 2  # charged once, not per pod
    assert not cluster.errors
