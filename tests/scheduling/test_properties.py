"""Property tests: random cohorts, queues and workloads driven over virtual time.

After every cycle (admissions and evictions executed) the admitted set must satisfy:
usage <= nominal + borrowingLimit per ClusterQueue, lending limits hold (the others never use a
member's guaranteed quota), no GPU is double-booked, gangs are whole (all pods placed, count
between minCount and count) and the charged usage is what the plan places. Every cycle is also run
from a ``Backlog`` kept in step between cycles, which must decide exactly the same.
"""

from __future__ import annotations

from fractions import Fraction

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sched_helpers import Driver, gpu_cq, job, lq, nodes, snapshot

from queueing.scheduling import CohortSpec, CountingPlacer, PreemptionPolicy, SchedulingConfig
from queueing.scheduling.backlog import Backlog
from queueing.scheduling.config import FairSharingConfig
from queueing.scheduling.quota import QuotaTree
from queueing.scheduling.snapshot import ClusterQueueSpec, FlavorQuotas, ResourceGroup, ResourceQuota

F = Fraction


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Driver, list[ClusterQueueSpec], list[CohortSpec]]:
    n_nodes = draw(st.integers(1, 4))
    n_cq = draw(st.integers(1, 4))
    hierarchical = draw(st.booleans())
    cohorts: list[CohortSpec] = []
    if hierarchical:
        own = draw(st.integers(0, 8))
        cohorts = [
            CohortSpec(
                "root",
                resource_groups=(
                    ResourceGroup(("gpu",), (FlavorQuotas("default", {"gpu": ResourceQuota(F(own))}),)),
                ),
            ),
            CohortSpec("co", parent="root"),
        ]
    cqs = []
    for i in range(n_cq):
        nominal = draw(st.integers(0, 16))
        borrowing = draw(st.one_of(st.none(), st.integers(0, 16)))
        lending = draw(st.one_of(st.none(), st.integers(0, nominal)))
        pol = PreemptionPolicy(
            within_cluster_queue=draw(
                st.sampled_from(["Never", "LowerPriority", "LowerOrNewerEqualPriority"])
            ),
            reclaim_within_cohort=draw(st.sampled_from(["Never", "LowerPriority", "Any"])),
            borrow_within_cohort=draw(st.sampled_from(["Never", "LowerPriority"])),
            max_priority_threshold=draw(st.one_of(st.none(), st.integers(0, 3))),
        )
        in_cohort = draw(st.booleans()) or hierarchical
        cqs.append(
            gpu_cq(
                f"cq{i}",
                nominal,
                cohort="co" if in_cohort else None,
                borrowing=borrowing,
                lending=lending,
                preemption=pol,
                fair_weight=F(draw(st.integers(0, 3))),
                queueing_strategy=draw(st.sampled_from(["BestEffortFIFO", "StrictFIFO"])),
            )
        )
    fair = draw(st.booleans())
    cfg = SchedulingConfig(fair_sharing=FairSharingConfig(enable=fair), verify=True)
    base = snapshot(cqs, [lq(f"lq{i}", f"cq{i}") for i in range(n_cq)], cohorts=cohorts)
    d = Driver(base, CountingPlacer(nodes(n_nodes)), config=cfg, backlog=Backlog())
    n_wl = draw(st.integers(1, 14))
    for k in range(n_wl):
        pods = draw(st.integers(1, 3))
        min_count = draw(st.one_of(st.none(), st.integers(1, pods)))
        wl = job(
            f"w{k}",
            draw(st.sampled_from([1, 2, 4, 8])),
            pods=pods,
            queue=f"lq{draw(st.integers(0, n_cq - 1))}",
            priority=draw(st.integers(0, 3)),
            t=float(draw(st.integers(0, 6))),
            min_count=min_count,
        )
        d.submit(wl, float(draw(st.integers(1, 6))))
    return d, cqs, cohorts


def _check(d: Driver, cqs: list[ClusterQueueSpec], cohorts: list[CohortSpec]) -> None:
    tree = QuotaTree(cqs, cohorts)
    for a in d.admitted.values():
        tree.add_usage(a.cluster_queue, a.usage)
    assert tree.violations() == []
    usage = {
        cq.name: sum(
            a.usage.get(("default", "gpu"), F(0)) for a in d.admitted.values() if a.cluster_queue == cq.name
        )
        for cq in cqs
    }
    total_pool = sum(cq.quotas()[("default", "gpu")].nominal for cq in cqs if cq.cohort) + sum(
        c.quotas().get(("default", "gpu"), ResourceQuota(F(0))).nominal for c in cohorts
    )
    for cq in cqs:
        q = cq.quotas()[("default", "gpu")]
        if cq.cohort is None:
            assert usage[cq.name] <= q.nominal
            continue
        if q.borrowing_limit is not None:
            assert usage[cq.name] <= q.nominal + q.borrowing_limit
        if q.lending_limit is not None:
            guaranteed = q.nominal - q.lending_limit
            others = sum(usage[o.name] for o in cqs if o.cohort and o.name != cq.name)
            # the others together never eat into this queue's guaranteed quota
            assert others <= total_pool - guaranteed
    # devices: no node over capacity
    used: dict[str, int] = {}
    for a in d.admitted.values():
        for node, g in a.placement.detail:  # type: ignore[attr-defined]
            used[node] = used.get(node, 0) + g
    for node, g in used.items():
        assert g <= d.placer.nodes[node].gpus, (node, g)
    # gangs whole, charge = what is placed
    for a in d.admitted.values():
        (ps,) = a.workload.pod_sets
        n = a.counts["main"]
        assert n == ps.count or (ps.min_count is not None and ps.min_count <= n < ps.count)
        assert len(a.placement.nodes) == n  # type: ignore[attr-defined]
        gpus = ps.device_requests["gpu"]
        assert a.usage[("default", "gpu")] == gpus * n
        assert sum(g for _, g in a.placement.detail) == gpus * n  # type: ignore[attr-defined]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_invariants_hold_over_virtual_time(
    sc: tuple[Driver, list[ClusterQueueSpec], list[CohortSpec]],
) -> None:
    d, cqs, cohorts = sc
    for _ in range(14):
        res = d.tick()
        _check(d, cqs, cohorts)
        # a planned preemptor is never admitted in the same cycle, and victims are admitted ones
        admitted_now = {x.key for x in res.admissions}
        for plan in res.preemptions:
            assert plan.preemptor not in admitted_now
            assert len({v.key for v in plan.victims}) == len(plan.victims)
    # every workload either ran, runs, or has a pending reason
    done = {k for _, e, k, _ in d.events if e == "Finished"}
    last = d.results[-1]
    last_tick = d.now - d.step
    for w in d.pending:
        evicted_in_last_tick = w.requeue_time == last_tick
        assert w.key in last.pending or w.key in done or evicted_in_last_tick
