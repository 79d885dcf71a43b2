"""A queued Job goes through the whole admission path: suspended, queued, admitted with a plan, its pods
land on the planned nodes with the planned devices, it finishes and the quota is released."""

from __future__ import annotations

from typing import Any

from queueing.kube.client import JOBS, KubeClient
from queueing.ledger.repository import Ledger
from queueing.testing import Emulator
from queueing.testing.cluster import StandIns
from tests.controller.conftest import GPU_CLASS, Harness, eventually, job


def get(
    emu: Emulator, plural: str, name: str, group: str = "", ns: str | None = "default"
) -> dict[str, Any] | None:
    try:
        return emu.store.get(emu.store.resource(plural, group), ns, name)
    except Exception:
        return None


def items(emu: Emulator, plural: str, group: str = "", labels: str | None = None) -> list[dict[str, Any]]:
    return emu.store.list(emu.store.resource(plural, group), "default", labels)[0]


def workload(emu: Emulator, name: str) -> dict[str, Any] | None:
    return get(emu, "workloads", name, "queueing.dra.io")


def cond(obj: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == type_:
            return c
    return None


def is_true(obj: dict[str, Any] | None, type_: str) -> bool:
    c = cond(obj, type_)
    return c is not None and c["status"] == "True"


def job_pods(emu: Emulator, name: str) -> list[dict[str, Any]]:
    return items(emu, "pods", labels=f"batch.kubernetes.io/job-name={name}")


def running(emu: Emulator, name: str, n: int) -> list[dict[str, Any]]:
    pods = [p for p in job_pods(emu, name) if (p.get("status") or {}).get("phase") == "Running"]
    return pods if len(pods) == n else []


def planned(wl: dict[str, Any]) -> list[dict[str, Any]]:
    return wl["status"]["admission"]["podSetAssignments"][0]["placements"]


def claim_devices(claim: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (r["driver"], r["pool"], r["device"]) for r in claim["status"]["allocation"]["devices"]["results"]
    }


async def test_job_with_claim_template_admitted_bound_finished(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns, ledger: Ledger
) -> None:
    await harness.start()
    created = await admin.create(JOBS, job("train", parallelism=2, template="gpu-2"))
    assert created["spec"]["suspend"] is True  # the admission policy's stand-in

    wl = await eventually(lambda: is_true(workload(emu, "job-train"), "Admitted") and workload(emu, "job-train"),
                          "the Workload is admitted")  # fmt: skip
    assert is_true(wl, "QuotaReserved")
    adm = wl["status"]["admission"]
    assert adm["clusterQueue"] == "team"
    assert adm["plannedDevices"] == 4
    assert adm["podSetAssignments"][0]["resourceUsage"] == {GPU_CLASS: "4"}
    plan = planned(wl)
    assert sorted(p["index"] for p in plan) == [0, 1]
    plan_by_index = {p["index"]: p for p in plan}

    pods = await eventually(lambda: running(emu, "train", 2), "both pods run")
    for pod in pods:
        idx = int(pod["metadata"]["annotations"]["queueing.dra.io/placement-index"])
        p = plan_by_index[idx]
        assert pod["spec"]["nodeName"] == p["nodeName"]
        assert "schedulingGates" not in pod["spec"] or not pod["spec"]["schedulingGates"]
        (status,) = pod["status"]["resourceClaimStatuses"]
        claim = get(emu, "resourceclaims", status["resourceClaimName"], "resource.k8s.io")
        assert claim is not None
        want = {(d["driver"], d["pool"], d["device"]) for c in p["claims"] for d in c["devices"]}
        assert claim_devices(claim) == want and len(want) == 2
        assert all(pool == p["nodeName"] for _, pool, _ in want)  # node-local devices of the planned node

    state = await ledger.load_state()
    (active,) = state.admissions.values()
    assert active.name == "job-train" and active.cluster_queue == "team"
    assert sorted(active.devices) == sorted(
        f"{d['driver']}/{d['pool']}/{d['device']}" for p in plan for c in p["claims"] for d in c["devices"]
    )
    assert sum(v for v in state.usage.values()) == 4

    cq = get(emu, "clusterqueues", "team", "queueing.dra.io", None)
    assert cq is not None
    await eventually(lambda: (get(emu, "clusterqueues", "team", "queueing.dra.io", None) or {}).get("status", {}).get("admittedWorkloads") == 1,
                     "ClusterQueue status counts the admission")  # fmt: skip

    lq = await eventually(lambda: (q := get(emu, "localqueues", "lq", "queueing.dra.io")) and q.get("status", {}).get("admittedWorkloads") == 1 and q,
                          "LocalQueue status counts the admission")  # fmt: skip
    assert lq["status"]["pendingWorkloads"] == 0
    assert lq["status"]["flavorsUsage"] == [
        {"name": "default", "resources": [{"name": GPU_CLASS, "total": "4"}]}
    ]
    cq = get(emu, "clusterqueues", "team", "queueing.dra.io", None)
    assert cq is not None and cq["status"]["flavorsUsage"] == [
        {"name": "default", "resources": [{"name": GPU_CLASS, "total": "4", "borrowed": "0"}]}
    ]
    assert cluster.finish_pods("default", "train") == 2
    wl = await eventually(lambda: is_true(workload(emu, "job-train"), "Finished") and workload(emu, "job-train"),
                          "the Workload is finished")  # fmt: skip
    state = await ledger.load_state()
    assert not state.admissions
    assert all(v == 0 for v in state.usage.values())
    await eventually(lambda: (get(emu, "clusterqueues", "team", "queueing.dra.io", None) or {}).get("status", {}).get("admittedWorkloads") == 0,
                     "ClusterQueue status released")  # fmt: skip
    assert not cluster.errors
    assert not emu.authorizer.denied  # type: ignore[union-attr]


async def test_partial_admission_lowers_the_job_parallelism(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns
) -> None:
    await harness.start()
    body = job("part", parallelism=4, template="gpu-4")  # 16 GPUs wanted, 8 in quota and on the nodes
    body["metadata"]["annotations"] = {"queueing.dra.io/min-parallelism": "1"}
    await admin.create(JOBS, body)
    wl = await eventually(lambda: is_true(workload(emu, "job-part"), "Admitted") and workload(emu, "job-part"),
                          "admitted partially")  # fmt: skip
    assert wl["status"]["admission"]["podSetAssignments"][0]["count"] == 2
    pods = await eventually(lambda: running(emu, "part", 2), "two pods run")
    assert {p["spec"]["nodeName"] for p in pods} == {"node-a", "node-b"}
    assert get(emu, "jobs", "part", "batch")["spec"]["parallelism"] == 2  # type: ignore[index]
    assert not cluster.errors
