"""Reasons as data: a pending reason names the workload's own pods and claims by reference, is
rendered for the workload it is written to, compares by value, and the run shortcut's claim (the
rest of a run gets the head's reason) is checked by ``SchedulingConfig.verify``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction

import pytest
from sched_helpers import gpu_cq, job, lq, nodes, snapshot

from queueing.scheduling.config import SchedulingConfig
from queueing.scheduling.cycle import PendingReason, PendingReasons, run_cycle
from queueing.scheduling.placer import CountingPlacer, CountingState, Placement, PlacementFailure
from queueing.scheduling.reasons import PodClaimRef, PodRef, Why
from queueing.scheduling.snapshot import FlavorSpec, WorkloadInfo

WHY = Why(
    "placement",
    (
        "pod ",
        PodRef("main", 3),
        " fits on none of 2 nodes; best node n1: claim ",
        PodClaimRef("main", 3, "gpus"),
    ),
    "gpu.example.com",
    "n1",
    (("short", Fraction(2)),),
)


def test_a_why_renders_the_pods_of_the_workload_it_is_written_to() -> None:
    assert WHY.render("team-b/notebook-2") == (
        "pod team-b/notebook-2-main-3 fits on none of 2 nodes; best node n1: claim gpus"
    )
    assert WHY.render("ml/x") == "pod ml/x-main-3 fits on none of 2 nodes; best node n1: claim gpus"
    assert WHY.render() == "pod <workload>-main-3 fits on none of 2 nodes; best node n1: claim gpus"
    assert (WHY.pod, WHY.claim) == (PodRef("main", 3), "gpus")
    assert (
        WHY.prefixed("couldn't place the gang: ")
        .render("a/b")
        .startswith("couldn't place the gang: pod a/b-")
    )


def test_whys_compare_by_value() -> None:
    same = Why(
        "placement",
        (
            "pod ",
            PodRef("main", 3),
            " fits on none of 2 nodes; best node n1: claim ",
            PodClaimRef("main", 3, "gpus"),
        ),
        "gpu.example.com",
        "n1",
        (("short", Fraction(2)),),
    )
    assert same == WHY and hash(same) == hash(WHY)
    other_claim = (*WHY.parts[:-1], PodClaimRef("main", 3, "other"))
    assert Why(WHY.kind, other_claim, WHY.device_class, WHY.node, WHY.numbers) != WHY
    a = PendingReason("cq", "Pending", WHY.render(), WHY)
    assert a == PendingReason("cq", "Pending", same.render(), same)


def test_pending_reasons_render_a_shared_reason_for_each_workload() -> None:
    shared = PendingReason(
        "cq", "Pending", "couldn't place the gang: " + WHY.render(), WHY.prefixed("couldn't place the gang: ")
    )
    ws = [job(f"w{i}", 1) for i in range(3)]
    pr = PendingReasons()
    pr.set_all(ws, shared)
    pr.set("default/single", PendingReason("cq", "Pending", "insufficient quota"))
    for i in range(3):
        got = pr[f"default/w{i}"]
        assert (
            got.message
            == f"couldn't place the gang: pod default/w{i}-main-3 fits on none of 2 nodes; best node n1: claim gpus"
        )
        assert got.why == shared.why and got.text_for(f"default/w{i}") == got.message
    assert pr["default/single"].message == "insufficient quota"
    # the groups keep the one shared object (what the simulator compares between cycles)
    (group,) = [g for g in pr.groups() if g[0] is not None]
    assert group[0] == ws and group[2] is shared
    assert dict(pr.items())["default/w1"].message.startswith(
        "couldn't place the gang: pod default/w1-main-3 "
    )


class LeakyPlacer(CountingPlacer):
    """A placer whose failure names the workload it was asked about in plain text (as the DRA placer's
    did): a reason that the run shortcut must not hand to the rest of the run."""

    def place(
        self,
        workload: WorkloadInfo,
        counts: Mapping[str, int],
        flavors: Mapping[str, Sequence[FlavorSpec]],
        state: CountingState,
    ) -> Placement | PlacementFailure:
        got = super().place(workload, counts, flavors, state)
        if isinstance(got, PlacementFailure):
            return PlacementFailure(f"pod {workload.key}-main-0 does not fit")
        return got


class FirstOnlyPlacer(CountingPlacer):
    """Fails only the workload named ``w0``: the rest of its run would fit."""

    def place(
        self,
        workload: WorkloadInfo,
        counts: Mapping[str, int],
        flavors: Mapping[str, Sequence[FlavorSpec]],
        state: CountingState,
    ) -> Placement | PlacementFailure:
        if workload.name == "w0":
            return PlacementFailure("w0 never fits")
        return super().place(workload, counts, flavors, state)


def _three_of_one_shape(gpus: int) -> object:
    return snapshot(
        [gpu_cq("cq", 100)], [lq("lq-a", "cq")], [job(f"w{i}", gpus, t=float(i)) for i in range(3)]
    )


def test_verify_passes_where_the_run_shortcut_is_right() -> None:
    snap = _three_of_one_shape(16)  # 16 GPUs per pod, nodes of 8: none fits
    plain = run_cycle(snap, CountingPlacer(nodes(2)), 0.0)  # type: ignore[arg-type]
    checked = run_cycle(snap, CountingPlacer(nodes(2)), 0.0, SchedulingConfig(verify=True))  # type: ignore[arg-type]
    assert dict(plain.pending.items()) == dict(checked.pending.items())
    assert len(plain.pending) == 3 and not plain.admissions


def test_verify_catches_a_reason_that_names_the_head() -> None:
    snap = _three_of_one_shape(16)
    res = run_cycle(snap, LeakyPlacer(nodes(2)), 0.0)  # type: ignore[arg-type]
    # without verify the shortcut hands the head's text on (what the check is for)
    assert "default/w0-main-0" in res.pending["default/w2"].message
    with pytest.raises(RuntimeError, match=r"verify: run shortcut: default/w1 .* has its own reason"):
        run_cycle(snap, LeakyPlacer(nodes(2)), 0.0, SchedulingConfig(verify=True))  # type: ignore[arg-type]


def test_verify_catches_a_run_whose_rest_would_fit() -> None:
    snap = _three_of_one_shape(1)
    res = run_cycle(snap, FirstOnlyPlacer(nodes(2)), 0.0)  # type: ignore[arg-type]
    assert not res.admissions and set(res.pending) == {"default/w0", "default/w1", "default/w2"}
    with pytest.raises(RuntimeError, match=r"verify: run shortcut: default/w1 .* fits"):
        run_cycle(snap, FirstOnlyPlacer(nodes(2)), 0.0, SchedulingConfig(verify=True))  # type: ignore[arg-type]
