"""Per-workload state is dropped when the Workload and its Job are gone (issue 8, soak memory): whether
the Workload was deleted while admitted, after it finished (a TTL controller), or while still pending,
the controller afterwards holds no entry for its UID and the ledger has no active admission for it."""

from __future__ import annotations

from typing import Any

from queueing.controller.controller import Controller
from queueing.kube.client import JOBS, KubeClient
from queueing.ledger.repository import Ledger
from queueing.testing import Emulator
from queueing.testing.cluster import JOB_NAME_LABEL, StandIns
from tests.controller.conftest import Harness, eventually, job
from tests.controller.test_admission import is_true, running, workload


def held(ctrl: Controller, uid: str, key: str) -> list[str]:
    """The controller's per-workload structures that still mention this Workload (by UID or key)."""
    out = [
        name
        for name, coll in (
            ("admitted", ctrl.admitted),
            ("admissions", ctrl.admissions),
            ("status_todo", ctrl.status_todo),
            ("evicting", ctrl.evicting),
            ("pods_ready_seen", ctrl.pods_ready_seen),
            ("_recorded", ctrl._recorded),
        )
        if uid in coll
    ]
    if key in ctrl.pending_reasons:
        out.append("pending_reasons")
    if any(k[0] == uid for k in ctrl.events._seen):
        out.append("events")
    return out


def delete_job(emu: Emulator, name: str) -> None:
    """What the TTL controller and the garbage collector do: pods, Workload and Job go."""
    store = emu.store
    pods = store.resource("pods", "")
    for p in store.list(pods, "default", f"{JOB_NAME_LABEL}={name}")[0]:
        store.delete(pods, "default", p["metadata"]["name"])
    store.delete(store.resource("workloads", "queueing.dra.io"), "default", f"job-{name}")
    store.delete(store.resource("jobs", "batch"), "default", name)


async def until_forgotten(ctrl: Controller, wl: dict[str, Any]) -> None:
    uid, key = wl["metadata"]["uid"], f"default/{wl['metadata']['name']}"
    await eventually(lambda: not held(ctrl, uid, key), f"the controller forgets {key}")


async def test_deleted_while_admitted_and_after_finishing(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns, ledger: Ledger
) -> None:
    ctrl = await harness.start()
    await admin.create(JOBS, job("a"))
    await admin.create(JOBS, job("b"))
    await eventually(lambda: running(emu, "a", 1) and running(emu, "b", 1), "both Jobs run")
    wa, wb = workload(emu, "job-a"), workload(emu, "job-b")
    assert wa is not None and wb is not None
    # while they exist, the controller keeps them (admitted, recorded, events deduplicated)
    assert {"admitted", "admissions", "_recorded", "events"} <= set(
        held(ctrl, wa["metadata"]["uid"], "default/job-a")
    )

    delete_job(emu, "a")  # deleted while admitted: the ledger admission is released
    cluster.finish_pods("default", "b")
    await eventually(lambda: is_true(workload(emu, "job-b"), "Finished"), "b finishes")
    delete_job(emu, "b")  # deleted after finishing
    await until_forgotten(ctrl, wa)
    await until_forgotten(ctrl, wb)
    state = await ledger.load_state()
    assert not state.admissions
    assert all(q.is_zero() for q in state.usage.values())


async def test_deleted_while_pending(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns
) -> None:
    ctrl = await harness.start()
    await admin.create(JOBS, job("lost", queue="no-such-queue"))
    await eventually(
        lambda: workload(emu, "job-lost") is not None and "default/job-lost" in ctrl.pending_reasons,
        "the Workload is pending with a reason",
    )
    wl = workload(emu, "job-lost")
    assert wl is not None
    assert "events" in held(ctrl, wl["metadata"]["uid"], "default/job-lost")
    delete_job(emu, "lost")
    await until_forgotten(ctrl, wl)
