"""Pods labelled queueing.dra.io/pod-group with the total-count annotation, created with the admission
gate, form one Workload admitted when all of them exist; each pod gets its planned node and devices.
A preempted pod group has its pods deleted by the controller; its claims go, the ledger records the
eviction and releases its quota, and the preemptor lands on exactly the freed devices."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from queueing.kube.client import JOBS, PODS, KubeClient
from queueing.ledger import models as m
from queueing.ledger.repository import Ledger
from queueing.testing import Emulator
from queueing.testing.cluster import StandIns
from tests.controller.conftest import Harness, eventually
from tests.controller.test_admission import claim_devices, cond, get, is_true, items, running, workload
from tests.controller.test_eviction import plan_devices, prio_job, priority_classes


def group_pod(
    name: str, total: int = 2, *, group: str = "g1", template: str = "gpu-2", priority: str | None = None
) -> dict[str, Any]:
    labels = {"queueing.dra.io/pod-group": group, "queueing.dra.io/queue-name": "lq"}
    if priority is not None:
        labels["queueing.dra.io/priority-class"] = priority
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": labels,
            "annotations": {"queueing.dra.io/pod-group-total-count": str(total)},
        },
        "spec": {
            "schedulingGates": [{"name": "queueing.dra.io/admission"}],
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
        },
    }


def group(emu: Emulator, name: str = "g1") -> list[dict[str, Any]]:
    return items(emu, "pods", labels=f"queueing.dra.io/pod-group={name}")


def group_running(emu: Emulator, name: str, n: int) -> list[dict[str, Any]]:
    pods = [p for p in group(emu, name) if (p.get("status") or {}).get("phase") == "Running"]
    return pods if len(pods) == n else []


async def test_pod_group_admitted_when_complete(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns, ledger: Ledger
) -> None:
    await harness.start()
    await admin.create(PODS, group_pod("g1-a"))
    # one of two pods: no Workload yet (the claim controller may already create its claim)
    await eventually(lambda: group(emu)[0].get("status", {}).get("resourceClaimStatuses"), "claim created")
    assert workload(emu, "pod-group-g1") is None
    await admin.create(PODS, group_pod("g1-b"))
    wl = await eventually(lambda: is_true(workload(emu, "pod-group-g1"), "Admitted") and workload(emu, "pod-group-g1"),
                          "the group's Workload is admitted")  # fmt: skip
    plan = {p["index"]: p for p in wl["status"]["admission"]["podSetAssignments"][0]["placements"]}
    assert len(plan) == 2
    pods = await eventually(
        lambda: [p for p in group(emu) if p.get("status", {}).get("phase") == "Running"] if all(
            p.get("status", {}).get("phase") == "Running" for p in group(emu)) else None,
        "both pods run",
    )  # fmt: skip
    for pod in pods:
        p = plan[int(pod["metadata"]["annotations"]["queueing.dra.io/placement-index"])]
        assert pod["spec"]["nodeName"] == p["nodeName"]
        claim = get(emu, "resourceclaims", pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"],
                    "resource.k8s.io")  # fmt: skip
        assert claim is not None
        assert claim_devices(claim) == {
            (d["driver"], d["pool"], d["device"]) for d in p["claims"][0]["devices"]
        }
    cluster.finish_pods("default", "", selector="queueing.dra.io/pod-group=g1")
    await eventually(lambda: is_true(workload(emu, "pod-group-g1"), "Finished"), "the group finished")
    state = await ledger.load_state()
    assert not state.admissions
    assert not cluster.errors


def _devices_of_claims(emu: Emulator, names: set[str]) -> set[tuple[str, str, str]]:
    out: set[tuple[str, str, str]] = set()
    for name in names:
        claim = get(emu, "resourceclaims", name, "resource.k8s.io")
        if claim is not None and (claim.get("status") or {}).get("allocation"):
            out |= claim_devices(claim)
    return out


def _pod_claims(pods: list[dict[str, Any]]) -> set[str]:
    return {s["resourceClaimName"] for p in pods for s in p["status"]["resourceClaimStatuses"]}


@pytest.mark.parametrize("preemptor", ["job", "pod-group"])
async def test_preempted_pod_group_pods_deleted_claims_and_quota_released(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns, ledger: Ledger, preemptor: str
) -> None:
    priority_classes(emu)
    ctl = await harness.start()
    await admin.create(JOBS, prio_job("mid", "mid", template="gpu-4"))
    await eventually(lambda: running(emu, "mid", 1), "mid runs")  # one node's 4 GPUs
    for name in ("low-a", "low-b"):
        await admin.create(PODS, group_pod(name, group="low", priority="low"))
    low_pods = await eventually(lambda: group_running(emu, "low", 2), "the low pod group runs")
    low_wl = workload(emu, "pod-group-low")
    assert low_wl is not None and is_true(low_wl, "Admitted")
    low_uid, low_devices = low_wl["metadata"]["uid"], plan_devices(low_wl)
    low_claims = _pod_claims(low_pods)
    assert len(low_devices) == 4 and _devices_of_claims(emu, low_claims) == low_devices  # every GPU in use

    if preemptor == "job":
        await admin.create(JOBS, prio_job("high", "high", template="gpu-4"))
        high_name = "job-high"
    else:
        await admin.create(PODS, group_pod("high-a", 1, group="high", template="gpu-4", priority="high"))
        high_name = "pod-group-high"
    # the pod group is the victim (the lowest priority); the controller deletes its pods
    evicted = await eventually(
        lambda: cond(workload(emu, "pod-group-low"), "Evicted"), "the group is evicted"
    )
    assert evicted["status"] == "True" and evicted["reason"] == "Preempted"
    assert f"default/{high_name}" in evicted["message"] and "InClusterQueue" in evicted["message"]
    await eventually(lambda: not group(emu, "low"), "the group's pods are deleted")
    high_wl = await eventually(
        lambda: is_true(workload(emu, high_name), "Admitted") and workload(emu, high_name), "high admitted"
    )
    assert plan_devices(high_wl) == low_devices  # exactly the freed GPUs
    if preemptor == "job":
        high_pods = await eventually(lambda: running(emu, "high", 1), "high runs")
    else:
        high_pods = await eventually(lambda: group_running(emu, "high", 1), "high runs")
    # the victim's claims are gone; the preemptor's claim holds those devices
    assert all(get(emu, "resourceclaims", c, "resource.k8s.io") is None for c in low_claims)
    assert _devices_of_claims(emu, _pod_claims(high_pods)) == low_devices
    assert is_true(workload(emu, "job-mid"), "Admitted") and not cond(workload(emu, "job-mid"), "Evicted")

    # the ledger: the eviction recorded once with its preemptor, the quota released before high's admission
    async with ledger.engine.connect() as c:
        (row,) = (await c.execute(select(m.Eviction))).all()
        adms = (await c.execute(select(m.Admission).order_by(m.Admission.id))).all()
    assert row.workload_uid == low_uid and row.reason == "Preempted"
    assert row.preemptor_uid == high_wl["metadata"]["uid"] and row.freed_device_count == 4
    low_adm = next(a for a in adms if a.workload_uid == low_uid)
    high_adm = next(a for a in adms if a.workload_uid == high_wl["metadata"]["uid"])
    assert low_adm.released_at_ms is not None and low_adm.release_reason == "Preempted"
    assert row.evicted_at_ms <= high_adm.admitted_at_ms
    state = await ledger.load_state()
    assert low_uid not in state.admissions and high_wl["metadata"]["uid"] in state.admissions
    assert low_uid not in ctl.admitted and low_uid not in ctl.evicting
    # its pods owned the Workload: it goes with them once the eviction is recorded (finalizer removed)
    await eventually(lambda: workload(emu, "pod-group-low") is None, "the group's Workload is deleted")
    assert not cluster.errors
    assert not emu.authorizer.denied  # type: ignore[union-attr]


async def test_pod_group_eviction_survives_a_restart_while_a_pod_terminates(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns, ledger: Ledger
) -> None:
    """One of the victim group's pods takes its time to terminate (a finalizer): the Workload stays, the
    quota stays charged; the controller restarts meanwhile and resumes; once the pod is gone the
    eviction is recorded once, the Workload goes and the preemptor lands on the freed devices."""
    priority_classes(emu)
    await harness.start()
    await admin.create(JOBS, prio_job("mid", "mid", template="gpu-4"))
    await eventually(lambda: running(emu, "mid", 1), "mid runs")
    slow = group_pod("low-a", group="low", priority="low")
    slow["metadata"]["finalizers"] = ["example.com/slow-shutdown"]
    await admin.create(PODS, slow)
    await admin.create(PODS, group_pod("low-b", group="low", priority="low"))
    await eventually(lambda: group_running(emu, "low", 2), "the low pod group runs")
    low_wl = workload(emu, "pod-group-low")
    assert low_wl is not None
    low_uid, low_devices = low_wl["metadata"]["uid"], plan_devices(low_wl)

    await admin.create(JOBS, prio_job("high", "high", template="gpu-4"))
    terminating = await eventually(
        lambda: (
            [p for p in group(emu, "low") if p["metadata"].get("deletionTimestamp")] == group(emu, "low")
            and len(group(emu, "low")) == 1
            and group(emu, "low")
        ),
        "low-b deleted, low-a terminating",
    )
    assert terminating[0]["metadata"]["name"] == "low-a"
    wl = workload(emu, "pod-group-low")
    assert wl is not None and "queueing.dra.io/eviction" in wl["metadata"]["finalizers"]
    assert is_true(wl, "Evicted") and is_true(wl, "QuotaReserved")  # its pod still holds devices
    assert low_uid in (await ledger.load_state()).admissions
    assert not is_true(workload(emu, "job-high"), "Admitted")

    await harness.stop()  # the controller goes away in the middle of the eviction
    ctl = await harness.start()
    assert low_uid in ctl.evicting  # resumed from the Workload's conditions and the ledger
    pods = emu.store.resource("pods")
    pod = emu.store.get(pods, "default", "low-a")
    pod["metadata"]["finalizers"] = []
    emu.store.update(pods, "default", "low-a", pod)  # the pod terminates now
    high = await eventually(lambda: running(emu, "high", 1), "high runs after the resumed eviction")
    assert high
    high_wl = workload(emu, "job-high")
    assert high_wl is not None and plan_devices(high_wl) == low_devices
    await eventually(lambda: workload(emu, "pod-group-low") is None, "the group's Workload is deleted")
    async with ledger.engine.connect() as c:
        evictions = (await c.execute(select(m.Eviction))).all()
    assert [(e.workload_uid, e.reason, e.freed_device_count) for e in evictions] == [
        (low_uid, "Preempted", 4)
    ]
    assert not cluster.errors
