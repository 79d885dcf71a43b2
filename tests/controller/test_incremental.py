"""The controller's pending Workloads and Jobs are kept by deltas (queueing/cache/workloads.py), not
walked and rebuilt in every sync: once the pending Workloads have their reasons, a sync builds no
WorkloadInfo; a change to one Workload builds that one's only, and the next cycle still decides as
from scratch (the harness runs the controller in verify mode: the pending state is compared with
one built from every Workload in every cycle, and a difference stops the loop)."""

from __future__ import annotations

import time
from typing import Any

from queueing.controller.controller import Controller
from queueing.kube.client import JOBS, WORKLOADS, KubeClient
from queueing.testing import Emulator
from tests.controller.conftest import Harness, eventually, job
from tests.controller.test_admission import cond, is_true, workload


async def quiet(ctl: Controller) -> int:
    """Wake the controller until a sync builds nothing; the number of WorkloadInfos built so far."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        builds, syncs = ctl.pending.builds, ctl.stats.syncs
        ctl.wake()
        await eventually(lambda s=syncs: ctl.stats.syncs > s, "a sync")  # type: ignore[misc]
        if ctl.pending.builds == builds:
            return builds
    raise AssertionError("the controller kept building WorkloadInfos")


async def test_a_sync_rebuilds_only_the_workloads_whose_delta_arrived(
    emu: Emulator, admin: KubeClient, harness: Harness
) -> None:
    ctl = await harness.start()
    for i in range(8):  # 8 GPUs of quota: two Jobs of 4 are admitted, six wait
        await admin.create(JOBS, job(f"j{i}", template="gpu-4"))
    names = [f"job-j{i}" for i in range(8)]
    await eventually(
        lambda: (
            sum(is_true(workload(emu, n), "Admitted") for n in names) == 2
            and sum(
                (c := cond(workload(emu, n), "QuotaReserved")) is not None and c["status"] == "False"
                for n in names
            )
            == 6
        ),
        "two admitted, six pending with a reason",
    )
    built = await quiet(ctl)
    assert len(ctl.pending.backlog) == 6  # (as the last cycle began: admissions leave at the next)
    syncs = ctl.stats.syncs
    for _ in range(3):  # syncs with nothing new: no WorkloadInfo is built, no Job looked at
        s = ctl.stats.syncs
        ctl.wake()
        await eventually(lambda s=s: ctl.stats.syncs > s, "a sync")  # type: ignore[misc]
    assert ctl.pending.builds == built and ctl.stats.syncs > syncs
    assert not ctl._dirty_jobs

    # one pending Workload changes (a label): only its WorkloadInfo is built again
    pending = sorted(ctl.pending.objects)
    key = pending[0]
    ns, name = key.split("/")
    out = await admin.patch(WORKLOADS, name, {"metadata": {"labels": {"touched": "yes"}}}, ns)
    rv = out["metadata"]["resourceVersion"]
    await eventually(
        lambda: (w := ctl.pending.objects.get(key)) is not None and w.metadata.resource_version == rv,
        "the controller's pending set has the new version",
    )
    assert await quiet(ctl) == built + 1
    assert sorted(ctl.pending.objects) == pending

    # the Workload deleted: its Job (looked at again because its Workload's delta arrived) gets a
    # new one, which takes its place in the pending set; the two admitted still hold the quota
    old_uid = ctl.pending.objects[key].metadata.uid
    await admin.delete(WORKLOADS, name, ns)
    await eventually(
        lambda: (w := ctl.pending.objects.get(key)) is not None and w.metadata.uid != old_uid,
        "the Job's new Workload is pending in the deleted one's place",
    )
    assert sum(is_true(workload(emu, n), "Admitted") for n in names) == 2


async def test_a_burst_of_jobs_gets_its_workloads_a_batch_per_sync(
    emu: Emulator, admin: KubeClient, harness: Harness
) -> None:
    """At most ``jobs_per_sync`` Jobs get writes in one sync (the rest wait for the next, so that the
    cycle, starts and finishes run in between); every Job gets its Workload all the same."""
    ctl = await harness.start()
    ctl.jobs_per_sync = 2
    per_sync: dict[int, int] = {}
    create = ctl._create_workload

    async def counted(wl: Any) -> None:
        per_sync[ctl.stats.syncs] = per_sync.get(ctl.stats.syncs, 0) + 1
        await create(wl)

    ctl._create_workload = counted  # type: ignore[method-assign]
    jobs = emu.store.resource("jobs", "batch")
    for i in range(7):  # one burst: the informer gets all seven before the controller syncs
        emu.store.create(jobs, "default", job(f"b{i}", template="gpu-1"))
    await eventually(
        lambda: all(workload(emu, f"job-b{i}") is not None for i in range(7)), "every Job has its Workload"
    )
    assert sum(per_sync.values()) == 7 and max(per_sync.values()) <= 2, per_sync
