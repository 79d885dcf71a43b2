"""What a caller keeps between cycles: the Backlog (pending workloads kept sorted), the CycleMemo;
and the cycle's pending reasons by group."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sched_helpers import gpu_cq, job, lq, nodes, snapshot

from queueing.scheduling import CountingPlacer, run_cycle
from queueing.scheduling.backlog import Backlog, run_order
from queueing.scheduling.config import SchedulingConfig
from queueing.scheduling.cycle import CycleMemo, PendingReason, PendingReasons
from queueing.scheduling.snapshot import FlavorSpec, Taint


def _runs(b: Backlog) -> dict[str, list[list[str]]]:
    return {q: [[w.name for w in run] for run in runs.values()] for q, runs in b.queues.items()}


def test_runs_by_queue_and_signature_sorted_by_priority_time_key() -> None:
    ws = [
        job("c", 1, priority=1, t=2.0),
        job("a", 1, priority=1, t=2.0),
        job("big", 8, priority=0, t=0.0),
        job("hi", 1, priority=5, t=9.0),
        job("early", 1, priority=1, t=1.0),
        job("other", 1, queue="lq-b", t=0.0),
    ]
    b = Backlog(ws)
    assert _runs(b) == {"default/lq-a": [["hi", "early", "a", "c"], ["big"]], "default/lq-b": [["other"]]}
    assert len(b) == 6 and "default/a" in b and b.get("default/big") is ws[2]
    # a requeued workload orders by its requeue time and replaces the old entry
    b.add(replace(ws[3], requeue_time=10.0, priority=1))
    assert _runs(b)["default/lq-a"][0] == ["early", "a", "c", "hi"]
    assert len(b) == 6
    for k in ("default/hi", "default/early", "default/a", "default/c"):
        assert b.remove(k) is not None
    assert b.remove("default/c") is None
    assert _runs(b) == {"default/lq-a": [["big"]], "default/lq-b": [["other"]]}
    b.remove("default/other")
    assert "default/lq-b" not in b.queues


def test_held_workloads_join_their_run_when_released() -> None:
    b = Backlog(released=0.0)
    backoff = replace(job("later", 1, t=0.0), backoff_until=5.0)
    off = replace(job("off", 1), active=False)
    b.add(backoff)
    b.add(off)
    b.add(job("now", 1, t=3.0))
    assert set(b.held) == {"default/later", "default/off"}
    b.release(4.9)
    assert set(b.held) == {"default/later", "default/off"}
    b.release(5.0)
    assert b.released == 5.0
    assert set(b.held) == {"default/off"}
    assert _runs(b) == {"default/lq-a": [["later", "now"]]}
    # added with a backoff already over: straight into its run
    b.add(replace(job("past", 1, t=1.0), backoff_until=4.0))
    assert _runs(b) == {"default/lq-a": [["later", "past", "now"]]}
    # a stale backoff entry (the workload was replaced) is skipped
    b.add(replace(job("again", 1, t=0.5), backoff_until=8.0))
    b.add(replace(job("again", 1, t=0.5), backoff_until=20.0))
    b.release(10.0)
    assert "default/again" in b.held


def _cycle_inputs() -> tuple[list[object], CountingPlacer]:
    cq = gpu_cq("cq", 8)
    return [cq, lq("lq-a", "cq"), lq("lq-gone", "missing")], CountingPlacer(nodes(1))


def test_cycle_from_a_backlog_equals_the_cycle_from_pending() -> None:
    (cq, lqa, lqg), placer = _cycle_inputs()
    ws = [
        job("fits", 4, t=0.0),
        job("too-big-1", 8, t=1.0),
        job("too-big-2", 8, t=2.0),
        job("small", 2, t=3.0),
        job("lost", 1, queue="lq-gone"),
        replace(job("waits", 1), backoff_until=50.0),
        replace(job("off", 1), active=False),
    ]
    snap = snapshot([cq], [lqa, lqg], ws)  # type: ignore[list-item]
    plain = run_cycle(snap, placer, 10.0)
    b = Backlog(reversed(ws))
    b.release(10.0)
    kept = run_cycle(replace(snap, pending=(), backlog=b), placer, 10.0)
    assert kept.admissions == plain.admissions
    assert [a.key for a in plain.admissions] == ["default/fits", "default/small"]
    assert dict(kept.pending) == dict(plain.pending)
    assert plain.pending["default/too-big-2"] is plain.pending["default/too-big-1"]
    assert plain.pending["default/lost"].message == "ClusterQueue missing doesn't exist"
    assert plain.pending["default/waits"].reason == "Backoff"
    assert plain.pending["default/off"].reason == "Deactivated"
    # a backoff that ended but was not released is still honoured (the cycle works on a copy)
    late = run_cycle(replace(snap, pending=(), backlog=b), placer, 60.0)
    assert "default/waits" in [a.key for a in late.admissions]
    assert "default/waits" in b.held  # the caller's backlog is not changed


def test_backlog_errors_name_the_problem() -> None:
    (cq, lqa, _), placer = _cycle_inputs()
    b = Backlog([job("x", 1)])
    with pytest.raises(ValueError, match="either in pending or in backlog"):
        run_cycle(snapshot([cq], [lqa], [job("y", 1)], backlog=b), placer, 0.0)  # type: ignore[list-item]
    b.release(5.0)
    with pytest.raises(ValueError, match="released up to t=5s, after now"):
        run_cycle(snapshot([cq], [lqa], backlog=b), placer, 1.0)  # type: ignore[list-item]


def test_pending_reasons_mapping_and_groups() -> None:
    r1 = PendingReason("cq", "Pending", "no room")
    r2 = PendingReason("cq", "Preempting", "preempting 1 workload(s): default/v")
    p = PendingReasons()
    ws = [job("a", 1), job("b", 1)]
    p.set_all(ws, r1)
    p.set_all([], r1)  # nothing
    p.set("default/h", r2)
    p.set("default/z", r1)
    p.discard("default/z")
    p.discard("default/never")
    assert dict(p) == {"default/a": r1, "default/b": r1, "default/h": r2}
    assert len(p) == 3 and p["default/h"] is r2 and p.get("default/a") is r1 and "default/z" not in p
    groups = list(p.groups())
    assert groups == [(None, "default/h", r2), (ws, None, r1)]


def test_memo_entries_are_only_reused_for_the_same_queue_objects() -> None:
    (cq, lqa, _), placer = _cycle_inputs()
    memo = CycleMemo()
    w = job("w", 4)
    first = run_cycle(snapshot([cq], [lqa], [w]), placer, 0.0, memo=memo)  # type: ignore[list-item]
    assert first == run_cycle(snapshot([cq], [lqa], [w]), placer, 0.0)  # type: ignore[list-item]
    ((held_cq, _, est),) = memo.estimates.values()
    assert held_cq is cq and sum(est.values()) == 4
    again = replace(cq, name="cq")  # an equal but new object (as after a watch event): recomputed
    run_cycle(snapshot([again], [lqa], [w]), placer, 0.0, memo=memo)  # type: ignore[list-item]
    ((held_cq, _, _),) = memo.estimates.values()
    assert held_cq is again


def test_shapes_are_kept_for_the_same_flavors_only() -> None:
    (cq, lqa, _), placer = _cycle_inputs()
    memo = CycleMemo()
    w = job("w", 4)
    snap = snapshot([cq], [lqa], [w])  # type: ignore[list-item]
    assert run_cycle(snap, placer, 0.0, memo=memo) == run_cycle(snap, placer, 0.0)
    (shape,) = memo.shapes.values()
    run_cycle(replace(snap), placer, 0.0, memo=memo)  # the same flavors: the same shape
    assert list(memo.shapes.values()) == [shape] and memo.shapes_flavors is snap.flavors
    # the flavor now taints its nodes: derived again, and the workload no longer fits
    tainted = (FlavorSpec("default", node_taints=(Taint("gpu", "yes"),)),)
    snap2 = replace(snap, flavors=tainted)
    got = run_cycle(snap2, placer, 0.0, memo=memo)
    assert got == run_cycle(snap2, placer, 0.0)
    assert not got.admissions and memo.shapes_flavors is tainted
    assert next(iter(memo.shapes.values())) is not shape


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 9),  # name (repeats: a later one replaces the earlier)
            st.integers(1, 3),  # gpus (the fit signature)
            st.sampled_from(["lq-a", "lq-b"]),
            st.integers(0, 2),  # priority
            st.sampled_from([0.0, 1.0, 2.0]),  # time (ties broken by key)
            st.sampled_from([None, 0.5, 3.0]),  # backoff until
            st.booleans(),  # active
        ),
        max_size=25,
    ),
    st.sampled_from([float("-inf"), 1.0]),
)
def test_backlog_built_at_once_is_built_one_by_one(rows: list[tuple[Any, ...]], released: float) -> None:
    """``Backlog(workloads)`` sorts each run once; it must hold exactly what adding them one by one
    holds, in the same order (queues, runs, held, backoffs)."""
    ws = [
        replace(job(f"w{n}", g, queue=q, priority=p, t=t), backoff_until=bo, active=act)
        for n, g, q, p, t, bo, act in rows
    ]
    want = Backlog.one_by_one(ws, released=released).layout()
    assert Backlog(ws, released=released).layout() == want
    # and what verify mode checks in a cycle (``Nominator``) holds on the same input
    snap = snapshot([gpu_cq("cq", 4)], [lq("lq-a", "cq"), lq("lq-b", "cq")], ws)
    run_cycle(snap, CountingPlacer(nodes(1)), max(released, 0.0), SchedulingConfig(verify=True))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 9),  # name (repeats: a later one replaces the earlier)
            st.sampled_from(["lq-a", "lq-b"]),
            st.integers(0, 2),  # priority
            st.sampled_from([0.0, 1.0, 2.0, 3.0]),  # time: mostly in order, as arrivals and requeues
        ),
        max_size=30,
    )
)
def test_backlog_add_at_the_end_of_a_run_is_insort(rows: list[tuple[Any, ...]]) -> None:
    """``add`` puts a workload that sorts after its whole run at the end without a binary search
    (verify mode checks each such insertion): every run is what sorting it gives."""
    b = Backlog(verify=True)
    for n, q, p, t in rows:
        b.add(job(f"w{n}", 1, queue=q, priority=p, t=t))
    for runs in b.queues.values():
        for run in runs.values():
            assert run == sorted(run, key=run_order)
    assert sorted(w.key for runs in b.queues.values() for run in runs.values() for w in run) == sorted(
        {f"default/w{n}" for n, *_ in rows}
    )
