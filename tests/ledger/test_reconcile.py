"""The pure reconcile decision, rule by rule, and carrying out its ledger side."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest

from queueing.ledger import reconcile as rc
from queueing.ledger.reconcile import (
    ApplyAdmission,
    EvictAdmission,
    ForgetWorkload,
    ObservedCluster,
    ObservedWorkload,
    RecordWorkload,
    ReleaseAdmission,
    RevokeAdmission,
    TransferAdmission,
    reconcile,
)
from queueing.ledger.recovery import apply_ledger_actions
from queueing.ledger.repository import Ledger
from queueing.ledger.state import ActiveAdmission, AdmissionRequest, PendingWorkload, PodPlan

from . import scenario as sc


def adm(uid: str, cq: str = "team-a", nodes: tuple[str, ...] = ("n1",), aid: int = 1) -> ActiveAdmission:
    return ActiveAdmission(
        admission_id=aid,
        workload_uid=uid,
        namespace="ns",
        name=uid,
        local_queue="lq",
        cluster_queue=cq,
        admitted_at_ms=0,
        charges=(),
        pods=tuple(PodPlan(i, n) for i, n in enumerate(nodes)),
    )


def obs(uid: str, phase: rc.Phase, cq: str | None = None, **kw: object) -> ObservedWorkload:
    return ObservedWorkload(uid, "ns", uid, phase, cluster_queue=cq, **kw)  # type: ignore[arg-type]


def cluster(*wls: ObservedWorkload, nodes: tuple[str, ...] = ("n1", "n2")) -> ObservedCluster:
    return ObservedCluster({w.uid: w for w in wls}, frozenset(nodes))


def pend(uid: str) -> PendingWorkload:
    return PendingWorkload(uid, "ns", uid, "lq", 0, 0)


def test_module_is_pure() -> None:
    tree = ast.parse(Path(rc.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    assert imported <= {"__future__", "collections.abc", "dataclasses", "typing", "queueing.ledger.state"}


@pytest.mark.parametrize(
    ("observed", "expected"),
    [
        (None, [ReleaseAdmission("w", "WorkloadDeleted", "deleted")]),
        (obs("w", "finished", "team-a"), [ReleaseAdmission("w", "Finished", "finished")]),
        (obs("w", "evicted", reason="Suspended"), [ReleaseAdmission("w", "Suspended", "pending")]),
        (obs("w", "evicted"), [ReleaseAdmission("w", "Evicted", "pending")]),
        (obs("w", "pending"), [ApplyAdmission("w", 7)]),
        (obs("w", "admitted", "team-a"), []),
        (obs("w", "running", "team-a", pods_running=True), []),
        (obs("w", "admitted", None), []),
        (
            obs("w", "admitted", "team-b"),
            [ReleaseAdmission("w", "AdmissionMismatch", "pending"), RevokeAdmission("w", "ns", "w")],
        ),
    ],
)
def test_ledger_admitted(observed: ObservedWorkload | None, expected: list[rc.Action]) -> None:
    c = cluster(*([observed] if observed else []))
    assert reconcile({"w": adm("w", aid=7)}, {}, c) == expected


def test_lost_node() -> None:
    a = {"w": adm("w", nodes=("n1", "gone-1", "gone-2"))}
    got = reconcile(a, {}, cluster(obs("w", "admitted", "team-a")))
    assert got == [EvictAdmission("w", "NodeLost", "planned node(s) gone-1, gone-2 no longer exist")]
    # pods already running there: the cluster view of nodes lags; leave it alone
    assert reconcile(a, {}, cluster(obs("w", "running", "team-a", pods_running=True))) == []


def test_cluster_only_and_pending() -> None:
    c = cluster(
        obs("x", "admitted", "team-a"), obs("y", "pending"), obs("z", "pending"), obs("f", "finished")
    )
    got = reconcile({}, {"z": pend("z"), "gone": pend("gone")}, c)
    assert got == [
        ForgetWorkload("gone"),
        RevokeAdmission("x", "ns", "x"),
        RecordWorkload("y", "ns", "y"),
    ]


def test_order_is_deterministic() -> None:
    admissions = {u: adm(u) for u in ("b", "a", "c")}
    got = reconcile(admissions, {}, cluster())
    assert [a.workload_uid for a in got] == ["a", "b", "c"]  # type: ignore[union-attr]


async def test_apply_ledger_actions(ledger: Ledger) -> None:
    await sc.queues(ledger)
    for uid in ("gone", "done", "moved", "keep"):
        await sc._wl(ledger, uid, "ml/train", sc.t(0))
        await ledger.admit(
            AdmissionRequest(uid, "team-a", sc.gpu(1), sc.devices(1, node=f"n-{uid}")), at=sc.t(0)
        )
    await sc._wl(ledger, "stale", "ml/train", sc.t(0))
    state = await ledger.load_state()
    observed = cluster(
        obs("done", "finished"),
        obs("moved", "admitted", "team-b"),
        obs("keep", "pending"),
        nodes=("n-done", "n-moved", "n-keep"),
    )
    actions = reconcile(state.admissions, state.pending, observed)
    rest = await apply_ledger_actions(ledger, actions, at=sc.t(1))
    assert rest == [  # by UID
        ApplyAdmission("keep", state.admissions["keep"].admission_id),
        RevokeAdmission("moved", "ns", "moved"),
    ]
    after = await ledger.load_state()
    assert set(after.admissions) == {"keep"}
    assert set(after.pending) == {"moved"}  # requeued; "stale" forgotten, "gone" deleted, "done" finished
    assert after.usage == {("team-a", "h200", sc.GPU): sc.Q("1")}
    # applying the same actions again changes nothing (idempotent)
    await apply_ledger_actions(ledger, actions, at=sc.t(2))
    assert await ledger.load_state() == after


STATUS = {"clusterQueue": "team-a", "podSetAssignments": [{"name": "main", "count": 1}]}


def kept(uid: str, owner: str | None = None) -> ActiveAdmission:
    """An admission recorded with the status it wrote (revision 0005 on)."""
    return replace(adm(uid, aid=7), status=STATUS, owner_uid=owner)


@pytest.mark.parametrize(
    ("observed", "why"),
    [
        (obs("w", "admitted", "team-a", admission=STATUS, reserved=True, admitted=True), None),
        (obs("w", "admitted", None, reserved=True, admitted=True), "status.admission is missing"),
        (obs("w", "pending", None), "status.admission is missing"),
        (
            obs("w", "pending", "team-a", admission=STATUS, admitted=True),
            "the QuotaReserved condition is not True",
        ),
        (
            obs("w", "admitted", "team-a", admission=STATUS, reserved=True),
            "the Admitted condition is not True",
        ),
        (
            obs(
                "w",
                "admitted",
                "team-a",
                admission={**STATUS, "plannedDevices": 3},
                reserved=True,
                admitted=True,
            ),
            "status.admission is not the plan the ledger holds",
        ),
        (
            obs("w", "admitted", "team-b", admission={**STATUS, "clusterQueue": "team-b"}, reserved=True),
            "status.admission names ClusterQueue team-b, the ledger team-a",
        ),
    ],
)
def test_a_diverged_status_is_rewritten_from_the_ledger(observed: ObservedWorkload, why: str | None) -> None:
    """Recovery repairs, it does not revoke: whatever diverged, the ledger's admission is applied."""
    got = reconcile({"w": kept("w")}, {}, cluster(observed))
    assert got == ([ApplyAdmission("w", 7, why)] if why else [])


def test_a_workload_recreated_for_the_same_job_takes_the_admission_over() -> None:
    new = obs("w2", "pending", owner_uid="job-1")
    other = obs("w3", "pending", owner_uid="job-2")
    assert reconcile({"w": kept("w", owner="job-1")}, {}, cluster(new, other)) == [
        TransferAdmission("w", "w2"),
        RecordWorkload("w3", "ns", "w3"),
    ]
    # no Workload yet, its Job runs on: held for the one the Job gets next
    held = ObservedCluster({}, frozenset(("n1",)), owners=frozenset({"job-1"}))
    assert reconcile({"w": kept("w", owner="job-1")}, {}, held) == []
    # the Job is gone too: released
    assert reconcile({"w": kept("w", owner="job-1")}, {}, cluster()) == [
        ReleaseAdmission("w", "WorkloadDeleted", "deleted")
    ]
