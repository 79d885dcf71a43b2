"""Scenario tests for the scheduling cycle with the CountingPlacer (nodes x 8 GPUs)."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

from sched_helpers import (
    LOWER,
    Driver,
    gpu_cq,
    job,
    lq,
    nodes,
    running,
    snapshot,
    used_per_node,
)

from queueing.scheduling import (
    CohortSpec,
    CountingPlacer,
    FlavorQuotas,
    FlavorSpec,
    LabelSelector,
    PreemptionPolicy,
    ResourceGroup,
    SchedulingConfig,
    run_cycle,
)
from queueing.scheduling.config import FairSharingConfig
from queueing.scheduling.snapshot import ClusterQueueSpec, FlavorFungibility, PodSetInfo, Taint, Toleration

F = Fraction
NO_FS = SchedulingConfig(fair_sharing=FairSharingConfig(enable=False))


# ---- acceptance: devices -----------------------------------------------------------------------


def test_gang_fitting_quota_but_not_devices_waits_until_devices_free() -> None:
    placer = CountingPlacer(nodes(4))
    cq = gpu_cq("cq", 32, preemption=LOWER)
    # one GPU busy on each of the 4 nodes: 28 free GPUs, but no node has 8 free
    busy = [running(job(f"busy{i}", 1, priority=5), "cq", [(f"n{i + 1}", 1)]) for i in range(4)]
    base = snapshot([cq], [lq("lq-a", "cq")])
    d = Driver(base, placer, step=1.0)
    for i, b in enumerate(busy):  # they finish at t=10, 20, 30, 40
        d.admitted[b.key] = b
        d.ends[b.key] = 10.0 * (i + 1)
    assert sorted(used_per_node(placer, d.admitted.values()).values()) == [1, 1, 1, 1]
    gang = job("gang", 8, pods=3, t=1.0)
    d.submit(gang, duration=5.0)
    d.run_until(2)
    res = d.results[-1]
    assert gang.key not in d.admitted
    reason = res.pending[gang.key]
    assert reason.reason == "Pending"
    assert "couldn't place the gang" in reason.message
    assert "3 pods x 8 gpu needed, 0 fit" in reason.message
    assert "7 free (1 short)" in reason.message
    assert not res.preemptions  # the busy ones have higher priority: nothing to preempt
    d.run_until(60)
    # three nodes must be fully free: after busy0, busy1, busy2 finished (t=30)
    assert d.when("Admitted", gang.key) == 30.0
    assert d.when("Evicted", gang.key) is None


def test_gang_is_never_partially_admitted() -> None:
    placer = CountingPlacer(nodes(3))
    cq = gpu_cq("cq", 100)
    blocker = running(job("blocker", 8), "cq", [("n3", 8)])
    gang = job("gang", 8, pods=3)
    snap = snapshot([cq], [lq("lq-a", "cq")], [gang], [blocker])
    res = run_cycle(snap, placer, 0.0)
    assert res.admissions == ()
    assert "2 fit" in res.pending[gang.key].message
    # a smaller job can still use the free nodes in the same cycle (BestEffortFIFO)
    small = job("small", 8, pods=2, t=5.0)
    res = run_cycle(snapshot([cq], [lq("lq-a", "cq")], [gang, small], [blocker]), placer, 0.0)
    assert [a.key for a in res.admissions] == [small.key]
    assert len(res.admissions[0].assignment.placement.nodes) == 2


def test_partial_admission_reduces_count_down_to_min_count() -> None:
    placer = CountingPlacer(nodes(4))
    cq = gpu_cq("cq", 24)
    wl = job("elastic", 8, pods=4, min_count=2)
    res = run_cycle(snapshot([cq], [lq("lq-a", "cq")], [wl]), placer, 0.0)
    (adm,) = res.admissions
    assert adm.partial
    assert adm.assignment.counts == {"main": 3}  # quota 24 = 3 x 8
    assert adm.assignment.usage == {("default", "gpu"): F(24)}
    assert len(set(adm.assignment.placement.nodes)) == 3
    # below minCount it is not admitted at all
    wl2 = job("elastic2", 8, pods=4, min_count=4)
    res = run_cycle(snapshot([cq], [lq("lq-a", "cq")], [wl2]), placer, 0.0)
    assert res.admissions == ()
    assert "request > maximum capacity (32 > 24)" in res.pending[wl2.key].message


# ---- acceptance: preemption ------------------------------------------------------------------------


def test_priority_preemption_evicts_one_8gpu_victim_not_many_small_ones() -> None:
    placer = CountingPlacer(nodes(4))
    cq = gpu_cq("cq", 32, preemption=LOWER)
    big = running(job("big", 8, priority=5), "cq", [("n1", 8)], t=0.0)
    smalls = [
        running(job(f"small-{n}-{i}", 2, priority=1), "cq", [(n, 2)], t=10.0 + i)
        for n in ("n2", "n3", "n4")
        for i in range(4)
    ]
    pre = job("urgent", 8, priority=10)
    res = run_cycle(snapshot([cq], [lq("lq-a", "cq")], [pre], [big, *smalls]), placer, 100.0, NO_FS)
    assert res.admissions == ()
    (plan,) = res.preemptions
    assert [v.key for v in plan.victims] == [big.workload.key]
    assert plan.victims[0].reason == "InClusterQueue"
    assert plan.assignment.placement.nodes == ("n1",)
    assert res.pending[pre.key].reason == "Preempting"


def test_never_evicts_when_preemptor_would_still_not_fit() -> None:
    placer = CountingPlacer(nodes(2))
    cq = gpu_cq("cq", 16, preemption=LOWER)
    low = running(job("low", 8, priority=1), "cq", [("n1", 8)])
    high = running(job("high", 8, priority=20), "cq", [("n2", 8)])
    pre = job("gang", 8, pods=2, priority=10)  # needs both nodes; only one is preemptible
    res = run_cycle(snapshot([cq], [lq("lq-a", "cq")], [pre], [low, high]), placer, 0.0)
    assert res.preemptions == ()
    assert res.pending[pre.key].reason == "Pending"


def test_gang_victim_is_evicted_whole() -> None:
    placer = CountingPlacer(nodes(2))
    cq = gpu_cq("cq", 16, preemption=LOWER)
    victim = running(job("gang-low", 4, pods=2, priority=1), "cq", [("n1", 4), ("n2", 4)])
    pre = job("urgent", 8, priority=10)
    res = run_cycle(snapshot([cq], [lq("lq-a", "cq")], [pre], [victim]), placer, 0.0)
    (plan,) = res.preemptions
    assert [v.key for v in plan.victims] == [victim.key]  # the whole gang, one unit


def test_reclaim_within_cohort_evicts_a_borrower() -> None:
    placer = CountingPlacer(nodes(2))
    a = gpu_cq("a", 8, cohort="co", preemption=PreemptionPolicy(reclaim_within_cohort="Any"))
    b = gpu_cq("b", 8, cohort="co")
    b1 = running(job("b1", 8, queue="lq-b", priority=100), "b", [("n1", 8)], t=1.0)
    b2 = running(job("b2", 8, queue="lq-b", priority=100), "b", [("n2", 8)], t=2.0)  # borrowed from a
    pre = job("a1", 8, queue="lq-a")
    # a1 fits within a's nominal quota: with fair sharing too the victim is reclaimed, not taken by
    # a fair-sharing strategy (Kueue's FairSharingPreemptWithinNominal)
    for cfg, reason in ((NO_FS, "InCohortReclamation"), (SchedulingConfig(), "InCohortReclamation")):
        snap = snapshot([a, b], [lq("lq-a", "a"), lq("lq-b", "b")], [pre], [b1, b2])
        res = run_cycle(snap, placer, 10.0, cfg)
        (plan,) = res.preemptions
        assert len(plan.victims) == 1
        assert plan.victims[0].cluster_queue == "b"
        assert plan.victims[0].reason == reason
        # the most recently admitted of b's (equal priority) goes
        assert plan.victims[0].key == b2.key


def test_a_preemptor_gets_what_its_victims_free_before_anyone_else() -> None:
    """Devices are shared across cohorts: without the nomination an older workload of another
    cohort takes the devices freed for the preemptor, and the victim was evicted for nothing."""
    placer = CountingPlacer(nodes(1))
    a = gpu_cq("a", 4, cohort="co", preemption=PreemptionPolicy(reclaim_within_cohort="Any"))
    b = gpu_cq("b", 4, cohort="co", borrowing=4)
    other = gpu_cq("other", 8)  # no cohort, its own quota, the same node
    queues = [lq("lq-a", "a"), lq("lq-b", "b"), lq("lq-o", "other")]
    victim = running(job("v", 8, queue="lq-b"), "b", [("n1", 8)])  # b borrows a's 4
    older = job("older", 8, queue="lq-o", t=0.0)
    pre = job("pre", 4, queue="lq-a", t=5.0)
    for cfg in (NO_FS, SchedulingConfig()):
        res = run_cycle(snapshot([a, b, other], queues, [older, pre], [victim]), placer, 10.0, cfg)
        (plan,) = res.preemptions
        assert plan.preemptor == pre.key and [v.key for v in plan.victims] == [victim.key]
        assert res.pending[pre.key].reason == "Preempting"
        assert res.pending[older.key].reason == "Pending"  # no room, nothing it may preempt
        # the victim is gone: the older workload would come first and take the whole node ...
        after = snapshot([a, b, other], queues, [older, pre], [])
        res = run_cycle(after, placer, 10.0, cfg)
        assert [x.key for x in res.admissions] == [older.key]
        # ... unless the preemptor is nominated (its last reason was Preempting)
        res = run_cycle(replace(after, nominated=frozenset({pre.key})), placer, 10.0, cfg)
        assert [x.key for x in res.admissions] == [pre.key]
        assert "couldn't place the gang" in res.pending[older.key].message


def test_no_reclaim_from_queue_within_its_nominal_quota() -> None:
    placer = CountingPlacer(nodes(2))
    a = gpu_cq("a", 8, cohort="co", preemption=PreemptionPolicy(reclaim_within_cohort="Any"))
    b = gpu_cq("b", 8, cohort="co")
    a1 = running(job("a1", 8, queue="lq-a"), "a", [("n1", 8)])
    b1 = running(job("b1", 8, queue="lq-b"), "b", [("n2", 8)])
    pre = job("a2", 8, queue="lq-a", priority=50)
    res = run_cycle(snapshot([a, b], [lq("lq-a", "a"), lq("lq-b", "b")], [pre], [a1, b1]), placer, 0.0)
    assert res.preemptions == ()


def test_within_cluster_queue_policies() -> None:
    placer = CountingPlacer(nodes(1))
    victim = running(job("old", 8, priority=5, t=10.0), "cq", [("n1", 8)])
    same_newer = job("new", 8, priority=5, t=1.0)  # created before the running one
    for policy, expect in (("Never", 0), ("LowerPriority", 0), ("LowerOrNewerEqualPriority", 1)):
        cq = gpu_cq("cq", 8, preemption=PreemptionPolicy(within_cluster_queue=policy))  # type: ignore[arg-type]
        res = run_cycle(snapshot([cq], [lq("lq-a", "cq")], [same_newer], [victim]), placer, 20.0)
        assert len(res.preemptions) == expect, policy


def test_borrow_within_cohort_respects_max_priority_threshold() -> None:
    placer = CountingPlacer(nodes(3))
    pol = PreemptionPolicy(
        reclaim_within_cohort="Any", borrow_within_cohort="LowerPriority", max_priority_threshold=10
    )
    a = gpu_cq("a", 8, cohort="co", preemption=pol)
    b = gpu_cq("b", 8, cohort="co")
    c = gpu_cq("c", 8, cohort="co")  # idle: b borrows its quota
    a1 = running(job("a1", 8, queue="lq-a"), "a", [("n1", 8)])
    pre = job("a2", 8, queue="lq-a", priority=100)  # a would have to borrow to run it
    for b_priority, expect in ((5, 1), (50, 0)):
        bs = [
            running(job(f"b{i}", 8, queue="lq-b", priority=b_priority), "b", [(f"n{i + 2}", 8)], t=i)
            for i in range(2)
        ]
        snap = snapshot([a, b, c], [lq("lq-a", "a"), lq("lq-b", "b")], [pre], [a1, *bs])
        res = run_cycle(snap, placer, 10.0, NO_FS)
        assert len(res.preemptions) == expect, b_priority
        if expect:
            assert res.preemptions[0].victims[0].reason == "InCohortReclaimWhileBorrowing"
            assert [v.key for v in res.preemptions[0].victims] == ["default/b1"]


# ---- quota, cohorts --------------------------------------------------------------------------------


def test_pending_reason_names_resource_and_shortfall() -> None:
    placer = CountingPlacer(nodes(4))
    cq = gpu_cq("cq", 16, flavor="h200", flavors=None) if False else gpu_cq("cq", 16, flavor="h200")
    r1 = running(job("r1", 8), "cq", [("n1", 8)], flavor="h200")
    pend = job("p", 8, pods=2)
    res = run_cycle(
        snapshot([cq], [lq("lq-a", "cq")], [pend], [r1], flavors=[FlavorSpec("h200")]), placer, 0.0
    )
    assert res.pending[pend.key].message == "insufficient unused quota for gpu in flavor h200, 8 more needed"
    too_big = job("huge", 8, pods=3)
    res = run_cycle(snapshot([cq], [lq("lq-a", "cq")], [too_big], flavors=[FlavorSpec("h200")]), placer, 0.0)
    assert "request > maximum capacity (24 > 16)" in res.pending[too_big.key].message


def test_borrowing_limit_caps_borrowing() -> None:
    placer = CountingPlacer(nodes(8))
    a = gpu_cq("a", 8, cohort="co", borrowing=8)
    b = gpu_cq("b", 40, cohort="co")
    wls = [job(f"a{i}", 8, queue="lq-a", t=i) for i in range(4)]
    res = run_cycle(snapshot([a, b], [lq("lq-a", "a"), lq("lq-b", "b")], wls), placer, 0.0)
    assert [x.key for x in res.admissions] == ["default/a0", "default/a1"]  # 8 nominal + 8 borrowed


def test_lending_limit_keeps_guaranteed_quota() -> None:
    placer = CountingPlacer(nodes(8))
    a = gpu_cq("a", 8, cohort="co")
    b = gpu_cq("b", 24, cohort="co", lending=8)  # 16 of b's 24 are never lent
    wls = [job(f"a{i}", 8, queue="lq-a", t=i) for i in range(4)]
    res = run_cycle(snapshot([a, b], [lq("lq-a", "a"), lq("lq-b", "b")], wls), placer, 0.0)
    assert len(res.admissions) == 2  # 8 own + 8 lent by b
    bw = [job(f"b{i}", 8, queue="lq-b", t=i) for i in range(3)]
    admitted = [x.admitted(0.0) for x in res.admissions]
    res2 = run_cycle(snapshot([a, b], [lq("lq-a", "a"), lq("lq-b", "b")], bw, admitted), placer, 1.0)
    # b's guaranteed 16 (nominal - lendingLimit) stay usable although a borrowed all that b lends;
    # the lent 8 would have to be reclaimed
    assert [x.key for x in res2.admissions] == ["default/b0", "default/b1"]
    assert (
        res2.pending["default/b2"].message
        == "insufficient unused quota for gpu in flavor default, 8 more needed"
    )


def test_hierarchical_cohort_with_own_quota() -> None:
    placer = CountingPlacer(nodes(8))
    root_quota = (ResourceGroup(("gpu",), (FlavorQuotas("default", {"gpu": _q(16)}),)),)
    cohorts = [CohortSpec("root", resource_groups=root_quota), CohortSpec("team", parent="root")]
    a = gpu_cq("a", 0, cohort="team")
    wls = [job(f"a{i}", 8, queue="lq-a", t=i) for i in range(3)]
    res = run_cycle(snapshot([a], [lq("lq-a", "a")], wls, cohorts=cohorts), placer, 0.0)
    assert len(res.admissions) == 2  # the root's own 16 GPUs
    assert "8 more needed" in res.pending["default/a2"].message


def test_cycle_in_cohort_tree_disables_members() -> None:
    placer = CountingPlacer(nodes(1))
    cohorts = [CohortSpec("x", parent="y"), CohortSpec("y", parent="x")]
    a = gpu_cq("a", 8, cohort="x")
    ok = gpu_cq("ok", 8)
    wl = job("w", 1, queue="lq-a")
    wl2 = job("w2", 1, queue="lq-ok")
    res = run_cycle(
        snapshot([a, ok], [lq("lq-a", "a"), lq("lq-ok", "ok")], [wl, wl2], cohorts=cohorts), placer, 0.0
    )
    assert "cycle" in res.inactive_cluster_queues["a"]
    assert "x -> y -> x" in res.inactive_cluster_queues["a"]
    assert res.pending[wl.key].reason == "Inadmissible"
    assert [x.key for x in res.admissions] == [wl2.key]


# ---- queues --------------------------------------------------------------------------------------


def test_more_than_one_head_per_cluster_queue_per_cycle() -> None:
    placer = CountingPlacer(nodes(4))
    cq = gpu_cq("cq", 32)
    wls = [job(f"w{i}", 8, t=i) for i in range(4)]
    res = run_cycle(snapshot([cq], [lq("lq-a", "cq")], wls), placer, 0.0)
    assert [x.key for x in res.admissions] == [w.key for w in wls]
    assert sorted(n for x in res.admissions for n in x.assignment.placement.nodes) == ["n1", "n2", "n3", "n4"]


def test_priority_then_creation_order() -> None:
    placer = CountingPlacer(nodes(1))
    cq = gpu_cq("cq", 8)
    wls = [
        job("old-low", 8, t=0.0),
        job("new-high", 8, priority=5, t=5.0),
        job("old-high", 8, priority=5, t=1.0),
    ]
    res = run_cycle(snapshot([cq], [lq("lq-a", "cq")], wls), placer, 10.0)
    assert [x.key for x in res.admissions] == ["default/old-high"]


def test_strict_fifo_blocks_behind_head_best_effort_skips() -> None:
    placer = CountingPlacer(nodes(2))
    wls = [job("big", 8, pods=3, t=0.0), job("small", 8, t=1.0)]
    for strategy, expect in (("StrictFIFO", []), ("BestEffortFIFO", ["default/small"])):
        cq = gpu_cq("cq", 100, queueing_strategy=strategy)
        res = run_cycle(snapshot([cq], [lq("lq-a", "cq")], wls), placer, 0.0)
        assert [x.key for x in res.admissions] == expect, strategy
        if strategy == "StrictFIFO":
            assert "waiting behind default/big" in res.pending["default/small"].message


def test_stop_policy_hold_and_drain() -> None:
    placer = CountingPlacer(nodes(2))
    r = running(job("r", 8), "cq", [("n1", 8)])
    wl = job("w", 8, t=1.0)
    for policy in ("Hold", "HoldAndDrain"):
        cq = gpu_cq("cq", 16, stop_policy=policy)
        res = run_cycle(snapshot([cq], [lq("lq-a", "cq")], [wl], [r]), placer, 0.0)
        assert res.admissions == ()
        assert "Stopped" in res.inactive_cluster_queues["cq"]
        assert [e.key for e in res.evictions] == ([r.key] if policy == "HoldAndDrain" else [])
    # a stopped LocalQueue
    cq = gpu_cq("cq", 16)
    res = run_cycle(snapshot([cq], [lq("lq-a", "cq", stop_policy="Hold")], [wl], [r]), placer, 0.0)
    assert res.admissions == () and "is stopped" in res.pending[wl.key].message


def test_namespace_selector() -> None:
    placer = CountingPlacer(nodes(1))
    cq = gpu_cq("cq", 8, namespace_selector=LabelSelector({"team": "a"}))
    wl_a = job("wa", 1, ns="ns-a")
    wl_b = job("wb", 1, ns="ns-b")
    snap = snapshot(
        [cq],
        [lq("lq-a", "cq", ns="ns-a"), lq("lq-a", "cq", ns="ns-b")],
        [wl_a, wl_b],
        namespaces={"ns-a": {"team": "a"}, "ns-b": {"team": "b"}},
    )
    res = run_cycle(snap, placer, 0.0)
    assert [x.key for x in res.admissions] == ["ns-a/wa"]
    assert "doesn't match the selector" in res.pending["ns-b/wb"].message


def test_requeue_backoff_and_deactivation_hold_workloads() -> None:
    from dataclasses import replace

    placer = CountingPlacer(nodes(1))
    cq = gpu_cq("cq", 8)
    wl = replace(job("w", 1), backoff_until=50.0)
    res = run_cycle(snapshot([cq], [lq("lq-a", "cq")], [wl]), placer, 10.0)
    assert res.admissions == () and res.pending[wl.key].reason == "Backoff"
    res = run_cycle(snapshot([cq], [lq("lq-a", "cq")], [wl]), placer, 50.0)
    assert len(res.admissions) == 1
    res = run_cycle(snapshot([cq], [lq("lq-a", "cq")], [replace(wl, active=False)]), placer, 60.0)
    assert res.pending[wl.key].reason == "Deactivated"


# ---- flavors -----------------------------------------------------------------------------------------


def _two_flavor_cq(fung: FlavorFungibility | None = None, cohort: str | None = None) -> ClusterQueueSpec:
    group = ResourceGroup(
        ("gpu",),
        (
            FlavorQuotas("h200", {"gpu": _q(8)}),
            FlavorQuotas("h100", {"gpu": _q(8)}),
        ),
    )
    return ClusterQueueSpec("cq", (group,), cohort=cohort, flavor_fungibility=fung or FlavorFungibility())


def test_flavors_restrict_nodes_and_next_flavor_is_tried() -> None:
    ns = nodes(1, prefix="h200-", labels={"gpu": "h200"}) + nodes(1, prefix="h100-", labels={"gpu": "h100"})
    placer = CountingPlacer(ns)
    flavors = [FlavorSpec("h200", {"gpu": "h200"}), FlavorSpec("h100", {"gpu": "h100"})]
    wls = [job("w1", 8, t=0), job("w2", 8, t=1), job("w3", 8, t=2)]
    res = run_cycle(snapshot([_two_flavor_cq()], [lq("lq-a", "cq")], wls, flavors=flavors), placer, 0.0)
    got = {x.key: (dict(x.assignment.usage), x.assignment.placement.nodes) for x in res.admissions}
    assert got["default/w1"] == ({("h200", "gpu"): 8}, ("h200-1",))
    assert got["default/w2"] == ({("h100", "gpu"): 8}, ("h100-1",))
    assert "default/w3" in res.pending


def test_flavor_taints_need_tolerations() -> None:
    ns = nodes(1, prefix="spot-", labels={"pool": "spot"}, taints=(Taint("spot", "true"),))
    placer = CountingPlacer(ns)
    flavors = [FlavorSpec("spot", {"pool": "spot"}, (Taint("spot", "true"),))]
    cq = gpu_cq("cq", 8, flavor="spot")
    plain = job("plain", 1)
    tol = PodSetInfo(
        "main", 1, device_requests={"gpu": F(1)}, tolerations=(Toleration("spot", "Equal", "true"),)
    )
    tolerant = job("tolerant", 1)
    from dataclasses import replace

    tolerant = replace(tolerant, pod_sets=(tol,))
    res = run_cycle(snapshot([cq], [lq("lq-a", "cq")], [plain, tolerant], flavors=flavors), placer, 0.0)
    assert [x.key for x in res.admissions] == ["default/tolerant"]
    assert "untolerated taint spot=true:NoSchedule" in res.pending["default/plain"].message


def test_fungibility_when_can_borrow_try_next_flavor() -> None:
    placer = CountingPlacer(nodes(4))
    other = gpu_cq("other", 8, cohort="co", flavor="h200")
    flavors = [FlavorSpec("h200"), FlavorSpec("h100")]
    r = running(job("r", 8), "cq", [("n1", 8)], flavor="h200")  # cq's h200 nominal is used up
    wl = job("w", 8, t=1)
    for fung, flavor in (
        (FlavorFungibility(when_can_borrow="Borrow"), "h200"),
        (FlavorFungibility(when_can_borrow="TryNextFlavor"), "h100"),
    ):
        cq = _two_flavor_cq(fung, cohort="co")
        res = run_cycle(
            snapshot([cq, other], [lq("lq-a", "cq")], [wl], [r], flavors=flavors), placer, 0.0, NO_FS
        )
        (adm,) = res.admissions
        assert list(adm.assignment.usage) == [(flavor, "gpu")], fung


def test_device_capacity_charges_are_quota() -> None:
    from queueing.scheduling import CountingNode

    placer = CountingPlacer([CountingNode("n1", 8, capacity={"memory": F(141)})])
    group = ResourceGroup(
        ("gpu", "gpu/memory"), (FlavorQuotas("default", {"gpu": _q(8), "gpu/memory": _q(300)}),)
    )
    cq = ClusterQueueSpec("cq", (group,))
    wls = [job("a", 2, t=0), job("b", 1, t=1)]
    res = run_cycle(snapshot([cq], [lq("lq-a", "cq")], wls), placer, 0.0)
    (adm,) = res.admissions
    assert adm.assignment.usage == {("default", "gpu"): 2, ("default", "gpu/memory"): 282}
    assert (
        res.pending["default/b"].message
        == "insufficient unused quota for gpu/memory in flavor default, 123 more needed"
    )


def test_uncovered_resource_is_inadmissible() -> None:
    placer = CountingPlacer(nodes(1))
    cq = gpu_cq("cq", 8)
    wl = job("w", 1, resource="fpga")
    res = run_cycle(snapshot([cq], [lq("lq-a", "cq")], [wl]), placer, 0.0)
    assert res.pending[wl.key].message == "resource fpga unavailable in ClusterQueue cq"


# ---- fair sharing --------------------------------------------------------------------------------


def test_fair_sharing_weights_1_to_3_give_1_to_3_device_seconds() -> None:
    placer = CountingPlacer(nodes(2))  # 16 GPUs
    pool = (ResourceGroup(("gpu",), (FlavorQuotas("default", {"gpu": _q(16)}),)),)
    a = gpu_cq("a", 0, cohort="co", fair_weight=F(1))
    b = gpu_cq("b", 0, cohort="co", fair_weight=F(3))
    base = snapshot(
        [a, b], [lq("lq-a", "a"), lq("lq-b", "b")], cohorts=[CohortSpec("co", resource_groups=pool)]
    )
    d = Driver(base, placer, step=1.0)
    for i in range(400):  # a deep backlog in both queues, 1-GPU jobs of 10 s
        d.submit(job(f"a{i}", 1, queue="lq-a", t=0.0), 10.0)
        d.submit(job(f"b{i}", 1, queue="lq-b", t=0.0), 10.0)
    d.run_until(200)
    ratio = d.device_seconds["b"] / d.device_seconds["a"]
    assert 2.7 <= ratio <= 3.3, d.device_seconds
    assert d.device_seconds["a"] + d.device_seconds["b"] == 16 * 200  # never idle under backlog


def test_fair_sharing_preemption_takes_from_highest_share() -> None:
    placer = CountingPlacer(nodes(3))
    pool = (ResourceGroup(("gpu",), (FlavorQuotas("default", {"gpu": _q(24)}),)),)
    pol = PreemptionPolicy(reclaim_within_cohort="Any")
    a = gpu_cq("a", 0, cohort="co", preemption=pol)
    b = gpu_cq("b", 0, cohort="co")
    c = gpu_cq("c", 0, cohort="co")
    b_run = [running(job(f"b{i}", 8, queue="lq-b"), "b", [(f"n{i + 1}", 8)], t=i) for i in range(2)]
    c_run = [running(job("c0", 8, queue="lq-c"), "c", [("n3", 8)])]
    pre = job("a0", 8, queue="lq-a")
    snap = snapshot(
        [a, b, c],
        [lq("lq-a", "a"), lq("lq-b", "b"), lq("lq-c", "c")],
        [pre],
        [*b_run, *c_run],
        cohorts=[CohortSpec("co", resource_groups=pool)],
    )
    res = run_cycle(snap, placer, 10.0)
    (plan,) = res.preemptions
    # b holds 16 of 24 (share 2/3), c 8 (1/3): b gives; a ends at 1/3 <= b's final 1/3
    assert [v.key for v in plan.victims] == ["default/b1"]
    assert plan.victims[0].reason == "InCohortFairSharing"
    # c alone (share 1/3) is not preempted by LessThanOrEqualToFinalShare: a's 1/3 > c's final 0,
    # and not by LessThanInitialShare: a's 1/3 is not < c's 1/3
    snap2 = snapshot(
        [a, c],
        [lq("lq-a", "a"), lq("lq-c", "c")],
        [pre],
        [
            running(job("c0", 8, queue="lq-c"), "c", [("n3", 8)]),
            running(job("c1", 8, queue="lq-c"), "c", [("n1", 8)]),
            running(job("c2", 8, queue="lq-c"), "c", [("n2", 8)]),
        ],
        cohorts=[CohortSpec("co", resource_groups=pool)],
    )
    res2 = run_cycle(snap2, placer, 10.0)
    (plan2,) = res2.preemptions  # c holds all 24 (share 1): one of c's goes
    assert len(plan2.victims) == 1


def test_zero_weight_queue_goes_last() -> None:
    placer = CountingPlacer(nodes(1))
    pool = (ResourceGroup(("gpu",), (FlavorQuotas("default", {"gpu": _q(8)}),)),)
    a = gpu_cq("a", 0, cohort="co", fair_weight=F(0))
    b = gpu_cq("b", 0, cohort="co")
    wls = [job("a0", 8, queue="lq-a", priority=100, t=0), job("b0", 8, queue="lq-b", t=5)]
    snap = snapshot(
        [a, b], [lq("lq-a", "a"), lq("lq-b", "b")], wls, cohorts=[CohortSpec("co", resource_groups=pool)]
    )
    res = run_cycle(snap, placer, 10.0)
    assert [x.key for x in res.admissions] == ["default/b0"]


def test_admission_fair_sharing_prefers_local_queue_with_less_usage() -> None:
    from queueing.scheduling.config import AdmissionFairSharingConfig

    placer = CountingPlacer(nodes(1))
    cq = gpu_cq("cq", 8, admission_fair_sharing=True)
    wls = [
        job("x0", 4, queue="lq-x", priority=10, t=0),
        job("y0", 4, queue="lq-y", t=5),
        job("x1", 4, queue="lq-x", t=1),
    ]
    cfg = SchedulingConfig(admission_fair_sharing=AdmissionFairSharingConfig(usage_half_life_time=600))
    snap = snapshot(
        [cq],
        [lq("lq-x", "cq"), lq("lq-y", "cq")],
        wls,
        local_queue_usage={"default/lq-x": {"gpu": 20.0}, "default/lq-y": {"gpu": 2.0}},
    )
    res = run_cycle(snap, placer, 10.0, cfg)
    # y has used less: its workload goes first despite lower priority; then x0 (priority)
    assert [x.key for x in res.admissions] == ["default/y0", "default/x0"]
    assert res.local_queue_penalties["default/lq-y"]["gpu"] > 0
    # without admission fair sharing: priority order
    res = run_cycle(snap, placer, 10.0)
    assert [x.key for x in res.admissions] == ["default/x0", "default/x1"]


def _q(n: int) -> object:
    from sched_helpers import quota

    return quota(n)


def test_cohort_level_admission_fair_sharing_orders_queues_by_decayed_usage() -> None:
    from queueing.scheduling.config import AdmissionFairSharingConfig

    placer = CountingPlacer(nodes(1))
    pool = (ResourceGroup(("gpu",), (FlavorQuotas("default", {"gpu": _q(8)}),)),)
    a = gpu_cq("a", 0, cohort="co")
    b = gpu_cq("b", 0, cohort="co")
    wls = [job("a0", 8, queue="lq-a", priority=9, t=0), job("b0", 8, queue="lq-b", t=5)]
    kw = {
        "cohorts": [CohortSpec("co", resource_groups=pool)],
        "cluster_queue_usage": {"a": {"gpu": 100.0}, "b": {"gpu": 1.0}},
    }
    snap = snapshot([a, b], [lq("lq-a", "a"), lq("lq-b", "b")], wls, **kw)
    off = SchedulingConfig(admission_fair_sharing=AdmissionFairSharingConfig())
    on = SchedulingConfig(admission_fair_sharing=AdmissionFairSharingConfig(cohort_level=True))
    assert [x.key for x in run_cycle(snap, placer, 10.0, off).admissions] == ["default/a0"]  # priority
    res = run_cycle(snap, placer, 10.0, on)
    assert [x.key for x in res.admissions] == ["default/b0"]  # b used less recently
    assert res.cluster_queue_penalties["b"]["gpu"] > 0


def test_preemptor_reservation_is_not_taken_by_later_workloads_in_the_cycle() -> None:
    placer = CountingPlacer(nodes(2))
    cq = gpu_cq("cq", 16, preemption=LOWER)
    low = running(job("low", 8, priority=1), "cq", [("n1", 8)])
    mid = running(job("mid", 4, priority=50), "cq", [("n2", 4)])
    urgent = job("urgent", 8, priority=100, t=0)
    filler = job("filler", 4, priority=60, t=1)  # fits in n2's free 4 GPUs
    res = run_cycle(snapshot([cq], [lq("lq-a", "cq")], [urgent, filler], [low, mid]), placer, 5.0)
    (plan,) = res.preemptions
    assert [v.key for v in plan.victims] == ["default/low"]
    # quota: 8 (low, still running) + 4 (mid) + 8 reserved for urgent = 20 > 16: filler must wait
    assert res.admissions == ()
    filler_reason = res.pending["default/filler"]
    assert filler_reason.reason == "Pending"
    assert filler_reason.message == "insufficient unused quota for gpu in flavor default, 4 more needed"


def test_workloads_being_evicted_count_as_gone_no_new_victims() -> None:
    from dataclasses import replace

    placer = CountingPlacer(nodes(1))
    cq = gpu_cq("cq", 8, preemption=LOWER)
    leaving = replace(running(job("leaving", 8, priority=1), "cq", [("n1", 8)]), evicting=True)
    other_low = running(job("other", 0, priority=0), "cq", [])
    pre = job("urgent", 8, priority=10)
    res = run_cycle(snapshot([cq], [lq("lq-a", "cq")], [pre], [leaving, other_low]), placer, 0.0)
    (plan,) = res.preemptions
    assert plan.victims == ()
    assert plan.waiting_for == (leaving.key,)
    assert res.pending[pre.key].message == "waiting for the eviction of 1 workload(s) to finish"
    assert res.admissions == ()


def test_queue_without_cohort_is_ordered_with_cohort_queues_by_priority() -> None:
    placer = CountingPlacer(nodes(1))
    pool = (ResourceGroup(("gpu",), (FlavorQuotas("default", {"gpu": _q(8)}),)),)
    solo = gpu_cq("solo", 8)
    member = gpu_cq("member", 8, cohort="co")  # within nominal: share 0, like the solo queue
    wls = [job("s", 8, queue="lq-s", priority=1, t=0), job("m", 8, queue="lq-m", priority=9, t=5)]
    snap = snapshot(
        [solo, member],
        [lq("lq-s", "solo"), lq("lq-m", "member")],
        wls,
        cohorts=[CohortSpec("co", resource_groups=pool)],
    )
    # both fit by quota, the devices (one node) go to the higher priority
    res = run_cycle(snap, placer, 10.0)
    assert [x.key for x in res.admissions] == ["default/m"]
    assert "0 fit" in res.pending["default/s"].message


def test_fungibility_when_can_preempt() -> None:
    from dataclasses import replace

    placer = CountingPlacer(nodes(2))
    flavors = [FlavorSpec("h200"), FlavorSpec("h100")]
    low = running(job("low", 8, priority=1), "cq", [("n1", 8)], flavor="h200")
    wl = job("w", 8, priority=10, t=1)
    for when, expect in (("TryNextFlavor", "admitted on h100"), ("Preempt", "preempts in h200")):
        cq = replace(_two_flavor_cq(FlavorFungibility(when_can_preempt=when)), preemption=LOWER)  # type: ignore[arg-type]
        res = run_cycle(snapshot([cq], [lq("lq-a", "cq")], [wl], [low], flavors=flavors), placer, 0.0)
        if expect == "admitted on h100":
            (adm,) = res.admissions
            assert list(adm.assignment.usage) == [("h100", "gpu")]
        else:
            (plan,) = res.preemptions
            assert [v.key for v in plan.victims] == [low.key]
            assert list(plan.assignment.usage) == [("h200", "gpu")]
