"""The order of a sync's writes: a turn (a Job ends, its quota is released, the next Workload is
admitted and its Job started) comes before the bulk (Workloads for new Jobs, pending reasons), and
the bulk is bounded per sync without losing any of it."""

from __future__ import annotations

from typing import Any

from queueing.kube.client import JOBS, KubeClient
from queueing.testing import Emulator
from queueing.testing.cluster import StandIns
from tests.controller.conftest import Harness, eventually, job
from tests.controller.test_admission import cond, is_true, running, workload


def _first_rv(emu: Emulator, plural: str, name: str, change: Any) -> int:
    """The resourceVersion of the first stored write of ``plural``/``name`` for which
    ``change(old, new)`` holds (old is None for a create)."""
    for ev in emu.store.history:
        if ev.rkey.endswith(plural) and ev.new["metadata"]["name"] == name and change(ev.old, ev.new):
            return ev.rv
    raise AssertionError(f"no such write of {plural} {name}")


def _became_true(type_: str) -> Any:
    return lambda old, new: is_true(new, type_) and not is_true(old, type_)


def _unsuspended(old: dict[str, Any] | None, new: dict[str, Any]) -> bool:
    return old is not None and bool(old["spec"].get("suspend")) and not new["spec"].get("suspend")


async def test_a_turn_is_written_before_new_workloads_and_pending_reasons(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns
) -> None:
    c = await harness.start()
    await admin.create(JOBS, job("a", parallelism=8))  # the whole quota (8 GPUs)
    await eventually(lambda: running(emu, "a", 8), "a runs")
    await admin.create(JOBS, job("b", parallelism=8))
    await eventually(lambda: cond(workload(emu, "job-b"), "QuotaReserved"), "b waits with its reason")
    c.reasons_per_sync = 2  # the new Jobs' reasons take several syncs
    news = [f"n{i}" for i in range(5)]
    async with c._step:  # no sync runs: a's end and the new Jobs arrive for the same one
        cluster.finish_pods("default", "a")
        for n in news:
            await admin.create(JOBS, job(n))

        def seen() -> bool:
            a = c.jobs.get("a", "default")
            return (
                a is not None
                and any(x.type == "Complete" and x.status == "True" for x in a.status.conditions or [])
                and all(c.jobs.get(n, "default") is not None for n in news)
            )

        await eventually(seen, "the controller's informers saw a complete and the new Jobs")
    await eventually(lambda: running(emu, "b", 8), "b runs")
    # the new Jobs' Workloads wait (b holds the quota), each with its reason, written over several syncs
    await eventually(
        lambda: all(
            (q := cond(workload(emu, f"job-{n}"), "QuotaReserved")) and q["status"] == "False" for n in news
        ),
        "every new Workload has its pending reason",
    )
    finished = _first_rv(emu, "workloads", "job-a", _became_true("Finished"))
    admitted = _first_rv(emu, "workloads", "job-b", _became_true("QuotaReserved"))
    started = _first_rv(emu, "jobs", "b", _unsuspended)
    created = min(_first_rv(emu, "workloads", f"job-{n}", lambda old, new: old is None) for n in news)
    assert finished < admitted < started < created


async def test_an_admitted_job_starts_before_the_rest_of_its_cycle_is_written(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns
) -> None:
    """A cycle admitting several Workloads: each Job is started right after its own Workload's
    status, not after all of them (one write at a time here, so the order is the writes' order),
    and the ledger commits them in batches (of two here)."""
    c = await harness.start()
    c.write_concurrency = 1
    c.admissions_per_transaction = 2
    names = ["x0", "x1", "x2"]
    async with c._step:  # the three arrive for one sync: their Workloads are created together
        for n in names:
            await admin.create(JOBS, job(n))
        await eventually(lambda: all(c.jobs.get(n, "default") for n in names), "the Jobs seen")
    await eventually(lambda: all(running(emu, n, 1) for n in names), "all three run")
    admitted = {n: _first_rv(emu, "workloads", f"job-{n}", _became_true("QuotaReserved")) for n in names}
    started = {n: _first_rv(emu, "jobs", n, _unsuspended) for n in names}
    first = min(started.values())
    assert first < max(admitted.values()), (admitted, started)
    for n in names:
        assert admitted[n] < started[n]


def _pending_message(emu: Emulator, name: str) -> str:
    q = cond(workload(emu, f"job-{name}"), "QuotaReserved")
    return str(q["message"]) if q is not None and q["status"] == "False" else ""


async def test_the_rest_of_a_run_keeps_its_message_when_only_the_numbers_move(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns
) -> None:
    """Two Workloads of one shape wait: the first (the one the cycle tried) is told how many GPUs it
    lacks as that changes; the second has the first's reason and keeps its message while only the
    numbers move (a change of its reason is written)."""
    c = await harness.start()
    for n in ("a", "b"):
        await admin.create(JOBS, job(n, parallelism=4))  # 4 GPUs each: the quota of 8 in use
        await eventually(lambda n=n: running(emu, n, 4), f"{n} runs")
    for n in ("h1", "h2"):  # 8 GPUs each
        await admin.create(JOBS, job(n, parallelism=2, template="gpu-4"))
    more = "insufficient unused quota for gpu.example.com in flavor default, {} more needed"
    await eventually(
        lambda: (
            _pending_message(emu, "h1") == more.format(8) and _pending_message(emu, "h2") == more.format(8)
        ),
        "both wait for 8 GPUs",
    )
    cluster.finish_pods("default", "b")
    await eventually(lambda: _pending_message(emu, "h1") == more.format(4), "h1 lacks 4 now")
    done = c.stats.synced
    await eventually(lambda: c.wake() or c.stats.synced >= done + 2, "the sync that wrote it is over")
    assert _pending_message(emu, "h2") == more.format(8)


async def test_a_high_priority_job_gets_its_workload_before_a_backlog_of_lower_ones(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns
) -> None:
    """More new Jobs than one sync creates Workloads for: the batches go by priority (arrival order
    among equals), so a high-priority Job that came last is in the first batch, and every Job still
    gets its Workload, built once and as it would be built at its creation (verify mode)."""
    emu.load_objects(
        [
            {"apiVersion": "queueing.dra.io/v1beta1", "kind": "WorkloadPriorityClass",
             "metadata": {"name": name}, "value": value}
            for name, value in (("low", 10), ("high", 100))
        ]
    )  # fmt: skip
    c = await harness.start()
    c.verify = True
    c.jobs_per_sync = 2
    lows = [f"low{i}" for i in range(5)]
    async with c._step:  # they all arrive for one sync
        for n in [*lows, "top"]:
            body = job(n)
            body["metadata"]["labels"]["queueing.dra.io/priority-class"] = "high" if n == "top" else "low"
            await admin.create(JOBS, body)
        await eventually(lambda: all(c.jobs.get(n, "default") for n in [*lows, "top"]), "the Jobs seen")
    await eventually(lambda: all(workload(emu, f"job-{n}") for n in [*lows, "top"]), "every Workload")
    created = {
        n: _first_rv(emu, "workloads", f"job-{n}", lambda old, new: old is None) for n in [*lows, "top"]
    }
    # the first batch: the high-priority Job and the first low one; the rest in arrival order
    order = sorted(created, key=created.__getitem__)
    assert set(order[:2]) == {"top", "low0"}, order
    assert order[2:] == lows[1:], order
    top = workload(emu, "job-top")
    assert top is not None and top["spec"]["priority"] == 100
    assert not c._wanted  # nothing kept once every Workload is created
