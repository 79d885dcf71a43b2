"""The memo of failed preemption plans (``preemption.PlanMemo``): every answer the cycle gets with it
is the answer ``plan_preemption`` gives without it, and the cohort state the cycle keeps per cohort
tree is the state of that moment."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sched_helpers import LOWER, Driver, gpu_cq, job, lq, nodes, running, snapshot

import queueing.scheduling.phases.preempt as preempt_phase
from queueing.scheduling import (
    CohortSpec,
    CountingPlacer,
    PreemptionPolicy,
    SchedulingConfig,
    preemption,
    run_cycle,
)
from queueing.scheduling.assign import Assigner, Combo
from queueing.scheduling.backlog import Backlog
from queueing.scheduling.config import FairSharingConfig
from queueing.scheduling.cycle import CycleMemo
from queueing.scheduling.fairshare import share_units
from queueing.scheduling.placer import Placer
from queueing.scheduling.preemption import CohortState, PlanMemo, PreemptionPlan, plan_preemption
from queueing.scheduling.quota import QuotaTree, cq_id
from queueing.scheduling.snapshot import AdmittedWorkload, ClusterQueueSpec, WorkloadInfo

F = Fraction


def _reference_search(
    ctx: Any,
    base: Sequence[AdmittedWorkload],
    cands: Sequence[AdmittedWorkload],
    allow_borrow: bool,
    max_pairs: int,
) -> list[AdmittedWorkload] | None:
    """``preemption._search`` as it was before quota was checked first (every set it tries)."""
    if not cands:
        return None
    # cheap necessary condition: with every candidate gone it must fit
    if ctx.fits([*base, *cands], allow_borrow) is None:
        return None
    # a single victim, best first
    for c in cands:
        if preemption._removable(ctx, base, c) and ctx.fits([*base, c], allow_borrow) is not None:
            return [c]
    # greedy in candidate order, then put back what is not needed
    removed: list[AdmittedWorkload] = []
    fitted = False
    for c in cands:
        if not preemption._removable(ctx, [*base, *removed], c):
            continue
        removed.append(c)
        if ctx.fits([*base, *removed], allow_borrow) is not None:
            fitted = True
            break
    if not fitted:
        return None
    for c in list(reversed(removed[:-1])):
        trial = [x for x in removed if x.key != c.key]
        if ctx.fits([*base, *trial], allow_borrow) is not None:
            removed = trial
    if len(removed) > 2:
        budget = max_pairs
        for i in range(len(cands)):
            for j in range(i + 1, len(cands)):
                if budget <= 0:
                    return removed
                budget -= 1
                pair = [cands[i], cands[j]]
                if not preemption._removable(ctx, base, cands[i]) or not preemption._removable(
                    ctx, [*base, cands[i]], cands[j]
                ):
                    continue
                if ctx.fits([*base, *pair], allow_borrow) is not None:
                    return pair
    return removed


class _Checked:
    """``plan_preemption`` for the cycle: also answers without the memo and compares."""

    def __init__(self) -> None:
        self.calls = 0
        self.hits = 0

    def __call__(
        self,
        wl: WorkloadInfo,
        cq: ClusterQueueSpec,
        counts: Mapping[str, int],
        combos: Sequence[Combo],
        tree: QuotaTree,
        state: object,
        admitted: Sequence[AdmittedWorkload],
        assigner: Assigner,
        placer: Placer[Any],
        config: SchedulingConfig,
        cq_specs: Mapping[str, ClusterQueueSpec],
        *,
        memo: PlanMemo | None = None,
        cohort: CohortState | None = None,
    ) -> PreemptionPlan | None:
        self.calls += 1
        assert memo is not None and cohort is not None
        # the state the cycle kept for the cohort tree is the state now
        assert memo.state(tree, tree.root_of(cq.name), admitted) == cohort
        # the plan below takes the candidates prepared once for the state (compared with the plan
        # without the memo, which prepares them itself)
        assert cohort.prepared(admitted) == preemption._candidates(admitted)
        assert cohort.prepared(list(admitted)) is None  # only for the very sequence
        if wl.key not in cohort.keys and memo.key(cohort, wl, cq, counts, combos) in memo.failed:
            self.hits += 1
        usage = {nid: dict(n.usage) for nid, n in tree.nodes.items()}
        args = (wl, cq, counts, combos, tree, state, admitted, assigner, placer, config, cq_specs)
        got = plan_preemption(*args, memo=memo, cohort=cohort)
        assert {nid: dict(n.usage) for nid, n in tree.nodes.items()} == usage
        assert got == plan_preemption(*args)
        with pytest.MonkeyPatch.context() as mp:  # the search without its quota shortcut
            mp.setattr(preemption, "_search", _reference_search)
            assert got == plan_preemption(*args)
        # the shares kept for the state are the shares of the tree as it is
        for name, share in memo.shares(cohort).items():
            assert share == share_units(tree, cq_id(name))
        return got


@contextmanager
def _checking() -> Iterator[_Checked]:
    checked = _Checked()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(preempt_phase, "plan_preemption", checked)
        yield checked


@st.composite
def _scenarios(draw: st.DrawFn) -> Driver:
    """A cohort (sometimes two) of ClusterQueues that borrow and preempt: many small low-priority
    workloads, some larger higher-priority ones, arriving over time."""
    n_cq = draw(st.integers(2, 4))
    two = draw(st.booleans())
    cqs = []
    for i in range(n_cq):
        pol = PreemptionPolicy(
            within_cluster_queue=draw(
                st.sampled_from(["Never", "LowerPriority", "LowerOrNewerEqualPriority"])
            ),
            reclaim_within_cohort=draw(st.sampled_from(["Never", "LowerPriority", "Any"])),
            borrow_within_cohort=draw(st.sampled_from(["Never", "LowerPriority"])),
            max_priority_threshold=draw(st.one_of(st.none(), st.integers(0, 2))),
        )
        cqs.append(
            gpu_cq(
                f"cq{i}",
                draw(st.integers(0, 8)),
                cohort="a" if not two or i % 2 else "b",
                borrowing=draw(st.one_of(st.none(), st.integers(0, 12))),
                lending=draw(st.one_of(st.none(), st.integers(0, 2))),
                preemption=pol,
                fair_weight=F(draw(st.integers(0, 2))),
            )
        )
    fair = draw(st.booleans())
    strategies = draw(
        st.sampled_from(
            [
                ("LessThanOrEqualToFinalShare", "LessThanInitialShare"),
                ("LessThanInitialShare",),
                ("LessThanOrEqualToFinalShare",),
            ]
        )
    )
    cfg = SchedulingConfig(fair_sharing=FairSharingConfig(enable=fair, preemption_strategies=strategies))
    base = snapshot(cqs, [lq(f"lq{i}", f"cq{i}") for i in range(n_cq)])
    d = Driver(base, CountingPlacer(nodes(draw(st.integers(1, 3)))), config=cfg, backlog=Backlog())
    for k in range(draw(st.integers(4, 24))):
        big = draw(st.booleans())
        wl = job(
            f"w{k}",
            draw(st.sampled_from([2, 4, 8])) if big else 1,
            pods=draw(st.integers(1, 2)),
            queue=f"lq{draw(st.integers(0, n_cq - 1))}",
            priority=draw(st.integers(0, 2)) + (1 if big else 0),
            t=float(draw(st.integers(0, 5))),
        )
        d.submit(wl, float(draw(st.sampled_from([1, 2, 4, 30]))))
    return d


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_scenarios())
def test_memo_answers_as_without_it(d: Driver) -> None:
    with _checking():
        for _ in range(12):
            d.tick()


def test_memo_is_used_between_cycles() -> None:
    cqs = [gpu_cq(f"cq{i}", 4, cohort="co", borrowing=8, preemption=LOWER) for i in range(3)]
    base = snapshot(cqs, [lq(f"lq{i}", f"cq{i}") for i in range(3)])
    for fair in (False, True):
        cfg = SchedulingConfig(fair_sharing=FairSharingConfig(enable=fair))
        d = Driver(base, CountingPlacer(nodes(2)), config=cfg, backlog=Backlog())
        for k in range(30):
            d.submit(job(f"s{k}", 1, queue=f"lq{k % 3}", priority=k % 2, t=float(k % 4)), 50.0)
        for k in range(4):
            d.submit(job(f"m{k}", 4, queue=f"lq{k % 3}", priority=2, t=2.0 + k), 50.0)
        with _checking() as checked:
            for _ in range(12):
                d.tick()
        assert checked.calls > 10
        assert checked.hits > 0


def _blocked(
    pending: Sequence[WorkloadInfo], admitted: Sequence[AdmittedWorkload]
) -> tuple[list[ClusterQueueSpec], Any]:
    cqs = [
        gpu_cq("cq-a", 8, cohort="co", borrowing=8, preemption=LOWER),
        gpu_cq("cq-b", 8, cohort="co", borrowing=8, preemption=LOWER),
        gpu_cq("cq-x", 8, preemption=LOWER),
    ]
    return cqs, snapshot(
        cqs,
        [lq("lq-a", "cq-a"), lq("lq-b", "cq-b"), lq("lq-x", "cq-x")],
        pending=pending,
        admitted=admitted,
    )


def test_only_failures_without_a_placement_are_remembered() -> None:
    placer = CountingPlacer(nodes(1))
    # quota fails: cq-a uses its 8 and cq-b its 8 + 8 borrowed at priority 5; nothing to take
    hi_b = running(job("b1", 8, queue="lq-b", priority=5), "cq-b", [("n1", 8)])
    hi_b2 = running(job("b2", 8, queue="lq-b", priority=5), "cq-b", [("n1", 0)])
    a1 = running(job("a1", 4, queue="lq-a", priority=5), "cq-a", [("n1", 0)])
    _, snap = _blocked([job("p", 4, queue="lq-a", priority=1)], [hi_b, hi_b2, a1])
    memo = CycleMemo()
    with _checking() as checked:
        res = run_cycle(snap, placer, 1.0, memo=memo)
    assert not res.preemptions and checked.calls == 1
    assert len(memo.plans.failed) == 1
    # the same question next cycle (the same objects): answered from the memo
    with _checking() as checked:
        res = run_cycle(replace(snap), placer, 2.0, memo=memo)
    assert checked.hits == 1 and not res.preemptions

    # the devices are short: cq-x (another tree, not a candidate) holds 6 of the node's 8 GPUs;
    # evicting cq-a's low-priority workload frees quota but not enough devices
    x = running(job("x", 6, queue="lq-x", priority=9), "cq-x", [("n1", 6)])
    low = running(job("low", 2, queue="lq-a", priority=0), "cq-a", [("n1", 2)])
    _, snap2 = _blocked([job("q", 4, queue="lq-a", priority=3)], [x, low])
    memo2 = CycleMemo()
    with _checking() as checked:
        res = run_cycle(snap2, placer, 1.0, memo=memo2)
    assert checked.calls == 1 and not res.preemptions
    assert not memo2.plans.failed  # a placement was tried: it depends on the placer state


def test_bind_forgets_on_other_objects() -> None:
    memo = PlanMemo()
    cqs = (gpu_cq("cq-a", 4, cohort="co"),)
    memo.bind(cqs, ())
    memo.remember(("k",))
    memo.bind(cqs, ())
    assert memo.failed == {("k",)}
    memo.bind(tuple(cqs), (CohortSpec("co"),))
    assert not memo.failed


def test_cohort_state_tells_contents_apart() -> None:
    cqs = [gpu_cq("cq-a", 4, cohort="co"), gpu_cq("cq-b", 4, cohort="co")]
    tree = QuotaTree(cqs)
    memo = PlanMemo()
    a = running(job("a", 2, queue="lq-a", priority=1), "cq-a", [("n1", 2)])
    tree.add_usage("cq-a", a.usage)
    root = tree.root_of("cq-a")
    s1 = memo.state(tree, root, [a])
    assert memo.state(tree, root, [a]) == s1
    # an equal copy is the same state; another priority, time, usage or eviction is not
    assert memo.state(tree, root, [replace(a)]) == s1
    for other in (
        replace(a, workload=replace(a.workload, priority=2)),
        replace(a, admission_time=1.0),
        replace(a, evicting=True),
        replace(a, workload=replace(a.workload, requeue_time=3.0)),
        replace(a, usage={("default", "gpu"): F(3)}),
    ):
        assert memo.state(tree, root, [other]) != s1
    tree.add_usage("cq-b", {("default", "gpu"): F(1)})
    assert memo.state(tree, root, [a]) != s1
    # a bounded memo keeps answering (ids are not reused after it forgets)
    small = PlanMemo(limit=2)
    ids = {small.state(tree, root, [replace(a, admission_time=float(t))]).id for t in range(6)}
    assert len(ids) == 6


def test_prepared_candidates_filter_as_the_usage_loop() -> None:
    """A plan keeps a candidate that uses a requested resource or nothing at all (as the loop over
    its usage did): empty usage, zero amounts only, other resources, a requested one; and one that
    uses a flavor-resource needing preemption exactly when ``any(a.usage.get(fr) for fr in need)``
    (the test the plan made per candidate before the set was prepared)."""
    base = running(job("a", 2, queue="lq-a", priority=1), "cq-a", [("n1", 2)])
    usages: list[dict[tuple[str, str], F]] = [
        {},
        {("default", "gpu"): F(0)},
        {("default", "cpu"): F(1, 2)},
        {("default", "cpu"): F(0), ("default", "gpu"): F(1)},
        {("x", "gpu"): F(-1)},
    ]
    for names in (set(), {"gpu"}, {"cpu"}, {"cpu", "gpu"}):
        for usage in usages:
            a = replace(base, usage=usage)
            ((got, q, k, used, evict, p, frs),) = preemption._candidates([a])
            assert (got, q, k, evict, p) == (a, a.cluster_queue, a.key, a.evicting, a.workload.priority)
            old = True
            if a.usage:
                for (_, r), v in a.usage.items():
                    if v and r in names:
                        break
                else:
                    old = False
            assert (used is None or not used.isdisjoint(names)) == old
            for need in (set(), {("default", "gpu")}, {("x", "gpu"), ("default", "cpu")}, {("y", "gpu")}):
                assert (not frs.isdisjoint(need)) == any(a.usage.get(fr) for fr in need)


def test_quota_fits_takes_out_as_remove_usage() -> None:
    """``_Ctx.quota_fits`` (whole units summed per ClusterQueue and taken out in place, else the exact
    sums) answers as the tree with every removed workload taken out by ``QuotaTree.remove_usage``,
    and leaves the tree as it was."""
    import random

    rng = random.Random(7)
    cqs = [
        gpu_cq("cq-a", 4, cohort="co", lending=2),
        gpu_cq("cq-b", 3, cohort="co", borrowing=2),
        gpu_cq("cq-c", 2, cohort="co"),
    ]
    amounts = [F(1), F(2), F(1, 2), F(1, 3), F(3, 10**9), F(0)]
    for _ in range(60):
        tree = QuotaTree(cqs)
        admitted = []
        for i in range(rng.randint(1, 6)):
            q = rng.choice(["cq-a", "cq-b", "cq-c"])
            a = running(job(f"w{i}", 1, queue="lq-a"), q, [("n1", 1)])
            a = replace(
                a, usage={("default", "gpu"): rng.choice(amounts[:5] if rng.random() < 0.8 else amounts)}
            )
            admitted.append(a)
            tree.add_usage(q, a.usage)
        want = [(("default", "gpu"), preemption.to_units(F(rng.randint(1, 8))))]
        cq = rng.choice(cqs[:2])
        ctx = preemption._Ctx(
            None,
            cq,
            {},
            [],
            tree,
            None,
            None,
            None,
            [],
            [want],  # type: ignore[arg-type]
        )
        before = {nid: dict(n.usage) for nid, n in tree.nodes.items()}
        for _ in range(8):
            removed = rng.sample(admitted, rng.randint(0, len(admitted)))
            allow = rng.random() < 0.5
            ref = QuotaTree(cqs)
            for a in admitted:
                ref.add_usage(a.cluster_queue, a.usage)
            per_cq: dict[str, dict[tuple[str, str], Fraction]] = {}
            for a in removed:
                acc = per_cq.setdefault(a.cluster_queue, {})
                for fr, v in a.usage.items():
                    acc[fr] = acc.get(fr, F(0)) + v
            for name, u in per_cq.items():
                ref.remove_usage(name, u)
            fit = ref.fit_units(cq.name, want)
            expect = fit.mode == "Fit" and (allow or not fit.borrows)
            assert ctx.quota_fits(removed, allow) == expect
            assert {nid: dict(n.usage) for nid, n in tree.nodes.items()} == before
