"""``ReasonChanges``: only the pending reasons that changed since the last cycle are reported.

Its shortcut (the part of a group that agrees with last cycle's group of the same run is skipped)
is checked here against the general computation (every workload's reason against its last one),
over generated cycle sequences with verify mode on and off."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from sched_helpers import job

from queueing.cache.reasons import ReasonChanges
from queueing.scheduling.backlog import Backlog
from queueing.scheduling.decisions import PendingReason, PendingReasons
from queueing.scheduling.snapshot import WorkloadInfo

_REASONS = [
    PendingReason("cq", "Pending", "quota"),
    PendingReason("cq", "Pending", "no node"),
    PendingReason("cq", "Preempting", "victims"),
]


def _pending(
    groups: list[tuple[list[WorkloadInfo], PendingReason]], singles: dict[str, PendingReason]
) -> PendingReasons:
    out = PendingReasons()
    for key, r in singles.items():
        out.set(key, r)
    for ws, r in groups:
        out.set_all(list(ws), r)
    return out


def test_a_forgotten_reason_is_reported_again_inside_an_unchanged_group() -> None:
    ws = [job(f"w{i}", 1, t=float(i)) for i in range(4)]
    backlog = Backlog(ws)
    rc = ReasonChanges(verify=True)
    r = _REASONS[0]
    first = rc.changes(_pending([(ws, r)], {}), backlog)
    assert [k for k, _ in first] == [w.key for w in ws]
    # the reason of w2 was not written (a failed write): compared again by the next cycle
    rc.forget(ws[2].key)
    again = rc.changes(_pending([(ws, PendingReason("cq", "Pending", "quota"))], {}), backlog)
    assert [k for k, _ in again] == [ws[2].key]
    # and then it is remembered like the others
    assert rc.changes(_pending([(ws, r)], {}), backlog) == []


def test_an_unchanged_group_reports_nothing_and_a_changed_tail_only_the_tail() -> None:
    ws = [job(f"w{i}", 1, t=float(i)) for i in range(6)]
    backlog = Backlog(ws)
    rc = ReasonChanges(verify=True)
    r = _REASONS[0]
    rc.changes(_pending([(ws, r)], {}), backlog)
    # the head was admitted, a new one arrived at the end: only the newcomer is new
    new = job("w9", 1, t=9.0)
    backlog.remove(ws[0].key)
    backlog.add(new)
    got = rc.changes(_pending([([*ws[1:], new], r)], {}), backlog)
    assert [k for k, _ in got] == [new.key]


# one cycle: which workloads of the pool are pending, split into groups and singles with reasons;
# then some keys forgotten
_cycle = st.tuples(
    st.lists(st.integers(0, 11), unique=True, max_size=12),  # pending workloads, in order
    st.lists(st.integers(1, 5), max_size=4),  # group boundaries (lengths)
    st.lists(st.integers(0, len(_REASONS) - 1), min_size=6, max_size=6),  # reason per group/single
    st.lists(st.integers(0, 11), max_size=3),  # forgotten afterwards
    st.booleans(),  # the reason objects are fresh (equal by value) instead of shared
    st.lists(st.integers(0, 11), max_size=3),  # replaced by an equal-valued new object
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_cycle, min_size=1, max_size=8), st.booleans())
def test_reported_changes_are_the_changes_by_value(
    cycles: list[tuple[list[int], list[int], list[int], list[int], bool, list[int]]], verify: bool
) -> None:
    # workload i as a member of run g (its own LocalQueue, so its own fit signature); the same
    # object from cycle to cycle unless replaced by an equal-valued new one
    objs: dict[tuple[int, int], WorkloadInfo] = {}

    def obj(i: int, g: int) -> WorkloadInfo:
        got = objs.get((i, g))
        if got is None:
            got = objs[(i, g)] = job(f"w{i:02d}", 1, queue=f"lq{g}", t=float(i))
        return got

    rc = ReasonChanges(verify=verify)
    last: dict[str, PendingReason] = {}  # the general computation: every workload's last reason
    for order, lengths, picks, forgotten, fresh, replaced in cycles:
        for (i, g), w in list(objs.items()):
            if i in replaced:
                objs[(i, g)] = replace(w)  # equal, not the same object
        groups: list[tuple[list[WorkloadInfo], PendingReason]] = []
        singles: dict[str, PendingReason] = {}
        pos = 0
        for g, n in enumerate(lengths):
            part = order[pos : pos + n]
            pos += n
            if not part:
                break
            r = _REASONS[picks[g]]
            if fresh:
                r = PendingReason(r.cluster_queue, r.reason, r.message)
            if len(part) == 1 and g % 2:
                singles[obj(part[0], g).key] = r
            else:
                groups.append(([obj(i, g) for i in part], r))
        for i in order[pos:]:
            singles[obj(i, 99).key] = _REASONS[picks[-1]]
        present = Backlog(
            [w for part, _ in groups for w in part] + [obj(int(k.split("/w")[1]), 99) for k in singles]
        )
        want = sorted(
            (k, r)
            for k, r in [(w.key, r) for part, r in groups for w in part] + list(singles.items())
            if last.get(k) != r
        )
        got = rc.changes(_pending(groups, singles), present)
        assert got == want
        for members, r in groups:
            for w in members:
                last[w.key] = r
        last.update(singles)
        for i in forgotten:
            key = f"default/w{i:02d}"
            rc.forget(key)
            last.pop(key, None)
