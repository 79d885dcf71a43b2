"""The ledger's last-line quota check is the scheduling core's ``QuotaTree`` (one quota model): a
Cohort's own quota, hierarchical cohorts, borrowing and lending limits, on both databases. The
property test drives random cohort trees and admission sequences through the core and the ledger:
the core's ``fit`` says Fit exactly when the ledger accepts."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queueing.ledger.quota import QuotaCheck, quota_specs, tree_lock_names, trees_of
from queueing.ledger.repository import Ledger, QuotaExceeded
from queueing.ledger.state import (
    AdmissionRequest,
    Charge,
    ClusterQueueSpec,
    CohortSpec,
    LocalQueueSpec,
    QuotaSpec,
    WorkloadSpec,
)
from queueing.scheduling.from_api import queue_specs
from queueing.scheduling.quota import QuotaTree
from queueing.scheduling.snapshot import ClusterQueueSpec as CoreCQ
from queueing.scheduling.snapshot import CohortSpec as CoreCohort
from queueing.scheduling.snapshot import FlavorQuotas, ResourceGroup, ResourceQuota
from queueing.simulate.scenario import load_objects

from . import scenario as sc
from .conftest import run_async

Q = sc.Q
GPU = "gpu.nvidia.com"
MEM = "gpu.nvidia.com/memory"
H200_MEMORY = Q("143771Mi")  # the memory capacity one H200 publishes (examples/simulate/cluster.yaml)
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "queues"


async def write_core_specs(led: Ledger, cqs: list[CoreCQ], cohorts: list[CoreCohort]) -> None:
    """The core's queue specs into the ledger, as the simulator and the controller write them."""
    for c in cohorts:
        await led.upsert_cohort(CohortSpec(c.name, c.parent, quota_specs(c.quotas())), at=sc.t(0))
    for cq in cqs:
        await led.upsert_cluster_queue(
            ClusterQueueSpec(cq.name, quota_specs(cq.quotas()), cq.cohort), at=sc.t(0)
        )
        await led.upsert_local_queue(LocalQueueSpec("ns", cq.name, cq.name), at=sc.t(0))


async def add(led: Ledger, uid: str, cq: str) -> None:
    await led.add_workload(WorkloadSpec(uid, "ns", uid, cq), at=sc.t(0))


def h200(n: int) -> tuple[Charge, ...]:
    return (Charge("h200", GPU, Q(str(n))), Charge("h200", MEM, H200_MEMORY * n))


def example_queues() -> tuple[list[CoreCQ], list[CoreCohort]]:
    objs, _ = load_objects([str(EXAMPLES / "cluster-queues.yaml"), str(EXAMPLES / "cohort.yaml")])
    specs = queue_specs(objs)
    assert [c.name for c in specs.cohorts] == ["ml-research"]
    return list(specs.cluster_queues), list(specs.cohorts)


def request(charges: tuple[Charge, ...]) -> dict[tuple[str, str], Fraction]:
    return {(c.flavor, c.resource): c.amount.value for c in charges}


async def test_examples_queues_team_b_fits_while_team_a_borrows(ledger: Ledger) -> None:
    """examples/queues: team-a borrows one H200 (5 of its 4); team-b's 2-GPU job is within its nominal
    quota and fits the pool (the cohort's own H200 included): the ledger admits it, as the core does.
    The old flat model said "would need 5 from the shared pool, which has 4"."""
    cqs, cohorts = example_queues()
    core = QuotaTree(cqs, cohorts)
    await write_core_specs(ledger, cqs, cohorts)
    await add(ledger, "a", "team-a")
    await add(ledger, "b", "team-b")
    await add(ledger, "b2", "team-b")
    assert core.fit("team-a", request(h200(5))).mode == "Fit"
    await ledger.admit(AdmissionRequest("a", "team-a", h200(5)), at=sc.t(0, 1))
    core.add_usage("team-a", request(h200(5)))
    assert core.fit("team-b", request(h200(2))).mode == "Fit"
    await ledger.admit(AdmissionRequest("b", "team-b", h200(2)), at=sc.t(0, 2))
    core.add_usage("team-b", request(h200(2)))
    # the tree's 5 lendable H200s (team-a's 2, team-b's 2, the cohort's own 1) are all in use now
    assert core.fit("team-b", request(h200(1))).mode != "Fit"
    with pytest.raises(QuotaExceeded) as e:
        await ledger.admit(AdmissionRequest("b2", "team-b", h200(1)), at=sc.t(0, 3))
    assert str(e.value).startswith("ClusterQueue team-b (cohort ml-research): insufficient unused quota")
    assert f"for {GPU} in flavor h200" in str(e.value)
    state = await ledger.load_state()
    assert state.usage[("team-a", "h200", GPU)] == Q("5") and state.usage[("team-b", "h200", GPU)] == Q("2")
    assert state.cohorts["ml-research"] == CohortSpec(
        "ml-research", None, (QuotaSpec("h200", GPU, Q("1")), QuotaSpec("h200", MEM, Q("141Gi")))
    )


async def test_the_cohorts_own_quota_is_what_makes_room(ledger: Ledger) -> None:
    """Without the Cohort object's own H200 (recorded as an implicit cohort after a deletion) the same
    admissions do not fit; with it back, they do: the ledger reads the cohort's quota it stores."""
    cqs, cohorts = example_queues()
    await write_core_specs(ledger, cqs, cohorts)
    await ledger.upsert_cohort(CohortSpec("ml-research"), at=sc.t(0, 1))  # the Cohort object deleted
    assert (await ledger.cohorts())["ml-research"] == CohortSpec("ml-research")
    for uid, cq in (("a", "team-a"), ("b", "team-b")):
        await add(ledger, uid, cq)
    await ledger.admit(AdmissionRequest("a", "team-a", h200(5)), at=sc.t(0, 2))
    implicit = QuotaTree(cqs, [])  # the core, without the Cohort object, says the same
    implicit.add_usage("team-a", request(h200(5)))
    assert implicit.fit("team-b", request(h200(2))).mode != "Fit"
    with pytest.raises(QuotaExceeded, match=r"ClusterQueue team-b \(cohort ml-research\): insufficient"):
        await ledger.admit(AdmissionRequest("b", "team-b", h200(2)), at=sc.t(0, 3))
    await write_core_specs(ledger, [], cohorts)  # the Cohort object is back
    await ledger.admit(AdmissionRequest("b", "team-b", h200(2)), at=sc.t(0, 4))


def gpu_quota(nominal: int, borrowing: int | None = None, lending: int | None = None) -> ResourceGroup:
    q = ResourceQuota(Fraction(nominal), *(None if v is None else Fraction(v) for v in (borrowing, lending)))
    return ResourceGroup(("gpu",), (FlavorQuotas("f", {"gpu": q}),))


async def test_hierarchical_cohorts_share_the_roots_own_quota(ledger: Ledger) -> None:
    """org (own 2 GPUs) <- lab <- x (1 GPU); y sits in org directly with none: x may use its 1 and
    org's 2 (through lab); then there is nothing left for y. A tree with a parent cycle disables its
    ClusterQueues, in the core and in the ledger."""
    cohorts = [CoreCohort("org", None, (gpu_quota(2),)), CoreCohort("lab", "org")]
    cqs = [CoreCQ("x", (gpu_quota(1),), "lab"), CoreCQ("y", (gpu_quota(0),), "org")]
    await write_core_specs(ledger, cqs, cohorts)
    for uid, cq in (("x1", "x"), ("x2", "x"), ("y1", "y")):
        await add(ledger, uid, cq)
    one, four, three = ((Charge("f", "gpu", Q(str(n))),) for n in (1, 4, 3))
    with pytest.raises(
        QuotaExceeded, match=r"ClusterQueue x \(cohort lab\): insufficient quota for gpu in flavor f"
    ):
        await ledger.admit(AdmissionRequest("x1", "x", four), at=sc.t(0, 1))
    await ledger.admit(AdmissionRequest("x1", "x", three), at=sc.t(0, 1))
    with pytest.raises(
        QuotaExceeded, match=r"ClusterQueue y \(cohort org\): insufficient unused quota for gpu"
    ):
        await ledger.admit(AdmissionRequest("y1", "y", one), at=sc.t(0, 2))
    await ledger.finish("x1", at=sc.t(0, 3))
    await ledger.admit(AdmissionRequest("y1", "y", one), at=sc.t(0, 4))
    # a parent cycle: org -> lab -> org; both queues are inactive (and the lock covers the cycle)
    await ledger.upsert_cohort(CohortSpec("org", "lab", quota_specs(cohorts[0].quotas())), at=sc.t(0, 5))
    assert tree_lock_names("lab", {"org": "lab", "lab": "org"}) == ("lab", "org")
    with pytest.raises(
        QuotaExceeded, match="ClusterQueue x is inactive: cohort lab is in a cohort tree with a cycle"
    ):
        await ledger.admit(AdmissionRequest("x2", "x", one), at=sc.t(0, 6))
    assert QuotaTree(cqs, [CoreCohort("org", "lab", (gpu_quota(2),)), cohorts[1]]).disabled.keys() == {
        "x",
        "y",
    }


def test_tree_lock_names_and_trees() -> None:
    parents = {"root": None, "a": "root", "b": "a", "other": None, "c1": "c2", "c2": "c1", "under": "c1"}
    assert tree_lock_names("b", parents) == ("root",)
    assert tree_lock_names("root", parents) == ("root",)
    assert tree_lock_names("implicit", parents) == ("implicit",)  # no row of its own: itself
    assert tree_lock_names("under", parents) == ("c1", "c2")
    assert trees_of({"root"}, parents) == {"root", "a", "b"}
    assert trees_of({"c1"}, parents) == {"c1", "c2", "under"}


def test_quota_check_refuses_a_resource_the_queue_does_not_define() -> None:
    check = QuotaCheck([ClusterQueueSpec("q", (QuotaSpec("f", "gpu", Q("2")),))], [], {})
    assert (
        check.charge("q", (Charge("g", "gpu", Q("1")),))
        == "ClusterQueue q has no quota for flavor g resource gpu"
    )
    assert check.charge("q", (Charge("g", "gpu", Q("0")), Charge("f", "gpu", Q("2")))) == ""
    assert check.charge("q", (Charge("f", "gpu", Q("1")),)).startswith(
        "ClusterQueue q: insufficient unused quota"
    )


@pytest.mark.postgres
async def test_admissions_into_one_tree_serialise(pg_url: str) -> None:
    """Two ClusterQueues in two child cohorts of one root that holds all the quota (10 GPUs): racing
    admissions into both lock the root's row, so together they never take more than 10."""
    led = Ledger.from_url(pg_url)
    try:
        await led.delete_everything()
        cohorts = [
            CoreCohort("root", None, (gpu_quota(10),)),
            CoreCohort("c1", "root"),
            CoreCohort("c2", "root"),
        ]
        await write_core_specs(
            led, [CoreCQ("x", (gpu_quota(0),), "c1"), CoreCQ("y", (gpu_quota(0),), "c2")], cohorts
        )
        n = 16
        for i in range(n):
            await add(led, f"x{i}", "x")
            await add(led, f"y{i}", "y")

        async def attempt(uid: str, cq: str) -> bool:
            try:
                await led.admit(AdmissionRequest(uid, cq, (Charge("f", "gpu", Q("1")),)), at=sc.t(0, 1))
                return True
            except QuotaExceeded:
                return False

        results = await asyncio.gather(*(attempt(f"{cq}{i}", cq) for i in range(n) for cq in ("x", "y")))
        state = await led.load_state()
        used = sum(state.usage.values(), Q("0"))
        assert used == Q("10") and results.count(True) == 10 == len(state.admissions)
    finally:
        await led.close()


# ---------------------------------------------------------------- property: core ⇔ ledger
RESOURCES = ("gpu", "mem")


@st.composite
def quota_groups(draw: st.DrawFn, *, own: bool) -> tuple[ResourceGroup, ...]:
    """Quotas of flavor f for gpu and mem (a cohort may have none of its own)."""
    if own and draw(st.booleans()):
        return ()
    res = {}
    for r in RESOURCES:
        nominal = draw(st.integers(0, 6))
        borrowing = draw(st.one_of(st.none(), st.integers(0, 4)))
        lending = draw(st.one_of(st.none(), st.integers(0, 6)))
        res[r] = ResourceQuota(
            Fraction(nominal), *(None if v is None else Fraction(v) for v in (borrowing, lending))
        )
    return (ResourceGroup(RESOURCES, (FlavorQuotas("f", res),)),)


@st.composite
def trees(draw: st.DrawFn) -> tuple[list[CoreCQ], list[CoreCohort], list[tuple[Any, ...]]]:
    n_cohorts = draw(st.integers(0, 4))
    cohorts = [
        CoreCohort(
            f"c{i}",
            draw(st.one_of(st.none(), st.sampled_from([f"c{j}" for j in range(i)]))) if i else None,
            draw(quota_groups(own=True)),
        )
        for i in range(n_cohorts)
    ]
    names = [c.name for c in cohorts] + ["implicit"]  # a cohort without a Cohort object
    cqs = [
        CoreCQ(f"q{i}", draw(quota_groups(own=False)), draw(st.one_of(st.none(), st.sampled_from(names))))
        for i in range(draw(st.integers(1, 4)))
    ]
    amount = st.integers(0, 5)
    admit = st.tuples(st.just("admit"), st.integers(0, len(cqs) - 1), amount, amount)
    batch = st.tuples(
        st.just("batch"), st.integers(0, len(cqs) - 1), amount, st.integers(0, len(cqs) - 1), amount
    )
    finish = st.tuples(st.just("finish"), st.integers(0, 20))
    ops = draw(st.lists(st.one_of(admit, admit, batch, finish), min_size=1, max_size=14))
    return cqs, cohorts, ops


def charges(gpu: int, mem: int) -> tuple[Charge, ...]:
    return (Charge("f", "gpu", Q(str(gpu))), Charge("f", "mem", Q(str(mem))))


async def drive(url: str, cqs: list[CoreCQ], cohorts: list[CoreCohort], ops: list[tuple[Any, ...]]) -> None:
    led = Ledger.from_url(url)
    try:
        await led.delete_everything()
        await write_core_specs(led, cqs, cohorts)
        core = QuotaTree(cqs, cohorts)
        active: list[tuple[str, str, tuple[Charge, ...]]] = []  # (uid, cq, charges) admitted
        n = 0
        for op in ops:
            if op[0] == "finish":
                if not active:
                    continue
                uid, cq, chs = active.pop(op[1] % len(active))
                await led.finish(uid, at=sc.t(0, n))
                core.remove_usage(cq, request(chs))
                continue
            wanted = [(cqs[op[1]].name, charges(op[2], op[3]))]
            if op[0] == "batch":
                wanted.append((cqs[op[3]].name, charges(op[4], op[4])))
            trial = core.clone()  # the core admits the batch when each fits in turn
            fits = True
            for cq, chs in wanted:
                fits = fits and trial.fit(cq, request(chs)).mode == "Fit"
                trial.add_usage(cq, request(chs))
            reqs = []
            for cq, chs in wanted:
                n += 1
                await add(led, f"w{n}", cq)
                reqs.append(AdmissionRequest(f"w{n}", cq, chs))
            try:
                await led.admit_many(reqs, at=sc.t(0, n))
                accepted = True
            except QuotaExceeded:
                accepted = False
            assert accepted == fits, (wanted, [a[1:] for a in active])
            if accepted:
                core = trial
                active += [(r.workload_uid, r.cluster_queue, r.charges) for r in reqs]
            assert core.violations() == []
        state = await led.load_state()
        want = {
            (cq.name, f, r): Q(str(core.usage(cq.name, (f, r))))
            for cq in cqs
            for f, r in [("f", x) for x in RESOURCES]
            if core.usage(cq.name, (f, r))
        }
        assert state.usage == want
    finally:
        await led.close()


PROPERTY = settings(
    deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)


@settings(PROPERTY, max_examples=40)
@given(trees())
def test_core_admits_iff_the_ledger_accepts_sqlite(
    sqlite_template: Path, tmp_path: Path, case: tuple[list[CoreCQ], list[CoreCohort], list[tuple[Any, ...]]]
) -> None:
    db = tmp_path / f"{uuid.uuid4().hex}.db"  # a fresh database per example
    shutil.copy(sqlite_template, db)
    try:
        run_async(drive(f"sqlite+aiosqlite:///{db}", *case))
    finally:
        db.unlink()


@pytest.mark.postgres
@settings(PROPERTY, max_examples=20)
@given(trees())
def test_core_admits_iff_the_ledger_accepts_postgresql(
    pg_url: str, case: tuple[list[CoreCQ], list[CoreCohort], list[tuple[Any, ...]]]
) -> None:
    run_async(drive(pg_url, *case))
