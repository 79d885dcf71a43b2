"""Verify mode of the scheduling core (``SchedulingConfig.verify``): a memo or cache that answers
differently from the general computation raises ``VerifyError`` naming it; without verify mode its
answer stands. Each test poisons one memo the way a wrong key would, then runs a cycle both ways.
And a kept DraPlacer and CycleMemo, with flavors whose node labels change between cycles, answer as
a fresh placer and memo do."""

from __future__ import annotations

import sys
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sched_helpers import LOWER, gpu_cq, job, lq, nodes, running, snapshot

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dra"))  # the DRA tests' builders
from test_gang import GPU, node, template
from test_gang import gpus as slices

from queueing.api.core import PodSpec, PodTemplateSpec
from queueing.dra.verify import VerifyError
from queueing.scheduling import CountingPlacer, SchedulingConfig, run_cycle
from queueing.scheduling.cycle import CycleMemo, CycleResult
from queueing.scheduling.dra_placer import ClaimRef, DraPlacer, DraPodSet, DraRequest
from queueing.scheduling.snapshot import ClusterSnapshot, FlavorSpec, PodSetInfo, WorkloadInfo

F = Fraction
VERIFY = SchedulingConfig(verify=True)


class _Everything(set[object]):
    """A memo of failures that claims to know every question failed."""

    def __contains__(self, item: object) -> bool:
        return True


def _preempting() -> tuple[CountingPlacer, ClusterSnapshot]:
    """cq-a's 4 GPUs are held by a low-priority workload; a high-priority one preempts it."""
    placer = CountingPlacer(nodes(1, gpus=4))
    low = running(job("low", 4, queue="lq-a", priority=0), "cq-a", [("n1", 4)])
    cqs = [gpu_cq("cq-a", 4, preemption=LOWER)]
    return placer, snapshot(
        cqs, [lq("lq-a", "cq-a")], pending=[job("hi", 4, queue="lq-a", priority=5)], admitted=[low]
    )


def test_a_wrong_remembered_failure_raises() -> None:
    placer, snap = _preempting()
    assert run_cycle(snap, placer, 1.0, VERIFY, memo=CycleMemo()).preemptions
    memo = CycleMemo()
    memo.plans.failed = _Everything()
    # the poisoned memo's answer stands without verify mode ...
    assert not run_cycle(snap, placer, 1.0, SchedulingConfig(), memo=memo).preemptions
    # ... and is caught with it
    memo.plans.bind(snap.cluster_queues, snap.cohorts, snap.flavors, VERIFY, placer)
    memo.plans.failed = _Everything()
    with pytest.raises(VerifyError) as err:
        run_cycle(snap, placer, 1.0, VERIFY, memo=memo)
    assert err.value.fast_path == "PlanMemo (a remembered failure)"
    assert err.value.fast is None and err.value.general is not None


def _pending() -> tuple[CountingPlacer, ClusterSnapshot]:
    placer = CountingPlacer(nodes(1, gpus=2))
    cqs = [gpu_cq("cq-a", 8)]
    return placer, snapshot(cqs, [lq("lq-a", "cq-a")], pending=[job("big", 4, queue="lq-a")])


def test_a_wrong_estimate_raises() -> None:
    placer, snap = _pending()
    memo = CycleMemo()
    first = run_cycle(snap, placer, 1.0, VERIFY, memo=memo)
    assert "default/big" in first.pending
    ((sig, (cq, flavors, _)),) = memo.estimates.items()
    memo.estimates[sig] = (cq, flavors, {("default", "gpu"): F(999)})
    with pytest.raises(VerifyError) as err:
        run_cycle(replace(snap), placer, 2.0, VERIFY, memo=memo)
    assert err.value.fast_path == "CycleMemo.estimates"


def test_a_wrong_shape_raises() -> None:
    placer, snap = _pending()
    memo = CycleMemo()
    run_cycle(snap, placer, 1.0, VERIFY, memo=memo)
    (shape,) = memo.shapes.values()
    shape.groups_err = "resource gpu unavailable (poisoned)"
    out = run_cycle(replace(snap), placer, 2.0, SchedulingConfig(), memo=memo)
    assert "poisoned" in out.pending["default/big"].message  # the cache's answer, unchecked
    with pytest.raises(VerifyError) as err:
        run_cycle(replace(snap), placer, 3.0, VERIFY, memo=memo)
    assert err.value.fast_path == "Assigner shape cache (groups)"


# ------------------------------------------------------------ kept placer, flavors that change
def _outcome(res: CycleResult) -> object:
    return (
        sorted((a.key, a.assignment.placement.nodes) for a in res.admissions),
        sorted((p.preemptor, tuple(v.key for v in p.victims)) for p in res.preemptions),
        sorted((k, r.reason) for k, r in res.pending.items()),
    )


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    zones=st.lists(st.sampled_from(["a", "b", "c"]), min_size=2, max_size=5),
    gpus=st.lists(st.integers(1, 4), min_size=1, max_size=4),
)
def test_kept_placer_and_memo_follow_flavors_that_change(zones: list[str], gpus: list[int]) -> None:
    """Cycle after cycle the flavor ``f`` names another zone (same name, new labels): a kept placer
    and memo in verify mode decide what a fresh placer and memo decide."""
    names = {"a": "na", "b": "nb", "c": "nc"}
    tmpl = [template(f"t{g}", g) for g in range(1, 5)]

    def placer(verify: bool) -> DraPlacer:
        return DraPlacer(
            [node(n, labels={"zone": z}) for z, n in names.items()],
            [slices(n, 2) for n in names.values()],
            [GPU],
            templates=tmpl,
            verify=verify,
        )

    def workload(k: int, g: int) -> WorkloadInfo:
        spec = PodSpec.model_validate(
            {
                "containers": [{"name": "c", "image": "x"}],
                "resourceClaims": [{"name": "g", "resourceClaimTemplateName": f"t{g}"}],
            }
        )
        req = DraRequest((DraPodSet("main", PodTemplateSpec(spec=spec), (ClaimRef("g", None, f"t{g}"),)),))
        ps = PodSetInfo(name="main", count=1, device_requests={"gpu": F(g)})
        return WorkloadInfo(
            namespace="default", name=f"w{k}", queue_name="lq-a", pod_sets=(ps,), placement_request=req
        )

    cqs = [gpu_cq("cq-a", 100, flavor="f")]
    pending = [workload(k, g) for k, g in enumerate(gpus)]
    kept, memo = placer(True), CycleMemo()
    for t, zone in enumerate(zones):
        flavors = (FlavorSpec("f", node_labels={"zone": zone}),)
        snap = snapshot(cqs, [lq("lq-a", "cq-a")], pending=pending, flavors=flavors)
        got = run_cycle(snap, kept, float(t), VERIFY, memo=memo)
        want = run_cycle(snap, placer(False), float(t), SchedulingConfig())
        assert _outcome(got) == _outcome(want)
        assert all(n == names[zone] for a in got.admissions for n in a.assignment.placement.nodes)
