"""Unit tests: quota tree arithmetic (Kueue's semantics), DRS, ordering, requeue, config, placer."""

from __future__ import annotations

from fractions import Fraction

import pytest
from sched_helpers import job, quota

from queueing.scheduling import (
    CohortSpec,
    CountingNode,
    CountingPlacer,
    FlavorSpec,
    Placement,
    PlacementFailure,
)
from queueing.scheduling.config import ConfigError, RequeuingStrategy, SchedulingConfig, parse_duration
from queueing.scheduling.fairshare import dominant_resource_share, weighted_shares
from queueing.scheduling.ordering import alpha_rate, decay_usage, priority_key, weighted_usage
from queueing.scheduling.quota import QuotaTree, cohort_id, cq_id
from queueing.scheduling.requeue import next_requeue
from queueing.scheduling.snapshot import (
    AdmittedWorkload,
    ClusterQueueSpec,
    FlavorQuotas,
    LabelSelector,
    LabelSelectorRequirement,
    ResourceGroup,
    amount,
)

F = Fraction
FR = ("default", "gpu")


def cq(
    name: str, nominal: int, cohort: str | None = "co", b: int | None = None, lend: int | None = None
) -> ClusterQueueSpec:
    g = ResourceGroup(("gpu",), (FlavorQuotas("default", {"gpu": quota(nominal, b, lend)}),))
    return ClusterQueueSpec(name, (g,), cohort=cohort)


def cohort(name: str, own: int = 0, parent: str | None = None, l: int | None = None) -> CohortSpec:  # noqa: E741
    g = ResourceGroup(("gpu",), (FlavorQuotas("default", {"gpu": quota(own, None, l)}),))
    return CohortSpec(name, parent=parent, resource_groups=(g,))


# ---- quota tree ------------------------------------------------------------------------------------


def test_lending_limit_guaranteed_quota_and_usage_bubbling() -> None:
    t = QuotaTree([cq("a", 10), cq("b", 10, lend=4)])
    # b lends only 4: the cohort pool is 10 + 4
    assert t.subtree_of(cohort_id("co"))[FR] == 14
    assert t.available("a", FR) == 14
    assert t.available("b", FR) == 6 + 14
    t.add_usage("b", {FR: F(8)})  # 6 from its guaranteed part, 2 from the pool
    assert t.usage_of(cohort_id("co"))[FR] == 2
    assert t.available("a", FR) == 12
    t.add_usage("a", {FR: F(12)})
    assert t.available("b", FR) == 0
    assert t.available("a", FR) == 0
    t.remove_usage("b", {FR: F(8)})
    assert t.usage_of(cohort_id("co"))[FR] == 12
    assert t.available("b", FR) == 6 + 2
    assert t.violations() == []


def test_borrowing_limit() -> None:
    t = QuotaTree([cq("a", 10, b=2), cq("b", 10)])
    assert t.available("a", FR) == 12
    assert t.potential_available(cq_id("a"), FR) == 12
    t.add_usage("a", {FR: F(11)})
    assert t.available("a", FR) == 1
    assert t.is_borrowing(cq_id("a"))
    assert not t.is_borrowing(cq_id("b"))


def test_queue_without_cohort_has_only_its_nominal() -> None:
    t = QuotaTree([cq("solo", 8, cohort=None, b=100)])
    assert t.available("solo", FR) == 8
    fit = t.fit("solo", {FR: F(9)})
    assert fit.mode == "NoFit"
    assert fit.message() == "insufficient quota for gpu in flavor default, request > maximum capacity (9 > 8)"


def test_fit_modes() -> None:
    t = QuotaTree([cq("a", 8), cq("b", 8)])
    t.add_usage("b", {FR: F(8)})
    t.add_usage("a", {FR: F(4)})
    assert t.fit("a", {FR: F(4)}).mode == "Fit"
    f = t.fit("a", {FR: F(6)})
    assert (f.mode, f.borrows) == ("Preempt", False)
    assert f.message() == "insufficient unused quota for gpu in flavor default, 2 more needed"
    assert t.fit("a", {FR: F(16)}).mode == "Preempt"  # possible if b's work were evicted
    assert t.fit("a", {FR: F(17)}).mode == "NoFit"


def test_hierarchical_cohorts_with_own_quota_and_cohort_lending_limit() -> None:
    t = QuotaTree(
        [cq("x", 3, cohort="c"), cq("y", 0, cohort="root")],
        [cohort("root", own=5), cohort("c", parent="root", l=2)],
    )
    # c keeps 1 of x's 3 for its subtree and lends 2 to root: root pool 5 + 2
    assert t.subtree_of(cohort_id("root"))[FR] == 7
    assert t.available("x", FR) == 8
    assert t.available("y", FR) == 7
    t.add_usage("x", {FR: F(8)})
    assert t.available("y", FR) == 0
    assert t.usage_of(cohort_id("root"))[FR] == 7
    assert t.path("x") == [cohort_id("root"), cohort_id("c"), cq_id("x")]
    assert t.violations() == []


def test_cycle_detection_disables_queues_on_and_below_the_cycle() -> None:
    t = QuotaTree(
        [cq("a", 1, cohort="x"), cq("b", 1, cohort="z"), cq("c", 1, cohort="ok")],
        [CohortSpec("x", parent="y"), CohortSpec("y", parent="x"), CohortSpec("z", parent="x")],
    )
    assert set(t.disabled) == {"a", "b"}
    assert "x -> y -> x" in t.disabled["a"]
    assert t.available("c", FR) == 1


# ---- DRS ------------------------------------------------------------------------------------------


def test_dominant_resource_share_and_weights() -> None:
    specs = [cq("a", 4), cq("b", 4)]
    own = [cohort("co", own=8)]
    t = QuotaTree(specs, own)
    t.add_usage("a", {FR: F(8)})
    d = dominant_resource_share(t, cq_id("a"))
    # borrowed 4 of a lendable pool of 16
    assert (d.ratio, d.borrowing, d.dominant) == (F(1, 4), True, "gpu")
    assert d.value() == 0.25
    assert dominant_resource_share(t, cq_id("b")).key() == (0, 0.0, 0)
    # with a request: b borrowing 2
    assert dominant_resource_share(t, cq_id("b"), {FR: F(6)}).ratio == F(2, 16)
    t2 = QuotaTree(
        [ClusterQueueSpec("a", specs[0].resource_groups, cohort="co", fair_weight=F(2)), specs[1]], own
    )
    t2.add_usage("a", {FR: F(8)})
    assert dominant_resource_share(t2, cq_id("a")).value() == 0.125
    t0 = QuotaTree(
        [ClusterQueueSpec("a", specs[0].resource_groups, cohort="co", fair_weight=F(0)), specs[1]], own
    )
    assert dominant_resource_share(t0, cq_id("a")).value() == 0.0  # not borrowing
    t0.add_usage("a", {FR: F(5)})
    assert dominant_resource_share(t0, cq_id("a")).value() == float("inf")


def test_weighted_shares_of_every_queue_from_the_admitted_usage() -> None:
    specs = [ClusterQueueSpec("a", cq("a", 4).resource_groups, cohort="co", fair_weight=F(2)), cq("b", 4)]
    own = [cohort("co", own=8)]
    admitted = [
        AdmittedWorkload(job("w1", 6, queue="lq-a"), "a", {FR: F(6)}, 0.0),
        AdmittedWorkload(job("w2", 2, queue="lq-a"), "a", {FR: F(2)}, 0.0),
        AdmittedWorkload(job("w3", 1, queue="lq-b"), "b", {FR: F(1)}, 0.0),
        AdmittedWorkload(job("w4", 1, queue="lq-x"), "gone", {FR: F(1)}, 0.0),  # unknown queue: ignored
    ]
    # a borrows 4 of a lendable pool of 16, weight 2 -> 1/8; b is within its nominal quota -> 0
    assert weighted_shares(specs, own, admitted) == {"a": 0.125, "b": 0.0}
    assert weighted_shares(specs, own, []) == {"a": 0.0, "b": 0.0}


# ---- ordering, decayed usage -------------------------------------------------------------------------


def test_priority_key_orders_priority_then_time() -> None:
    wls = [job("a", 1, t=5.0), job("b", 1, priority=2, t=9.0), job("c", 1, t=1.0)]
    assert [w.name for w in sorted(wls, key=priority_key)] == ["b", "c", "a"]


def test_decayed_usage_half_life() -> None:
    assert decay_usage({"gpu": 100.0}, {}, 600, 600) == {"gpu": 50.0}
    assert decay_usage({}, {"gpu": 10.0}, 600, 600) == {"gpu": 5.0}
    got = decay_usage({"gpu": 100.0}, {"gpu": 100.0}, 123, 600)
    assert got["gpu"] == pytest.approx(100.0)
    assert decay_usage({"gpu": 100.0}, {}, 10, 0) == {}
    assert alpha_rate(1200, 600) == 0.75


def test_weighted_usage_resource_weights_and_queue_weight() -> None:
    from queueing.scheduling.config import AdmissionFairSharingConfig

    cfg = AdmissionFairSharingConfig(resource_weights={"cpu": 0.0, "gpu": 2.0})
    assert weighted_usage({"cpu": 100.0, "gpu": 3.0}, cfg, F(2)) == 3.0
    assert weighted_usage({"gpu": 3.0}, cfg, F(0)) == float("inf")


# ---- requeue --------------------------------------------------------------------------------------------


def test_requeue_backoff_doubles_caps_and_deactivates() -> None:
    s = RequeuingStrategy(backoff_base_seconds=10, backoff_max_seconds=35, backoff_limit_count=3)
    got = [next_requeue(n, 100.0, s) for n in range(4)]
    assert [g.requeue_at for g in got[:3]] == [110.0, 120.0, 135.0]
    assert [g.count for g in got[:3]] == [1, 2, 3]
    assert got[3].deactivate and got[3].requeue_at is None
    assert "backoffLimitCount is 3" in got[3].message
    unlimited = RequeuingStrategy(backoff_base_seconds=1, backoff_max_seconds=1e9)
    assert next_requeue(10_000, 0.0, unlimited).requeue_at == 1e9


# ---- config ----------------------------------------------------------------------------------------------


def test_config_defaults_and_kueue_keys() -> None:
    c = SchedulingConfig.from_dict(None)
    assert c.fair_sharing.enable is True
    assert c.fair_sharing.preemption_strategies == ("LessThanOrEqualToFinalShare", "LessThanInitialShare")
    assert c.admission_fair_sharing is None
    c = SchedulingConfig.from_dict(
        {
            "fairSharing": {"enable": False, "preemptionStrategies": ["LessThanInitialShare"]},
            "admissionFairSharing": {
                "usageHalfLifeTime": "168h",
                "usageSamplingInterval": "5m",
                "resourceWeights": {"gpu": 1, "cpu": 0},
            },
            "waitForPodsReady": {
                "requeuingStrategy": {
                    "backoffBaseSeconds": 5,
                    "backoffMaxSeconds": 60,
                    "backoffLimitCount": 2,
                }
            },
        }
    )
    assert not c.fair_sharing.enable
    assert c.admission_fair_sharing is not None
    assert c.admission_fair_sharing.usage_half_life_time == 168 * 3600
    assert c.admission_fair_sharing.usage_sampling_interval == 300
    assert c.wait_for_pods_ready.requeuing_strategy.backoff_limit_count == 2


def test_config_errors_name_the_field() -> None:
    with pytest.raises(ConfigError, match=r"admissionFairSharing.usageHalfLifeTime: .*not a duration"):
        SchedulingConfig.from_dict({"admissionFairSharing": {"usageHalfLifeTime": "soon"}}, "cfg.yaml")
    with pytest.raises(ConfigError, match=r"cfg.yaml: fairSharing.enabel"):
        SchedulingConfig.from_dict({"fairSharing": {"enabel": True}}, "cfg.yaml")
    with pytest.raises(ConfigError, match="preemptionStrategies"):
        SchedulingConfig.from_dict({"fairSharing": {"preemptionStrategies": ["Whatever"]}})


def test_parse_duration() -> None:
    assert parse_duration("1h30m") == 5400
    assert parse_duration("250ms") == 0.25
    assert parse_duration(90) == 90
    with pytest.raises(ValueError):
        parse_duration("5 minutes")


# ---- snapshot helpers ------------------------------------------------------------------------------------


def test_amount_and_selectors() -> None:
    assert amount("1.5Gi") == 1536 * 1024 * 1024
    assert amount("500m") == F(1, 2)
    sel = LabelSelector({"team": "a"}, (LabelSelectorRequirement("tier", "In", ("gold", "silver")),))
    assert sel.matches({"team": "a", "tier": "gold"})
    assert not sel.matches({"team": "a"})
    assert LabelSelector().matches({})


# ---- CountingPlacer ------------------------------------------------------------------------------------


def test_counting_placer_best_fit_and_purity() -> None:
    p = CountingPlacer([CountingNode("n1", 8), CountingNode("n2", 8)])
    s0 = p.initial_state([])
    got = p.place(job("a", 2, pods=3), {"main": 3}, {}, s0)
    assert isinstance(got, Placement)
    assert got.nodes == ("n1", "n1", "n1")  # best fit keeps n2 whole
    s1 = p.add(s0, "default/a", got)
    assert s0.used == {} and s1.used == {"n1": 6}
    big = p.place(job("b", 8), {"main": 1}, {}, s1)
    assert isinstance(big, Placement) and big.nodes == ("n2",)
    s2 = p.remove(s1, "default/a")
    assert s2.used == {"n1": 0} and s1.used == {"n1": 6}


def test_counting_placer_fragmentation_and_explanation() -> None:
    p = CountingPlacer([CountingNode(f"n{i}", 8) for i in range(1, 5)])
    s = p.initial_state([])
    for i in range(1, 5):
        s = p.add(s, f"busy{i}", Placement((f"n{i}",), {"gpu": F(1)}, ((f"n{i}", 1),)))
    got = p.place(job("g", 8, pods=3), {"main": 3}, {}, s)
    assert isinstance(got, PlacementFailure)
    assert got.message == "pod set main: 3 pods x 8 gpu needed, 0 fit; best node n1 has 7 free (1 short)"
    # 7-GPU pods fit one per node
    ok = p.place(job("g7", 7, pods=4), {"main": 4}, {}, s)
    assert isinstance(ok, Placement) and sorted(ok.nodes) == ["n1", "n2", "n3", "n4"]


def test_counting_placer_flavor_labels() -> None:
    p = CountingPlacer([CountingNode("a", 8, {"gpu": "h100"}), CountingNode("b", 8, {"gpu": "h200"})])
    got = p.place(
        job("x", 8), {"main": 1}, {"main": [FlavorSpec("h200", {"gpu": "h200"})]}, p.initial_state([])
    )
    assert isinstance(got, Placement) and got.nodes == ("b",)
    none = p.place(
        job("x", 8), {"main": 1}, {"main": [FlavorSpec("mi300", {"gpu": "mi300"})]}, p.initial_state([])
    )
    assert isinstance(none, PlacementFailure) and "no node matches" in none.message
