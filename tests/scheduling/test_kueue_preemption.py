"""Kueue's preemption rules where the planner used to differ (issue 17), each a case of Kueue's own
test tables (``pkg/scheduler/preemption/*_test.go``), with GPUs for Kueue's cpu units."""

from __future__ import annotations

from sched_helpers import F, gpu_cq, job, lq, nodes, running, snapshot

from queueing.scheduling import (
    CohortSpec,
    CountingPlacer,
    FlavorQuotas,
    PreemptionPolicy,
    ResourceGroup,
    ResourceQuota,
    SchedulingConfig,
    run_cycle,
)
from queueing.scheduling.config import FairSharingConfig
from queueing.scheduling.cycle import CycleResult

NO_FS = SchedulingConfig(fair_sharing=FairSharingConfig(enable=False))
FS = SchedulingConfig()


def victims(res: CycleResult) -> dict[str, str]:
    """Victim key -> reason over every plan of the cycle."""
    return {v.key: v.reason for p in res.preemptions for v in p.victims}


def test_all_candidates_in_own_queue_the_preemptor_keeps_borrowing() -> None:
    # preemption_test.go TestPreemption "preempting locally and borrowing same resource in cohort":
    # c2 does not borrow, so its workload is no candidate; c1 may keep borrowing and evicts only c1-low
    pol = PreemptionPolicy(within_cluster_queue="LowerPriority", reclaim_within_cohort="LowerPriority")
    c1 = gpu_cq("c1", 6, cohort="cohort", borrowing=6, preemption=pol)
    c2 = gpu_cq("c2", 6, cohort="cohort", borrowing=6, preemption=pol)
    adm = [
        running(job("c1-med", 4, queue="lq-1", priority=0), "c1", [("n1", 4)]),
        running(job("c1-low", 4, queue="lq-1", priority=-1), "c1", [("n1", 4)]),
        running(job("c2-low-1", 4, queue="lq-2", priority=-1), "c2", [("n1", 4)]),
    ]
    pre = job("in", 4, queue="lq-1", priority=1)
    snap = snapshot([c1, c2], [lq("lq-1", "c1"), lq("lq-2", "c2")], [pre], adm)
    res = run_cycle(snap, CountingPlacer(nodes(1, gpus=12)), 10.0, NO_FS)
    assert victims(res) == {"default/c1-low": "InClusterQueue"}


def test_hierarchical_advantage_reclaims_from_a_borrowing_queue_elsewhere_in_the_tree() -> None:
    # preemption_hierarchical_test.go TestHierarchicalPreemptions "preempt with hierarchical advantage":
    #        r
    #      /   \
    #   c(2)  q_borrowing(0)      q (0) fits its subtree's quota (c's 2): it reclaims them from
    #    |                        q_borrowing, whose workload has the same priority (reclaim Any)
    #    q(0)
    pol = PreemptionPolicy(within_cluster_queue="LowerPriority", reclaim_within_cohort="Any")
    c_quota = (ResourceGroup(("gpu",), (FlavorQuotas("default", {"gpu": ResourceQuota(F(2))}),)),)
    cohorts = [CohortSpec("r"), CohortSpec("c", parent="r", resource_groups=c_quota)]
    q = gpu_cq("q", 0, cohort="c", preemption=pol)
    qb = gpu_cq("q_borrowing", 0, cohort="r", preemption=pol)
    adm = [running(job("admitted2", 2, queue="lq-b", priority=0), "q_borrowing", [("n1", 2)])]
    pre = job("in", 2, queue="lq-q", priority=0)
    snap = snapshot([q, qb], [lq("lq-q", "q"), lq("lq-b", "q_borrowing")], [pre], adm, cohorts=cohorts)
    # with fair sharing too: the shares compared are those of c (with the request: not borrowing)
    # and q_borrowing, the children of their lowest common ancestor r
    for cfg, reason in ((NO_FS, "InCohortReclamation"), (FS, "InCohortFairSharing")):
        res = run_cycle(snap, CountingPlacer(nodes(1, gpus=2)), 10.0, cfg)
        assert victims(res) == {"default/admitted2": reason}


BASE_FAIR = PreemptionPolicy(
    within_cluster_queue="LowerPriority",
    reclaim_within_cohort="Any",
    borrow_within_cohort="LowerPriority",
    max_priority_threshold=-3,
)


def fair_queues() -> tuple[list[object], list[object]]:
    # preemption_fair_test.go TestFairPreemptions baseCQs: a, b, c (3 each), preemptible (0)
    cqs = [gpu_cq(n, 3, cohort="all", preemption=BASE_FAIR) for n in ("a", "b", "c")]
    cqs.append(gpu_cq("preemptible", 0, cohort="all"))
    return cqs, [lq(f"lq-{n}", n) for n in ("a", "b", "c", "preemptible")]


def test_fair_sharing_combines_own_queue_victims_with_the_second_strategy() -> None:
    # preemption_fair_test.go TestFairPreemptions "preempt from target and others even if over
    # nominal": a1_low goes first (a has the highest share with the request added), then the first
    # strategy rejects b's workloads; the second one (LessThanInitialShare), with a1_low and a2_low
    # gone, takes b1; filling back returns a2_low
    cqs, lqs = fair_queues()
    adm = [
        running(job("a1_low", 2, queue="lq-a", priority=-1), "a", [("n1", 2)]),
        running(job("a2_low", 1, queue="lq-a", priority=-1), "a", [("n1", 1)]),
        running(job("b1", 3, queue="lq-b"), "b", [("n1", 3)]),
        running(job("b2", 3, queue="lq-b"), "b", [("n1", 3)]),
    ]
    pre = job("a_incoming", 4, queue="lq-a")
    res = run_cycle(snapshot(cqs, lqs, [pre], adm), CountingPlacer(nodes(1, gpus=9)), 10.0, FS)  # type: ignore[arg-type]
    assert victims(res) == {"default/a1_low": "InClusterQueue", "default/b1": "InCohortFairSharing"}


def test_fair_sharing_reclaim_within_nominal_is_in_cohort_reclamation() -> None:
    # preemption_fair_test.go TestFairPreemptions "reclaim nominal from user using the most": c stays
    # within its nominal quota with the request, so b1 is reclaimed (FairSharingPreemptWithinNominal)
    cqs, lqs = fair_queues()
    adm = [running(job(f"a{i}", 1, queue="lq-a"), "a", [("n1", 1)]) for i in (1, 2, 3)]
    adm += [running(job(f"b{i}", 1, queue="lq-b"), "b", [("n1", 1)]) for i in (1, 2, 3, 4, 5)]
    adm += [running(job("c1", 1, queue="lq-c"), "c", [("n1", 1)])]
    pre = job("c_incoming", 1, queue="lq-c")
    placer = CountingPlacer(nodes(1, gpus=9))
    res = run_cycle(snapshot(cqs, lqs, [pre], adm), placer, 10.0, FS)  # type: ignore[arg-type]
    assert victims(res) == {"default/b1": "InCohortReclamation"}


def test_docs_describe_the_api_flavor_fungibility_values() -> None:
    # issue 17, fix 6: docs/scheduling.md named values the API rejects (Borrow, Preempt)
    import re
    import typing
    from pathlib import Path

    from queueing.api.v1beta1 import FungibilityPolicy

    allowed = set(typing.get_args(FungibilityPolicy))
    text = (Path(__file__).resolve().parents[2] / "docs" / "scheduling.md").read_text()
    used = re.findall(r"`(whenCanBorrow|whenCanPreempt): (\w+)`", text)
    assert {f for f, _ in used} == {"whenCanBorrow", "whenCanPreempt"}
    assert [(f, v) for f, v in used if v not in allowed] == []
