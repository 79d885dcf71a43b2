"""The repository's transactions on both databases: admit, release, evict, quota, versions, recovery."""

from __future__ import annotations

import asyncio
import json

import pytest
from sqlalchemy import func, insert, select, text
from sqlalchemy.exc import IntegrityError

from queueing.ledger import models as m
from queueing.ledger.repository import (
    AlreadyAdmitted,
    Ledger,
    LedgerError,
    NotAdmitted,
    QuotaExceeded,
    UnknownObject,
)
from queueing.ledger.state import (
    AdmissionRequest,
    Charge,
    ClusterQueueSpec,
    LocalQueueSpec,
    QuotaSpec,
    WorkloadSpec,
)

from . import scenario as sc

Q = sc.Q
GPU = sc.GPU


async def setup_queues(led: Ledger) -> None:
    await sc.queues(led)


async def add(led: Ledger, uid: str, queue: str = "ml/train", at: float = 0) -> None:
    ns, lq = queue.split("/")
    await led.add_workload(WorkloadSpec(uid, ns, uid, lq, priority=5, requests={"gpu": 1}), at=sc.t(0, at))


async def test_admit_reserves_quota_records_plan_and_journal(ledger: Ledger) -> None:
    await setup_queues(ledger)
    await add(ledger, "w1")
    aid = await ledger.admit(
        AdmissionRequest(
            "w1", "team-a", sc.gpu(3, cpu=8), sc.devices(3), flavors={GPU: "h200", "cpu": "default"}
        ),
        at=sc.t(0, 1),
    )
    state = await ledger.load_state()
    assert state.usage == {("team-a", "default", "cpu"): Q("8"), ("team-a", "h200", GPU): Q("3")}
    adm = state.admissions["w1"]
    assert adm.admission_id == aid and adm.cluster_queue == "team-a" and adm.local_queue == "train"
    assert adm.charges == (Charge("default", "cpu", Q("8")), Charge("h200", GPU, Q("3")))
    assert adm.nodes == {"node-1"}
    assert adm.devices == tuple(f"gpu.nvidia.com/node-1/gpu-{i}" for i in range(3))
    assert adm.pods[0].devices[0].memory == Q("16Gi")
    assert "w1" not in state.pending
    async with ledger.engine.connect() as c:
        rows = (await c.execute(select(m.JournalEntry).order_by(m.JournalEntry.id))).all()
        flavors = (await c.execute(select(m.Admission.flavors_json))).scalar_one()
    assert json.loads(flavors) == {GPU: "h200", "cpu": "default"}
    assert [(r.kind, r.metric, r.flavor, r.resource, r.amount) for r in rows] == [
        ("reserve", "quota", "default", "cpu", Q("8")),
        ("reserve", "quota", "h200", GPU, Q("3")),
        ("reserve", "devices", "", "gpu.nvidia.com", Q("3")),
        ("reserve", "device_memory", "", "gpu.nvidia.com", Q("48Gi")),
    ]
    assert all(r.at_ms == int(sc.t(0, 1).timestamp() * 1000) for r in rows)


async def test_rebind_records_the_devices_the_pods_got(ledger: Ledger) -> None:
    """kube-scheduler allocated other devices than planned: the plan rows take them; the charges and
    the journal stay; a workload without an active admission is refused."""
    await setup_queues(ledger)
    await add(ledger, "w1")
    await ledger.admit(AdmissionRequest("w1", "team-a", sc.gpu(2), sc.devices(2)), at=sc.t(0, 1))
    async with ledger.engine.connect() as c:
        journal = (await c.execute(select(func.count()).select_from(m.JournalEntry))).scalar_one()
    assert await ledger.rebind("w1", sc.devices(2, node="node-2"))
    adm = (await ledger.load_state()).admissions["w1"]
    assert adm.nodes == {"node-2"}
    assert adm.devices == ("gpu.nvidia.com/node-2/gpu-0", "gpu.nvidia.com/node-2/gpu-1")
    assert adm.charges == sc.gpu(2)
    async with ledger.engine.connect() as c:
        assert (await c.execute(select(func.count()).select_from(m.JournalEntry))).scalar_one() == journal
    await ledger.finish("w1", at=sc.t(0, 2))
    assert not await ledger.rebind("w1", sc.devices(2))
    assert not await ledger.rebind("nobody", sc.devices(1))


async def test_exact_quantities_round_trip(ledger: Ledger) -> None:
    await ledger.upsert_cluster_queue(
        ClusterQueueSpec("exact", quotas=(QuotaSpec("f", "cpu", Q("123456789.123456789")),)), at=sc.t(0)
    )
    await ledger.upsert_local_queue(LocalQueueSpec("ns", "lq", "exact"), at=sc.t(0))
    await ledger.add_workload(WorkloadSpec("u", "ns", "u", "lq"), at=sc.t(0))
    await ledger.admit(
        AdmissionRequest("u", "exact", (Charge("f", "cpu", Q("123456789.123456788")),)), at=sc.t(0)
    )
    state = await ledger.load_state()
    assert state.cluster_queues["exact"].quotas[0].nominal.value == Q("123456789.123456789").value
    assert state.usage[("exact", "f", "cpu")] == Q("123456789123456788n")
    await ledger.finish("u", at=sc.t(1))
    assert (await ledger.load_state()).usage == {}


async def test_second_admission_of_a_uid_is_refused(ledger: Ledger) -> None:
    await setup_queues(ledger)
    await add(ledger, "w1")
    await ledger.admit(AdmissionRequest("w1", "team-a", sc.gpu(1)), at=sc.t(0, 1))
    with pytest.raises(AlreadyAdmitted):
        await ledger.admit(AdmissionRequest("w1", "team-b", sc.gpu(1)), at=sc.t(0, 2))
    # and the database itself refuses a second active admission, whatever the code does
    async with ledger.engine.connect() as c:
        await c.begin()
        with pytest.raises(IntegrityError):
            await c.execute(
                insert(m.Admission).values(
                    workload_uid="w1",
                    attempt=2,
                    cluster_queue="team-a",
                    quota_version=1,
                    namespace="ml",
                    local_queue="train",
                    flavors_json="{}",
                    queued_at_ms=0,
                    admitted_at_ms=1,
                )
            )
        await c.rollback()
    # after a release the workload may be admitted again (a new attempt)
    await ledger.evict("w1", at=sc.t(0, 3), reason="Preempted")
    aid2 = await ledger.admit(AdmissionRequest("w1", "team-a", sc.gpu(1)), at=sc.t(0, 4))
    async with ledger.engine.connect() as c:
        attempts = (await c.execute(select(m.Admission.attempt).order_by(m.Admission.id))).scalars().all()
        assert attempts == [1, 2]
        queued = (
            await c.execute(select(m.Admission.queued_at_ms).where(m.Admission.id == aid2))
        ).scalar_one()
    assert queued == int(sc.t(0, 3).timestamp() * 1000)  # requeued at the eviction


async def test_quota_limits(ledger: Ledger) -> None:
    await setup_queues(ledger)
    for i in range(6):
        await add(ledger, f"w{i}", "ops/q")
    await ledger.admit(AdmissionRequest("w0", "solo", sc.gpu(2)), at=sc.t(0, 1))
    with pytest.raises(QuotaExceeded, match="solo"):  # solo has no cohort: nominal is the cap
        await ledger.admit(AdmissionRequest("w1", "solo", sc.gpu(1)), at=sc.t(0, 1))
    with pytest.raises(QuotaExceeded, match="no quota"):
        await ledger.admit(AdmissionRequest("w1", "solo", (Charge("other", GPU, Q("1")),)), at=sc.t(0, 1))
    # nothing was written by the refused admissions
    state = await ledger.load_state()
    assert state.usage == {("solo", "h200", GPU): Q("2")}
    assert set(state.admissions) == {"w0"} and "w1" in state.pending
    with pytest.raises(UnknownObject):
        await ledger.admit(AdmissionRequest("nope", "solo", sc.gpu(1)), at=sc.t(0, 1))
    with pytest.raises(UnknownObject):
        await ledger.admit(AdmissionRequest("w1", "nope", sc.gpu(1)), at=sc.t(0, 1))
    with pytest.raises(LedgerError, match="negative"):
        await ledger.admit(AdmissionRequest("w1", "solo", (Charge("h200", GPU, Q("-1")),)), at=sc.t(0, 1))


async def test_cohort_borrowing_and_lending_limits(ledger: Ledger) -> None:
    """team-a: 8 GPUs, borrows <= 4, lends <= 4 (guarantees itself 4). team-b: 8 GPUs, no limits."""
    await setup_queues(ledger)
    for i in range(8):
        await add(ledger, f"a{i}", "ml/train")
        await add(ledger, f"b{i}", "bio/main")
    # team-a may borrow up to 4 beyond its 8
    with pytest.raises(QuotaExceeded, match="team-a"):
        await ledger.admit(AdmissionRequest("a0", "team-a", sc.gpu(13)), at=sc.t(0))
    await ledger.admit(AdmissionRequest("a0", "team-a", sc.gpu(12)), at=sc.t(0))
    # the pool (4 lendable of team-a + 8 of team-b) has 12 - 8 = 4 left for team-b
    with pytest.raises(QuotaExceeded, match="cohort research"):
        await ledger.admit(AdmissionRequest("b0", "team-b", sc.gpu(5)), at=sc.t(0))
    await ledger.admit(AdmissionRequest("b0", "team-b", sc.gpu(4)), at=sc.t(0))
    await ledger.finish("a0", at=sc.t(1))
    # team-b alone may take everything team-a lends: 8 + 4, but not team-a's guaranteed 4
    await ledger.admit(AdmissionRequest("b1", "team-b", sc.gpu(8)), at=sc.t(1))
    with pytest.raises(QuotaExceeded):
        await ledger.admit(AdmissionRequest("b2", "team-b", sc.gpu(1)), at=sc.t(1))
    # team-a still gets its guaranteed 4
    await ledger.admit(AdmissionRequest("a1", "team-a", sc.gpu(4)), at=sc.t(1))
    state = await ledger.load_state()
    assert state.usage == {("team-a", "h200", GPU): Q("4"), ("team-b", "h200", GPU): Q("12")}


async def test_release_and_evict(ledger: Ledger) -> None:
    await setup_queues(ledger)
    await add(ledger, "w1")
    await add(ledger, "p1", "bio/main")
    await ledger.admit(AdmissionRequest("w1", "team-a", sc.gpu(2), sc.devices(2)), at=sc.t(0, 1))
    res = await ledger.evict("w1", at=sc.t(0, 2), reason="Preempted", preemptor_uid="p1", message="for p1")
    assert res.released == (Charge("h200", GPU, Q("2")),)
    assert res.devices == ("gpu.nvidia.com/node-1/gpu-0", "gpu.nvidia.com/node-1/gpu-1")
    async with ledger.engine.connect() as c:
        ev = (await c.execute(select(m.Eviction))).one()
        wl = (await c.execute(select(m.Workload).where(m.Workload.uid == "w1"))).one()
        kinds = (await c.execute(select(m.JournalEntry.kind, m.JournalEntry.metric))).all()
    assert (ev.reason, ev.preemptor_uid, ev.preemptor_cluster_queue, ev.victim_cluster_queue) == (
        "Preempted",
        "p1",
        "team-b",
        "team-a",
    )
    assert (ev.planned_device_count, ev.freed_device_count) == (2, 2)
    assert wl.state == "pending" and wl.cluster_queue is None
    assert sorted(kinds) == sorted(
        [
            ("reserve", "quota"),
            ("reserve", "devices"),
            ("reserve", "device_memory"),
            ("release", "quota"),
            ("release", "devices"),
            ("release", "device_memory"),
        ]
    )
    assert (await ledger.load_state()).usage == {}
    with pytest.raises(NotAdmitted):
        await ledger.finish("w1", at=sc.t(0, 3))
    with pytest.raises(NotAdmitted):
        await ledger.evict("w1", at=sc.t(0, 3), reason="x")


async def test_eviction_start_is_recorded_before_the_release(ledger: Ledger) -> None:
    await setup_queues(ledger)
    await add(ledger, "w1")
    await add(ledger, "p1", "bio/main")
    with pytest.raises(NotAdmitted):
        await ledger.begin_eviction("w1", at=sc.t(0, 1), reason="Preempted")
    await ledger.admit(AdmissionRequest("w1", "team-a", sc.gpu(2), sc.devices(2)), at=sc.t(0, 1))
    assert await ledger.begin_eviction(
        "w1", at=sc.t(0, 2), reason="Preempted", preemptor_uid="p1", message="m"
    )
    # a restart repeating the step records nothing new
    assert not await ledger.begin_eviction("w1", at=sc.t(0, 3), reason="Preempted", preemptor_uid="p1")
    state = await ledger.load_state()
    started = state.admissions["w1"].eviction
    assert started is not None
    assert (started.reason, started.preemptor_uid, started.message) == ("Preempted", "p1", "m")
    assert started.started_at_ms == int(sc.t(0, 2).timestamp() * 1000)
    assert state.usage  # the quota stays charged until the victim is gone
    await ledger.evict("w1", at=sc.t(0, 4), reason="Preempted", preemptor_uid="p1", message="m")
    assert (await ledger.load_state()).usage == {}
    # admitted again later: a new admission, with no eviction in progress
    await ledger.admit(AdmissionRequest("w1", "team-a", sc.gpu(2), sc.devices(2)), at=sc.t(0, 5))
    assert (await ledger.load_state()).admissions["w1"].eviction is None
    assert await ledger.begin_eviction("w1", at=sc.t(0, 6), reason="PodsReadyTimeout")


async def test_quota_versions(ledger: Ledger) -> None:
    spec = ClusterQueueSpec("cq", quotas=(QuotaSpec("f", "r", Q("1")),))
    assert await ledger.upsert_cluster_queue(spec, at=sc.t(0)) == 1
    assert await ledger.upsert_cluster_queue(spec, at=sc.t(1)) == 1  # unchanged: same version
    bigger = ClusterQueueSpec("cq", quotas=(QuotaSpec("f", "r", Q("2")), QuotaSpec("f", "s", Q("1"))))
    assert await ledger.upsert_cluster_queue(bigger, at=sc.t(2)) == 2
    async with ledger.engine.connect() as c:
        versions = (
            await c.execute(
                select(
                    m.QuotaVersion.version, m.QuotaVersion.valid_from_ms, m.QuotaVersion.valid_to_ms
                ).order_by(m.QuotaVersion.version)
            )
        ).all()
    ms = [int(sc.t(d).timestamp() * 1000) for d in (0, 2)]
    assert [tuple(v) for v in versions] == [(1, ms[0], ms[1]), (2, ms[1], None)]
    assert (await ledger.load_state()).cluster_queues["cq"].quotas == bigger.quotas
    with pytest.raises(LedgerError, match="twice"):
        await ledger.upsert_cluster_queue(
            ClusterQueueSpec("cq", quotas=(QuotaSpec("f", "r", Q("1")), QuotaSpec("f", "r", Q("2")))),
            at=sc.t(3),
        )


async def test_usage_at_any_time_from_the_journal(ledger: Ledger) -> None:
    await sc.build(ledger)
    assert await ledger.usage_at(sc.t(0, 2)) == {
        ("team-a", "default", "cpu"): Q("32"),
        ("team-a", "h200", GPU): Q("4"),
    }
    assert await ledger.usage_at(sc.t(1, 10, 1)) == {
        ("team-a", "h200", GPU): Q("2"),
        ("team-b", "h200", GPU): Q("12"),
    }
    assert await ledger.usage_at(sc.t(9)) == (await ledger.load_state()).usage


async def test_runs_and_leader_terms(ledger: Ledger) -> None:
    r1 = await ledger.start_run(identity="pod-a", at=sc.t(0), version="0.1.0", details={"k": 1})
    r2 = await ledger.start_run(identity="pod-b", at=sc.t(0))
    assert await ledger.begin_leader_term(r1, lease="queueing", at=sc.t(0)) == 1
    assert await ledger.begin_leader_term(r2, lease="queueing", at=sc.t(1)) == 2  # r1's term ends
    await ledger.heartbeat(r2, at=sc.t(2))
    await ledger.stop_run(r2, at=sc.t(3))
    async with ledger.engine.connect() as c:
        terms = (
            await c.execute(
                select(m.LeaderTerm.run_id, m.LeaderTerm.term, m.LeaderTerm.ended_at_ms).order_by(
                    m.LeaderTerm.term
                )
            )
        ).all()
        run = (await c.execute(select(m.ControllerRun).where(m.ControllerRun.id == r2))).one()
    assert [(t.run_id, t.term, t.ended_at_ms is not None) for t in terms] == [(r1, 1, True), (r2, 2, True)]
    assert run.stopped_at_ms == run.heartbeat_at_ms == int(sc.t(3).timestamp() * 1000)
    async with ledger.engine.connect() as c:
        await c.begin()
        with pytest.raises(IntegrityError):  # a term number cannot be taken twice
            await c.execute(
                insert(m.LeaderTerm).values(run_id=r1, lease="queueing", term=2, acquired_at_ms=0)
            )
        await c.rollback()


async def test_recovery_state_and_forget(ledger: Ledger) -> None:
    await sc.build(ledger)
    state = await ledger.load_state()
    assert set(state.admissions) == {"w4", "w5"}
    assert set(state.pending) == {"w6"}  # evicted and requeued; w7 was evicted without requeue
    assert state.pending["w6"].queued_at_ms == int(sc.t(1, 11).timestamp() * 1000)
    assert set(state.local_queues) == {("ml", "train"), ("ml", "infer"), ("bio", "main"), ("ops", "q")}
    await ledger.forget_workload("w5", at=sc.t(4))  # admitted: released first
    await ledger.forget_workload("w6", at=sc.t(4))
    state = await ledger.load_state()
    assert set(state.admissions) == {"w4"} and state.pending == {}
    assert state.usage == {("team-b", "h200", GPU): Q("10")}


async def test_journal_is_consistent_with_current_usage(ledger: Ledger) -> None:
    await sc.build(ledger)
    async with ledger.engine.connect() as c:
        rows = (
            await c.execute(
                text(
                    "SELECT kind, cluster_queue, flavor, resource, amount FROM usage_journal "
                    "WHERE metric = 'quota'"
                )
            )
        ).all()
    total: dict[tuple[str, str, str], object] = {}
    for kind, cq, f, r, amount in rows:
        q = Q(str(amount))
        k = (cq, f, r)
        total[k] = total.get(k, Q("0")) + (q if kind == "reserve" else -q)  # type: ignore[operator]
    assert {k: v for k, v in total.items() if v} == (await ledger.load_state()).usage


async def test_admit_many_is_all_or_nothing(ledger: Ledger) -> None:
    await setup_queues(ledger)
    for i in range(3):
        await add(ledger, f"s{i}", "ops/q")
    ok = [AdmissionRequest("s0", "solo", sc.gpu(1)), AdmissionRequest("s1", "solo", sc.gpu(1))]
    too_many = [*ok, AdmissionRequest("s2", "solo", sc.gpu(1))]
    with pytest.raises(QuotaExceeded):
        await ledger.admit_many(too_many, at=sc.t(0))
    assert (await ledger.load_state()).admissions == {}
    assert len(await ledger.admit_many(ok, at=sc.t(0))) == 2


async def test_concurrent_admissions_never_exceed_quota(ledger: Ledger) -> None:
    """Many tasks race to admit into one ClusterQueue (and the same UIDs twice): the ledger's row locks
    (PostgreSQL) / immediate transactions (SQLite) keep the sum within quota and each UID admitted once."""
    await ledger.upsert_cluster_queue(
        ClusterQueueSpec("one", quotas=(QuotaSpec("f", GPU, Q("10")),)), at=sc.t(0)
    )
    await ledger.upsert_local_queue(LocalQueueSpec("ns", "lq", "one"), at=sc.t(0))
    n = 30
    for i in range(n):
        await ledger.add_workload(WorkloadSpec(f"c{i}", "ns", f"c{i}", "lq"), at=sc.t(0))

    async def attempt(uid: str, amount: int) -> str:
        try:
            await ledger.admit(
                AdmissionRequest(uid, "one", (Charge("f", GPU, Q(str(amount))),)), at=sc.t(0, 1)
            )
            return "admitted"
        except QuotaExceeded:
            return "quota"
        except AlreadyAdmitted:
            return "duplicate"

    # every UID twice (two racers each), 1 or 2 GPUs each: far more demand than the 10 GPUs
    jobs = [attempt(f"c{i}", 1 + i % 2) for i in range(n)] + [attempt(f"c{i}", 1 + i % 2) for i in range(n)]
    results = await asyncio.gather(*jobs)
    state = await ledger.load_state()
    charged = sum((a.charges[0].amount for a in state.admissions.values()), Q("0"))
    assert charged <= Q("10")
    assert state.usage.get(("one", "f", GPU), Q("0")) == charged
    assert results.count("admitted") == len(state.admissions)  # no UID admitted twice
    assert charged >= Q("9")  # and the queue was actually filled (no spurious refusals)
    async with ledger.engine.connect() as c:
        per_uid = (
            await c.execute(
                text(
                    "SELECT workload_uid, COUNT(*) FROM admissions GROUP BY workload_uid HAVING COUNT(*) > 1"
                )
            )
        ).all()
    assert per_uid == []


async def test_release_many_is_one_transaction(ledger: Ledger) -> None:
    await setup_queues(ledger)
    for i in range(3):
        await add(ledger, f"r{i}", "ml/train")
    await ledger.admit_many(
        [
            AdmissionRequest(f"r{i}", "team-a", sc.gpu(1, cpu=2), sc.devices(1, node=f"n{i}"))
            for i in range(3)
        ],
        at=sc.t(0, 1),
    )
    with pytest.raises(NotAdmitted):  # one unknown UID: nothing released
        await ledger.finish_many(["r0", "nope"], at=sc.t(0, 2))
    assert len((await ledger.load_state()).admissions) == 3
    res = await ledger.release_many(
        [("r0", "Finished", "finished"), ("r1", "Preempted", "pending")], at=sc.t(0, 2)
    )
    assert [(r.workload_uid, r.devices) for r in res] == [
        ("r0", ("gpu.nvidia.com/n0/gpu-0",)),
        ("r1", ("gpu.nvidia.com/n1/gpu-0",)),
    ]
    state = await ledger.load_state()
    assert set(state.admissions) == {"r2"} and set(state.pending) == {"r1"}
    assert state.usage == {("team-a", "default", "cpu"): Q("2"), ("team-a", "h200", GPU): Q("1")}
    assert await ledger.usage_at(sc.t(0, 2)) == state.usage


async def test_workloads_recorded_when_seen_wait_since_their_jobs_creation(ledger: Ledger) -> None:
    await setup_queues(ledger)
    created = sc.t(0, 1)
    specs = [
        WorkloadSpec(
            "a", "ml", "a", "train", owner_uid="job-a", queued_at_ms=round(created.timestamp() * 1000)
        ),
        WorkloadSpec("b", "ml", "b", "train"),
    ]
    assert await ledger.add_workloads(specs, at=sc.t(0, 2)) == ["a", "b"]
    assert await ledger.add_workloads(specs, at=sc.t(0, 3)) == []  # known: left as they are
    pending = (await ledger.load_state()).pending
    assert pending["a"].queued_at_ms == round(created.timestamp() * 1000)
    assert pending["b"].queued_at_ms == round(sc.t(0, 2).timestamp() * 1000)
    # an eviction resets the wait to the eviction's time
    await ledger.admit(AdmissionRequest("a", "team-a", sc.gpu(1), sc.devices(1)), at=sc.t(0, 4))
    await ledger.evict("a", at=sc.t(0, 5), reason="Preempted", preemptor_uid="b")
    assert (await ledger.load_state()).pending["a"].queued_at_ms == round(sc.t(0, 5).timestamp() * 1000)
    async with ledger.engine.connect() as c:
        ev = (await c.execute(select(m.Eviction))).one()
    assert ev.preemptor_cluster_queue == "team-a"  # b is recorded (pending): its LocalQueue's ClusterQueue


async def test_an_admission_keeps_its_status_and_moves_to_the_recreated_workload(ledger: Ledger) -> None:
    await setup_queues(ledger)
    await ledger.add_workload(WorkloadSpec("old", "ml", "job-x", "train", owner_uid="job-x-uid"), at=sc.t(0))
    status = {"clusterQueue": "team-a", "podSetAssignments": [{"name": "main", "count": 1}]}
    aid = await ledger.admit(
        AdmissionRequest("old", "team-a", sc.gpu(2), sc.devices(2), status=status), at=sc.t(0, 1)
    )
    state = await ledger.load_state()
    assert (state.admissions["old"].status, state.admissions["old"].owner_uid) == (status, "job-x-uid")
    moved = {**status, "plannedDevices": 2}
    assert await ledger.rebind("old", sc.devices(2, node="node-2"), moved)
    assert (await ledger.load_state()).admissions["old"].status == moved
    new = WorkloadSpec("new", "ml", "job-x", "train", owner_uid="job-x-uid")
    assert await ledger.transfer_admission("old", new, at=sc.t(0, 2)) == aid
    state = await ledger.load_state()
    assert set(state.admissions) == {"new"}
    assert state.admissions["new"].admission_id == aid and state.admissions["new"].status == moved
    assert state.usage[("team-a", "h200", GPU)] == Q("2")  # the quota stays charged once
    async with ledger.engine.connect() as c:
        rows = {r.uid: r.state for r in (await c.execute(select(m.Workload))).all()}
    assert rows == {"old": m.DELETED, "new": m.ADMITTED}
    with pytest.raises(NotAdmitted):
        await ledger.transfer_admission("old", new, at=sc.t(0, 3))
    await ledger.finish("new", at=sc.t(0, 4))
    assert (await ledger.load_state()).usage == {}


async def test_many_workloads_recorded_in_one_call(ledger: Ledger) -> None:
    specs = [WorkloadSpec(f"u{i}", "ml", f"w{i}", "train") for i in range(1200)]
    assert len(await ledger.add_workloads(specs[:700], at=sc.t(0))) == 700
    assert await ledger.add_workloads(specs, at=sc.t(0, 1)) == [s.uid for s in specs[700:]]
    assert len((await ledger.load_state()).pending) == 1200
