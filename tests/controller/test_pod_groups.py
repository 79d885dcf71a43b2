"""Pods labelled queueing.dra.io/pod-group with the total-count annotation, created with the admission
gate, form one Workload admitted when all of them exist; each pod gets its planned node and devices."""

from __future__ import annotations

from typing import Any

from queueing.kube.client import PODS, KubeClient
from queueing.ledger.repository import Ledger
from queueing.testing import Emulator
from tests.controller.conftest import Harness, eventually
from tests.controller.standins import StandIns
from tests.controller.test_admission import claim_devices, get, is_true, items, workload


def group_pod(name: str, total: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"queueing.dra.io/pod-group": "g1", "queueing.dra.io/queue-name": "lq"},
            "annotations": {"queueing.dra.io/pod-group-total-count": str(total)},
        },
        "spec": {
            "schedulingGates": [{"name": "queueing.dra.io/admission"}],
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu-2"}],
        },
    }


def group(emu: Emulator) -> list[dict[str, Any]]:
    return items(emu, "pods", labels="queueing.dra.io/pod-group=g1")


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
