"""DraState values derived by ``DraPlacer.add``/``remove``: their holds behave exactly as dict copies
changed in place (items, order, lookups), and the placer's ClusterState follows any state of a long
derivation tree (checkpoints, branches) by the difference, ending where a fresh placer would."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st
from test_free_index import job, placer_and_jobs

from queueing.scheduling.dra_placer import _MAX_DEPTH, DraPlacer, DraPlan, DraState, _FreeCounts, _Holds
from queueing.scheduling.from_api import workload_info
from queueing.scheduling.jobs import workload_for_job
from queueing.scheduling.placer import Placement

# an operation on an earlier mapping (by index): set key to a value, or delete a key it has
op_st = st.tuples(st.integers(0, 10_000), st.integers(0, 7), st.integers(0, 3), st.booleans())


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(op_st, max_size=150), base_size=st.integers(0, 12))
def test_holds_are_dict_copies(ops: list[tuple[int, int, int, bool]], base_size: int) -> None:
    plans = [(DraPlan(()),) for _ in range(4)]
    base = {f"b{i}": plans[i % 4] for i in range(base_size)}
    refs: list[dict[str, tuple[DraPlan, ...]]] = [base]
    holds: list[object] = [base]
    for at, k, v, delete in ops:
        i = at % len(refs)
        ref = dict(refs[i])
        key = f"k{k}" if k < 6 or not ref else next(iter(ref))
        if delete and key in ref:
            del ref[key]
            h = _Holds.derive(holds[i], key, None)  # type: ignore[arg-type]
        elif delete:
            continue  # ``remove`` of a key that is not there changes nothing
        else:
            ref[key] = plans[v]
            h = _Holds.derive(holds[i], key, plans[v])  # type: ignore[arg-type]
        refs.append(ref)
        holds.append(h)
        assert list(h.items()) == list(ref.items())
        assert len(h) == len(ref) and list(h) == list(ref)
        for probe in (key, "k0", "k5", "b0", "missing"):
            assert (probe in h) == (probe in ref)
            assert h.get(probe) is ref.get(probe)
        assert DraState(h) == DraState(ref)


def _devices(state: DraState) -> Counter[tuple[str, str, str]]:
    return Counter(d for ps in state.holds.values() for p in ps for pp in p.pods for d in pp.devices)


def _check(placer: DraPlacer, state: DraState) -> None:
    placer.sync(state)
    taken = Counter({k: n for k, n in placer.cluster.usage.devices.items() if n})
    assert taken == _devices(state)


def test_long_derivation_trees_stay_in_step() -> None:
    placer, ctx = placer_and_jobs(4)
    infos = [workload_info(workload_for_job(job(f"w{i}", 1)), ctx) for i in range(4)]  # type: ignore[arg-type]
    root = placer.initial_state([])
    placements = []
    for info in infos:
        pl = placer.place(info, {"main": 1}, {}, root)
        assert isinstance(pl, Placement)
        placements.append(pl)
    rng = random.Random(7)
    states = [root]
    for _ in range(3 * _MAX_DEPTH // 2):
        # mostly extend the newest state, sometimes branch off an older one
        s = states[-1] if rng.random() < 0.8 else rng.choice(states[-200:])
        key = f"k{rng.randrange(6)}"
        if key in s.holds and rng.random() < 0.5:
            s = placer.remove(s, key)
        else:
            s = placer.add(s, key, rng.choice(placements))
        states.append(s)
    related = 0
    for s in [*rng.sample(states, 150), root, states[-1]]:
        if placer._synced is not None and placer._delta(s) is not None:
            related += 1
        _check(placer, s)
    assert related > 100  # most syncs go by the difference
    fresh, _ = placer_and_jobs(4)
    fresh.sync(states[-1])
    assert fresh.cluster.usage.devices == {k: n for k, n in placer.cluster.usage.devices.items() if n}


@settings(max_examples=80, deadline=None)
@given(
    nodes=st.lists(st.tuples(st.sampled_from(["a", "bb", "ccc", "dddd"]), st.integers(0, 3)), min_size=1),
)
def test_quick_miss_best_node_is_the_first_shortest(nodes: list[tuple[str, int]]) -> None:
    """``_FreeCounts.by_length``: its first node with a property is the one ``min(..., key=len)``
    finds over the nodes in cluster order (the shortest name of those with most free devices,
    the first in cluster order among names as long)."""
    names = [f"{stem}{i % 10}" for i, (stem, _) in enumerate(nodes)]
    free = {n: v for n, (_, v) in zip(names, nodes, strict=True)}
    fc = _FreeCounts(names=names, by_length=sorted(names, key=len))
    have = max(free.values())
    want = min((nm for nm in fc.names if free[nm] == have), key=len)
    assert next(nm for nm in fc.by_length if free[nm] == have) == want


def test_node_resources_add_and_take_back_exactly() -> None:
    """``_apply``/``_unapply`` add whole amounts as integers: the same Fractions as adding them."""
    from fractions import Fraction

    from queueing.scheduling.dra_placer import PodPlan

    placer, _ = placer_and_jobs(3)
    rng = random.Random(3)
    cs = placer.cluster
    want = [dict(u) for u in cs.used]
    applied: list[DraPlan] = []
    for _ in range(200):
        if applied and rng.random() < 0.4:
            plan = applied.pop(rng.randrange(len(applied)))
            placer._unapply(plan)
            sign = -1
        else:
            pods = tuple(
                PodPlan(
                    "main",
                    i,
                    f"p{i}",
                    f"n{rng.randrange(3)}",
                    (),
                    node_resources=tuple(
                        (r, Fraction(rng.randrange(0, 9), rng.choice([1, 1, 2, 1000])))
                        for r in rng.sample(["cpu", "memory", "pods", "example.com/x"], 2)
                    ),
                )
                for i in range(rng.randint(1, 3))
            )
            plan = DraPlan(pods)
            placer._apply(plan)
            applied.append(plan)
            sign = 1
        for pp in plan.pods:
            i = cs.node_index[pp.node]
            for r, v in pp.node_resources:
                if v:
                    want[i][r] = want[i].get(r, Fraction(0)) + sign * v
        assert [{r: v for r, v in u.items() if v} for u in cs.used] == [
            {r: v for r, v in u.items() if v} for u in want
        ]
        assert all(type(v) is Fraction for u in cs.used for v in u.values())
