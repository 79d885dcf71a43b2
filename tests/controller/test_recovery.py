"""Recovery repairs, it does not revoke (issue 19, item 1), end to end through the emulator.

Four admitted Jobs run; then each one's Workload diverges from the ledger's open admission in its own
way: ``status.admission`` removed, the QuotaReserved/Admitted conditions removed, a stale plan (other
devices than the ledger holds), and the Workload deleted (the controller recreates it for its Job).
Whether the controller was down meanwhile (it repairs on start) or running (it repairs at once), every
status is rewritten from the ledger, the recreated Workload takes over its Job's admission, and
nothing is revoked: no Job is suspended, no pod replaced, no admission released."""

from __future__ import annotations

import asyncio
import copy
import time
from typing import Any

from sqlalchemy import select

from queueing.controller.controller import Controller
from queueing.kube.client import JOBS, WORKLOADS, KubeClient
from queueing.ledger import models as m
from queueing.ledger.repository import Ledger
from queueing.testing import Emulator
from queueing.testing.cluster import StandIns
from tests.controller.conftest import Harness, eventually, job
from tests.controller.test_admission import get, is_true, running, workload
from tests.controller.test_scenarios import events_for

NAMES = ("noadm", "noconds", "stale", "recreated")


async def start_four(emu: Emulator, admin: KubeClient) -> dict[str, dict[str, Any]]:
    for n in NAMES:
        await admin.create(JOBS, job(n))
    for n in NAMES:
        await eventually(lambda n=n: running(emu, n, 1), f"{n} runs", timeout=60)
        # and the controller's last status write of a started workload is done (PodsReady True), so the
        # sabotage below is not undone by that write carrying the conditions it read before
        await eventually(lambda n=n: is_true(workload(emu, f"job-{n}") or {}, "PodsReady"), f"{n} ready")
    return {n: workload(emu, f"job-{n}") or {} for n in NAMES}


async def diverge(admin: KubeClient, before: dict[str, dict[str, Any]]) -> None:
    """Each Workload's status disagrees with the ledger in its own way (as a user or a lost write
    could leave it)."""
    status = "status"
    await admin.patch(WORKLOADS, "job-noadm", {"status": {"admission": None}}, "default", status)
    conds = [
        c for c in before["noconds"]["status"]["conditions"] if c["type"] not in ("QuotaReserved", "Admitted")
    ]
    await admin.patch(WORKLOADS, "job-noconds", {"status": {"conditions": conds}}, "default", status)
    stale = copy.deepcopy(before["stale"]["status"]["admission"])
    device = stale["podSetAssignments"][0]["placements"][0]["claims"][0]["devices"][0]
    device["device"] = "gpu-9" if device["device"] != "gpu-9" else "gpu-8"
    await admin.patch(WORKLOADS, "job-stale", {"status": {"admission": stale}}, "default", status)
    await admin.delete(WORKLOADS, "job-recreated", "default")


async def ledger_admissions(ledger: Ledger) -> list[Any]:
    async with ledger.engine.connect() as c:
        return list(
            (
                await c.execute(
                    select(m.Admission.workload_uid, m.Admission.released_at_ms, m.Workload.name).join(
                        m.Workload, m.Workload.uid == m.Admission.workload_uid
                    )
                )
            ).all()
        )


def repaired(emu: Emulator, ledger_status: dict[str, dict[str, Any]], name: str) -> bool:
    wl = workload(emu, f"job-{name}")
    return (
        wl is not None
        and (wl.get("status") or {}).get("admission") == ledger_status.get(wl["metadata"]["uid"])
        and is_true(wl, "QuotaReserved")
        and is_true(wl, "Admitted")
    )


async def check_repaired(
    emu: Emulator,
    ctl: Controller,
    ledger: Ledger,
    cluster: StandIns,
    before: dict[str, dict[str, Any]],
    pods: dict[str, set[str]],
    pods_created: int,
) -> None:
    async def all_repaired() -> dict[str, Any] | None:
        admissions = (await ledger.load_state()).admissions
        statuses = {uid: dict(a.status or {}) for uid, a in admissions.items()}
        return admissions if all(repaired(emu, statuses, n) for n in NAMES) else None

    deadline = time.monotonic() + 60
    while (admissions := await all_repaired()) is None:
        assert time.monotonic() < deadline, "timed out waiting for every status to be repaired"
        await asyncio.sleep(0.05)
    # the recreated Workload is the same admission: the ledger moved it to the new UID
    new = workload(emu, "job-recreated") or {}
    assert new["metadata"]["uid"] != before["recreated"]["metadata"]["uid"]
    rows = await ledger_admissions(ledger)
    assert len(rows) == 4 and all(r.released_at_ms is None for r in rows), rows
    assert {r.workload_uid for r in rows} == {
        *(before[n]["metadata"]["uid"] for n in NAMES if n != "recreated"),
        new["metadata"]["uid"],
    }
    for n in NAMES:
        uid = (workload(emu, f"job-{n}") or {})["metadata"]["uid"]
        assert admissions[uid].status == before[n]["status"]["admission"], n
    # a few syncs later: nothing revoked, no Job suspended, the same pods run
    for _ in range(3):
        ctl.resync()
        ctl.synced.clear()
        await eventually(lambda: ctl.synced.is_set(), "a full resync")
    for n in NAMES:
        assert not (get(emu, "jobs", n, "batch") or {})["spec"]["suspend"], n
        assert {p["metadata"]["uid"] for p in running(emu, n, 1)} == pods[n], n
    assert cluster.pods_created == pods_created
    assert len(await ledger_admissions(ledger)) == 4
    assert sum(e.get("count", 1) for n in ("noadm", "noconds", "stale") for e in
               events_for(emu, f"job-{n}", "StatusRepaired")) >= 3  # fmt: skip
    assert events_for(emu, "job-recreated", "AdmissionTakenOver")
    assert not cluster.errors


async def test_restart_repairs_every_diverged_status_from_the_ledger(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns, ledger: Ledger
) -> None:
    await harness.start()
    before = await start_four(emu, admin)
    pods = {n: {p["metadata"]["uid"] for p in running(emu, n, 1)} for n in NAMES}
    created = cluster.pods_created
    await harness.stop()
    await diverge(admin, before)
    ctl = await harness.start()
    await check_repaired(emu, ctl, ledger, cluster, before, pods, created)


async def test_the_running_controller_repairs_every_diverged_status(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns, ledger: Ledger
) -> None:
    ctl = await harness.start()
    before = await start_four(emu, admin)
    pods = {n: {p["metadata"]["uid"] for p in running(emu, n, 1)} for n in NAMES}
    created = cluster.pods_created
    await diverge(admin, before)
    await check_repaired(emu, ctl, ledger, cluster, before, pods, created)
    assert ctl.stats.repaired == 3  # once each: a repaired status is not repaired again
