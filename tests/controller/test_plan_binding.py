"""``planBindingMode: Auto`` (the default) end to end: a single-pod Job whose planned devices are what
kube-scheduler's allocator picks is bound node only (the Job's template pins the node; kube-scheduler —
the stand-in, running the project's allocator as the DRA plugin would — allocates the planned devices);
a Job planned on other devices, and a gang, are bound Full (gate, claims written, pods patched). An
allocation that differs from the plan (a device released in between) is recorded and reported."""

from __future__ import annotations

from collections import Counter
from typing import Any

from queueing.controller.controller import Controller
from queueing.kube.client import JOBS, PODS, KubeClient
from queueing.ledger.repository import Ledger
from queueing.testing import Emulator
from queueing.testing.cluster import StandIns
from tests.controller.conftest import CONTROLLER_USER, GPU_CLASS, Harness, ManualTime, eventually, job
from tests.controller.test_admission import (
    claim_devices,
    get,
    is_true,
    job_pods,
    planned,
    running,
    workload,
)
from tests.controller.test_pod_groups import group_pod, group_running
from tests.controller.test_scenarios import events_for

CLAIMS = ("resourceclaims", "resource.k8s.io")


def _writes(emu: Emulator, since: Any = None) -> Counter[tuple[str, str]]:
    counts = emu.writes_by(CONTROLLER_USER)
    return Counter(counts.since(since) if since is not None else counts)


def _pod_devices(emu: Emulator, job_name: str) -> dict[str, set[tuple[str, str, str]]]:
    """Node -> devices of the claims of the Job's running pods (what kube-scheduler bound)."""
    out: dict[str, set[tuple[str, str, str]]] = {}
    for pod in running(emu, job_name, len(job_pods(emu, job_name))):
        for s in pod["status"].get("resourceClaimStatuses") or []:
            claim = get(emu, "resourceclaims", s["resourceClaimName"], "resource.k8s.io")
            assert claim is not None
            out.setdefault(pod["spec"]["nodeName"], set()).update(claim_devices(claim))
    return out


def _plan_devices(wl: dict[str, Any]) -> dict[str, set[tuple[str, str, str]]]:
    out: dict[str, set[tuple[str, str, str]]] = {}
    for p in planned(wl):
        for c in p.get("claims") or []:
            out.setdefault(p["nodeName"], set()).update(
                (d["driver"], d["pool"], d["device"]) for d in c["devices"]
            )
    return out


async def _started(emu: Emulator, job_name: str) -> str:
    """The message of the Job's Started Event (emitted right after the Job's write)."""
    ev = await eventually(lambda: events_for(emu, job_name, "Started"), f"the Started Event of {job_name}")
    assert len(ev) == 1
    return str(ev[0]["message"])


async def _bound_node_only_unscheduled(
    emu: Emulator, admin: KubeClient, cluster: StandIns, name: str, device: str
) -> dict[str, Any]:
    """A single-pod Job planned on ``device`` of node-a, bound node only; kube-scheduler does not get to
    its pod (whose claim exists, unallocated) until the test lets it. Returns its Workload."""
    cluster.unscheduled_jobs.add(name)
    await admin.create(JOBS, job(name))
    await eventually(
        lambda: any((p.get("status") or {}).get("resourceClaimStatuses") for p in job_pods(emu, name)),
        f"the pod of {name} and its claim exist",
    )
    wl = workload(emu, f"job-{name}")
    assert wl is not None
    assert _plan_devices(wl) == {"node-a": {(GPU_CLASS, "node-a", device)}}
    assert "plan binding: node only" in await _started(emu, name)
    return wl


async def test_auto_single_pod_job_is_bound_node_only_and_lands_on_the_planned_devices(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns
) -> None:
    c = await harness.start()
    assert c.config.plan_binding_mode == "Auto"
    before = emu.writes_by(CONTROLLER_USER).snapshot()
    await admin.create(JOBS, job("solo", template="gpu-2"))
    await eventually(lambda: running(emu, "solo", 1), "the pod runs")
    wl = workload(emu, "job-solo")
    assert wl is not None
    assert (
        _pod_devices(emu, "solo")
        == _plan_devices(wl)
        == {"node-a": {(GPU_CLASS, "node-a", "gpu-0"), (GPU_CLASS, "node-a", "gpu-1")}}
    )
    tmpl = get(emu, "jobs", "solo", "batch")["spec"]["template"]["spec"]  # type: ignore[index]
    assert tmpl["nodeSelector"] == {"kubernetes.io/hostname": "node-a"}
    assert not tmpl.get("schedulingGates")
    assert (
        "plan binding: node only (kube-scheduler picks the planned devices on node node-a)"
        in await _started(emu, "solo")
    )
    w = _writes(emu, before)
    assert w[("patch", "resourceclaims/status")] == 0 and w[("patch", "pods")] == 0
    await eventually(lambda: c._verified.get(wl["metadata"]["uid"]) is not None, "the allocation is checked")
    assert not events_for(emu, "job-solo", "AllocationDiffers")
    assert not cluster.errors


async def test_auto_jobs_planned_together_on_one_node_the_first_node_only_the_next_full(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns
) -> None:
    """Admitted in one cycle on node-a: kube-scheduler, seeing neither claim allocated yet, would give
    both gpu-0; so the Job planned on gpu-0 is bound node only and the one planned on gpu-1 Full."""
    for n in ("first", "second"):
        await admin.create(JOBS, job(n))
    await harness.start()
    await eventually(lambda: running(emu, "first", 1) and running(emu, "second", 1), "both run")
    by_device: dict[str, str] = {}
    for n in ("first", "second"):
        wl = workload(emu, f"job-{n}")
        assert wl is not None
        plan = _plan_devices(wl)
        assert _pod_devices(emu, n) == plan
        assert list(plan) == ["node-a"]
        (dev,) = plan["node-a"]
        by_device[dev[2]] = n
    assert sorted(by_device) == ["gpu-0", "gpu-1"]
    assert "plan binding: node only" in await _started(emu, by_device["gpu-0"])
    full = await _started(emu, by_device["gpu-1"])
    assert (
        "plan binding: Full (kube-scheduler would pick gpu-0 on node node-a for claim gpu, the plan has gpu-1)"
        in full
    )
    w = _writes(emu)
    assert w[("patch", "resourceclaims/status")] == 1 and w[("patch", "pods")] == 1
    assert not cluster.errors


async def test_auto_gang_is_bound_full(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns
) -> None:
    await harness.start()
    before = emu.writes_by(CONTROLLER_USER).snapshot()
    await admin.create(JOBS, job("gang", parallelism=3, template="gpu-2"))
    await eventually(lambda: running(emu, "gang", 3), "all three pods run")
    wl = workload(emu, "job-gang")
    assert wl is not None
    assert _pod_devices(emu, "gang") == _plan_devices(wl)
    assert "plan binding: Full (3 pods planned" in await _started(emu, "gang")
    tmpl = get(emu, "jobs", "gang", "batch")["spec"]["template"]["spec"]  # type: ignore[index]
    assert tmpl["schedulingGates"] == [{"name": "queueing.dra.io/placement"}]
    w = _writes(emu, before)
    # the controller wrote every claim's allocation and released every pod itself
    assert w[("patch", "resourceclaims/status")] == 3 and w[("patch", "pods")] == 3
    assert not cluster.errors


async def test_an_allocation_other_than_the_plan_is_recorded_with_a_warning(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns, ledger: Ledger
) -> None:
    """gpu-0 of node-a is held by a claim outside queueing: the Job is planned on gpu-1, which is what
    kube-scheduler would pick, so it is bound node only. gpu-0 is released before kube-scheduler gets to
    the pod: it allocates gpu-0. The controller reports it and its plan (and record) take gpu-0."""
    store = emu.store
    rt = store.resource(*CLAIMS)
    store.create(
        rt,
        "default",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "outside", "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": GPU_CLASS}}]}},
        },
    )
    outside = store.get(rt, "default", "outside")
    outside["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpu", "driver": GPU_CLASS, "pool": "node-a", "device": "gpu-0"}]
            }
        }
    }
    store.update(rt, "default", "outside", outside, subresource="status")
    c = await harness.start()
    wl = await _bound_node_only_unscheduled(emu, admin, cluster, "late", "gpu-1")
    cluster.unscheduled_jobs.discard("late")
    store.delete(rt, "default", "outside")  # gpu-0 is free again; kube-scheduler runs now
    await eventually(lambda: running(emu, "late", 1), "the pod runs")
    assert _pod_devices(emu, "late") == {"node-a": {(GPU_CLASS, "node-a", "gpu-0")}}
    ev = await eventually(lambda: events_for(emu, "job-late", "AllocationDiffers"), "a Warning Event")
    assert ev[0]["type"] == "Warning"
    assert "got gpu-0, planned gpu-1" in ev[0]["message"]
    await eventually(
        lambda: (
            _plan_devices(workload(emu, "job-late") or {}) == {"node-a": {(GPU_CLASS, "node-a", "gpu-0")}}
        ),
        "the Workload's plan records the allocated device",
    )
    uid = wl["metadata"]["uid"]
    assert c.admissions[uid].planned_devices == 1
    # the ledger's plan rows too (what the device-hour reports and a restart read)
    (pod,) = (await ledger.load_state()).admissions[uid].pods
    assert (pod.node, [d.device for d in pod.devices]) == ("node-a", [f"{GPU_CLASS}/node-a/gpu-0"])
    # the record holds gpu-0 now: the next Job is planned on gpu-1 and gets it
    await admin.create(JOBS, job("next"))
    await eventually(lambda: running(emu, "next", 1), "the next Job runs")
    nxt = workload(emu, "job-next")
    assert nxt is not None
    assert _plan_devices(nxt) == _pod_devices(emu, "next") == {"node-a": {(GPU_CLASS, "node-a", "gpu-1")}}
    assert len(events_for(emu, "job-late", "AllocationDiffers")) == 1
    assert not events_for(emu, "job-next", "AllocationDiffers")
    assert not cluster.errors


async def test_auto_single_pod_group_is_bound_node_only(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns
) -> None:
    """A pod group of one pod: the controller pins the node and removes the admission gate in one pod
    write, without writing the claim; kube-scheduler allocates the planned devices."""
    await harness.start()
    await admin.create(JOBS, job("first"))  # gpu-0 of node-a allocated before the group comes
    await eventually(lambda: running(emu, "first", 1), "the first Job runs")
    before = emu.writes_by(CONTROLLER_USER).snapshot()
    await admin.create(PODS, group_pod("solo-0", total=1, group="solo", template="gpu-1"))
    (pod,) = await eventually(lambda: group_running(emu, "solo", 1), "the pod runs")
    wl = workload(emu, "pod-group-solo")
    assert wl is not None
    claim = get(
        emu,
        "resourceclaims",
        pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"],
        "resource.k8s.io",
    )
    assert claim is not None
    assert (
        {pod["spec"]["nodeName"]: claim_devices(claim)}
        == _plan_devices(wl)
        == {"node-a": {(GPU_CLASS, "node-a", "gpu-1")}}
    )
    w = _writes(emu, before)
    assert w[("patch", "resourceclaims/status")] == 0 and w[("patch", "pods")] == 1
    assert not cluster.errors


def _allocated(emu: Emulator) -> list[tuple[str, str, str]]:
    """Every device of every allocated claim (a device twice: in two claims)."""
    return [
        d
        for claim in emu.store.list(emu.store.resource(*CLAIMS), None, None)[0]
        if (claim.get("status") or {}).get("allocation")
        for d in claim_devices(claim)
    ]


def _has_admission(emu: Emulator, name: str) -> bool:
    return bool(((workload(emu, name) or {}).get("status") or {}).get("admission"))


async def _b_finishes_while_a_waits(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns
) -> Controller:
    """Job a is bound node only on node-a, planned gpu-3 (what kube-scheduler picks while gpu-0..2 are
    allocated); before kube-scheduler gets to a's pod, Job b finishes and frees gpu-0. Then Job c comes,
    needing one device when only gpu-0 is free; returned once the controller looked at c."""
    c = await harness.start()
    for name, template, node in (
        ("b", "gpu-1", "node-a"),
        ("fill", "gpu-4", "node-b"),
        ("pad", "gpu-2", "node-a"),
    ):
        await admin.create(JOBS, job(name, template=template))
        await eventually(lambda n=name: running(emu, n, 1), f"Job {name} runs")  # type: ignore[misc]
        assert list(_pod_devices(emu, name)) == [node]
    assert _pod_devices(emu, "b") == {"node-a": {(GPU_CLASS, "node-a", "gpu-0")}}
    await _bound_node_only_unscheduled(emu, admin, cluster, "a", "gpu-3")
    assert cluster.finish_pods("default", "b") == 1
    await eventually(lambda: is_true(workload(emu, "job-b"), "Finished"), "b finished")
    await eventually(lambda: (GPU_CLASS, "node-a", "gpu-0") not in _allocated(emu), "b's claim is gone")
    await admin.create(JOBS, job("c"))
    await eventually(
        lambda: "default/job-c" in c.pending_reasons or _has_admission(emu, "job-c"),
        "c is left pending or planned",
    )
    return c


async def test_devices_released_while_a_node_only_binding_waits_are_held_until_it_is_confirmed(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns
) -> None:
    """Hold until confirmed: kube-scheduler will give a the freed gpu-0, so c must not be planned on it
    until a's claim is allocated; then a's record takes gpu-0 and c gets gpu-3."""
    c = await _b_finishes_while_a_waits(emu, admin, harness, cluster)
    assert not _has_admission(emu, "job-c"), "c was planned on the device a will get"
    assert not job_pods(emu, "c")
    cluster.unscheduled_jobs.discard("a")
    cluster.step()  # kube-scheduler gets to a's pod: it takes the first free device, gpu-0
    await eventually(lambda: running(emu, "a", 1) and running(emu, "c", 1), "a and c run")
    assert _pod_devices(emu, "a") == {"node-a": {(GPU_CLASS, "node-a", "gpu-0")}}
    assert await eventually(lambda: events_for(emu, "job-a", "AllocationDiffers"), "a's allocation differs")
    wl_c = workload(emu, "job-c")
    assert wl_c is not None
    assert _plan_devices(wl_c) == _pod_devices(emu, "c") == {"node-a": {(GPU_CLASS, "node-a", "gpu-3")}}
    counts = Counter(_allocated(emu))
    assert max(counts.values()) == 1, f"a device in two claims: {counts}"
    assert {(GPU_CLASS, "node-a", f"gpu-{i}") for i in range(4)} <= set(counts)
    assert not c._held
    assert not cluster.errors


async def test_held_devices_are_plannable_again_after_the_confirm_timeout(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns
) -> None:
    """kube-scheduler never gets to a's pod: after ``nodeOnlyConfirmTimeout`` gpu-0 is plannable again
    and c gets it; a, scheduled at last, gets its planned gpu-3."""
    clock = ManualTime()
    harness.controller_kwargs["clock"] = clock
    c = await _b_finishes_while_a_waits(emu, admin, harness, cluster)
    assert not _has_admission(emu, "job-c")
    clock.advance(c.config.node_only_confirm_timeout)
    c.wake()
    await eventually(lambda: running(emu, "c", 1), "c runs")
    wl_c = workload(emu, "job-c")
    assert wl_c is not None
    assert _plan_devices(wl_c) == _pod_devices(emu, "c") == {"node-a": {(GPU_CLASS, "node-a", "gpu-0")}}
    assert not c._held
    cluster.unscheduled_jobs.discard("a")
    cluster.step()
    await eventually(lambda: running(emu, "a", 1), "a runs")
    assert _pod_devices(emu, "a") == {"node-a": {(GPU_CLASS, "node-a", "gpu-3")}}
    assert max(Counter(_allocated(emu)).values()) == 1
    assert not cluster.errors
