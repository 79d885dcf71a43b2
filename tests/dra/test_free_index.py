"""The free-device index: blocks of nodes with the sum of their free devices (``Usage.block_free``),
kept in step by take/give_back and copied with the usage; the gang search skips blocks whose sum is
below a pod's need and must place exactly as the node-by-node scan does. Also the DRA placer's
per-node free counts for its necessary-condition check, kept in step across syncs."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_gang import DRIVER, GPU, gpus, node, pod, template

from queueing.api.core import Job, Node
from queueing.api.registry import parse_object
from queueing.api.resource import ResourceSlice
from queueing.dra.gang import ClusterState, GangResult, place_gang
from queueing.dra.inventory import Inventory, Pick, Usage
from queueing.scheduling.dra_placer import DraPlacer, DraState
from queueing.scheduling.from_api import ApiContext, workload_info
from queueing.scheduling.jobs import workload_for_job
from queueing.scheduling.placer import Placement, PlacementFailure


def floating(name: str, n: int, labels: dict[str, str]) -> ResourceSlice:
    """Devices reachable from every node with ``labels`` (a node using them is not simple)."""
    return ResourceSlice.model_validate(
        {
            "metadata": {"name": name},
            "spec": {
                "driver": DRIVER,
                "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": k, "operator": "In", "values": [v]} for k, v in labels.items()
                            ]
                        }
                    ]
                },
                "devices": [{"name": f"f-{i}"} for i in range(n)],
            },
        }
    )


def shared_gpus(node_name: str, n: int) -> ResourceSlice:
    """Node-local devices that allow multiple allocations (no bound from counting)."""
    return ResourceSlice.model_validate(
        {
            "metadata": {"name": f"{node_name}-shared"},
            "spec": {
                "driver": DRIVER,
                "pool": {"name": f"{node_name}-shared", "generation": 1, "resourceSliceCount": 1},
                "nodeName": node_name,
                "devices": [{"name": f"s-{i}", "allowMultipleAllocations": True} for i in range(n)],
            },
        }
    )


def block_sums(inv: Inventory, usage: Usage, nodes: list[Node]) -> list[int | None]:
    """Per block: the sum of ``free_on`` when every node of it is simple, else None."""
    size = 1 << usage.block_shift
    out: list[int | None] = []
    for lo in range(0, len(nodes), size):
        members = nodes[lo : lo + size]
        frees = [inv.free_on(n, usage) for n in members]
        simple = all(n.name in (usage.node_block or {}) for n in members)
        out.append(sum(f for f in frees if f is not None) if simple else None)
    return out


def check_in_step(inv: Inventory, usage: Usage, nodes: list[Node], most: int) -> None:
    for b, want in enumerate(block_sums(inv, usage, nodes)):
        if want is None:
            assert usage.block_free[b] > most  # never below any pod's need
        else:
            assert usage.block_free[b] == want


@settings(max_examples=60, deadline=None)
@given(
    node_gpus=st.lists(st.integers(0, 3), min_size=1, max_size=9),
    odd=st.sampled_from(["none", "floating", "shared"]),
    shift=st.integers(0, 2),
    ops=st.lists(st.tuples(st.integers(0, 40), st.booleans()), max_size=40),
    copy_at=st.integers(0, 40),
)
def test_block_sums_follow_take_give_back_and_copy(
    node_gpus: list[int], odd: str, shift: int, ops: list[tuple[int, bool]], copy_at: int
) -> None:
    names = [f"n{i}" for i in range(len(node_gpus))]
    nodes = [node(n, labels={"odd": "yes"} if i == len(names) - 1 else None) for i, n in enumerate(names)]
    slices = [gpus(n, k) for n, k in zip(names, node_gpus, strict=True) if k]
    if odd == "floating":
        slices.append(floating("pool-f", 2, {"odd": "yes"}))
    elif odd == "shared":
        slices.append(shared_gpus(names[-1], 1))
    inv = Inventory(slices)
    devices = sorted(inv.devices.values(), key=lambda d: d.order)
    usage = Usage()
    inv.index_free(usage, nodes, block_shift=shift)
    initial = list(usage.block_free)
    if odd != "none":  # the last node is not simple: its block is never skipped
        assert names[-1] not in (usage.node_block or {})
    most = sum(node_gpus) + 3
    taken: list[Pick] = []
    snapshot: tuple[Usage, list[Pick]] | None = None
    for step, (which, take) in enumerate(ops):
        if step == copy_at:
            snapshot = (usage.copy(), list(taken))
        if take and devices:
            p = Pick(devices[which % len(devices)], "r", False, (), ())
            usage.take(p)  # taking a device twice (a reservation held twice) counts it once
            taken.append(p)
        elif taken:
            usage.give_back(taken.pop(which % len(taken)), backtrack=bool(which % 2))
        check_in_step(inv, usage, nodes, most)
    if snapshot is not None:
        # the copy kept its own sums: still those of its own book, and it moves on its own
        copied, picks = snapshot
        check_in_step(inv, copied, nodes, most)
        for p in picks:
            copied.give_back(p)
        check_in_step(inv, copied, nodes, most)
        assert copied.block_free == initial  # everything given back: the sums of an empty book
        check_in_step(inv, usage, nodes, most)
    # building the index over a book already in use gives the sums kept in step
    fresh = usage.copy()
    inv.index_free(fresh, nodes, block_shift=shift)
    assert fresh.block_free == usage.block_free


def test_duplicate_node_names_disable_skipping() -> None:
    inv = Inventory([gpus("n1", 2)])
    usage = Usage()
    nodes = [node("n1"), node("n1"), node("n2"), node("n3")]
    inv.index_free(usage, nodes, block_shift=1)
    assert usage.node_block == {}
    assert all(f > 100 for f in usage.block_free)


def outcome(r: GangResult) -> tuple[object, ...]:
    if r.placed:
        devices = tuple(
            (p.pod, p.node, tuple(pk.device.key for ca in p.claims for pk in ca.picks)) for p in r.placements
        )
        return True, devices, r.node_checks
    assert r.explanation is not None
    return False, r.explanation.message, r.explanation.bound_hit, r.node_checks


@settings(max_examples=80, deadline=None)
@given(
    node_gpus=st.lists(st.integers(0, 4), min_size=1, max_size=14),
    busy=st.lists(st.integers(0, 4), max_size=14),
    pod_gpus=st.lists(st.integers(1, 4), min_size=1, max_size=5),
    shift=st.integers(0, 3),
    bound=st.sampled_from([None, 1, 5, 12, 40]),
    odd=st.booleans(),
)
def test_skipping_blocks_places_exactly_like_the_scan(
    node_gpus: list[int],
    busy: list[int],
    pod_gpus: list[int],
    shift: int,
    bound: int | None,
    odd: bool,
) -> None:
    names = [f"n{i:02d}" for i in range(len(node_gpus))]
    slices = [gpus(n, k) for n, k in zip(names, node_gpus, strict=True) if k]
    if odd:
        slices.append(shared_gpus(names[len(names) // 2], 1))
    kw: dict[str, Any] = {} if bound is None else {"max_node_checks": bound}
    results = []
    for indexed in (True, False):
        state = ClusterState(
            [node(n) for n in names], slices, [GPU], templates=[template(f"t{k}", k) for k in range(1, 5)]
        )
        # some devices already taken, node by node from the first device
        by_node: dict[str, list[Any]] = {}
        for d in sorted(state.inventory.devices.values(), key=lambda d: d.order):
            if not d.multi and d.node_name is not None:
                by_node.setdefault(d.node_name, []).append(d)
        for n, k in zip(names, busy, strict=False):
            for d in by_node.get(n, [])[:k]:
                state.usage.take(Pick(d, "r", False, (), ()))
        if indexed:
            state.inventory.index_free(state.usage, state.nodes, block_shift=shift)
        else:
            state.usage.node_block = None  # the node-by-node scan
        pods = [pod(f"p{i}", tmpl=f"t{k}") for i, k in enumerate(pod_gpus)]
        before = list(state.usage.block_free)
        r = place_gang(pods, state, **kw)
        results.append(outcome(r))
        if r.transaction is not None:
            r.transaction.discard()
        assert state.usage.block_free == before  # the search gave back all it took
    assert results[0] == results[1]


def test_full_blocks_are_skipped_without_testing_their_nodes() -> None:
    names = [f"n{i:03d}" for i in range(100)]
    state = ClusterState(
        [node(n) for n in names], [gpus(n, 8) for n in names], [GPU], templates=[template("t8", 8)]
    )
    for d in state.inventory.devices.values():
        if d.node_name is not None and d.node_name < "n090":
            state.usage.take(Pick(d, "r", False, (), ()))
    calls = [0]
    free_on = state.inventory.free_on

    def counting(n: Node | None, u: Usage) -> int | None:
        calls[0] += 1
        return free_on(n, u)

    state.inventory.free_on = counting  # type: ignore[method-assign]
    r = place_gang([pod("a", tmpl="t8"), pod("b", tmpl="t8")], state)
    assert r.placed and list(r.nodes.values()) == ["n090", "n091"]
    # 90 full nodes still count as checks (the work bound means the same), but blocks of 32 full
    # nodes were skipped whole: only the partial block's nodes were looked at one by one
    assert r.node_checks == 93  # a: 90 + n090; b (same shape) from n090: n090 again, n091
    assert calls[0] < 2 * 32
    assert r.transaction is not None
    r.transaction.discard()


# ------------------------------------------------------------------------------------ the placer
def placer_and_jobs(n_nodes: int) -> tuple[DraPlacer, ApiContext]:
    names = [f"n{i}" for i in range(n_nodes)]
    tmpl = parse_object(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "t2", "namespace": "default"},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [{"name": "g", "exactly": {"deviceClassName": "gpu", "count": 2}}]
                    }
                }
            },
        }
    )
    objs = [*[node(n) for n in names], *[gpus(n, 4) for n in names], GPU, tmpl]
    placer = DraPlacer(
        [node(n) for n in names],
        [gpus(n, 4) for n in names],
        [GPU],
        templates=[tmpl],  # type: ignore[list-item]
    )
    return placer, ApiContext.from_objects(objs)  # type: ignore[arg-type]


def job(name: str, pods: int) -> Job:
    return Job.model_validate(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": name,
                "namespace": "default",
                "uid": f"u-{name}",
                "labels": {"queueing.dra.io/queue-name": "lq"},
            },
            "spec": {
                "parallelism": pods,
                "template": {
                    "spec": {
                        "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "t2"}],
                        "containers": [{"name": "m", "image": "x", "resources": {"claims": [{"name": "g"}]}}],
                    }
                },
            },
        }
    )


def test_placer_free_counts_stay_in_step_across_syncs() -> None:
    placer, ctx = placer_and_jobs(3)  # 3 nodes x 4 GPUs, pods of 2 GPUs
    infos = [workload_info(workload_for_job(job(f"w{i}", 2)), ctx) for i in range(3)]  # type: ignore[arg-type]
    state = placer.initial_state([])
    states = [state]
    for info in infos:
        pl = placer.place(info, {"main": 2}, {}, state)
        assert isinstance(pl, Placement)
        state = placer.add(state, info.key, pl)
        states.append(state)
    # every GPU is planned now: the check fails before any search, naming the best node
    late = workload_info(workload_for_job(job("late", 1)), ctx)  # type: ignore[arg-type]
    miss = placer.place(late, {"main": 1}, {}, state)
    assert isinstance(miss, PlacementFailure)
    assert "at most 0 fit; best node n0 has 0 free (2 short)" in miss.message
    # back and forth between states (removals, the same plan twice): the counts kept in step equal
    # counts built afresh for the same state
    twice = placer.add(states[1], "other/key", placer.place(infos[0], {"main": 2}, {}, states[0]))  # type: ignore[arg-type]
    # (states without a parent are brought in step by comparing every key: the pass by differences)
    unrelated = [DraState(dict(x.holds)) for x in (states[2], twice, states[0], state)]
    for s in [states[2], states[0], twice, placer.remove(state, infos[1].key), state, states[1], *unrelated]:
        placer.sync(s)
        assert placer.used_devices(s) == {
            d for ps in s.holds.values() for p in ps for pp in p.pods for d in pp.devices
        }
        kept = placer._free_counts()
        placer._free = None
        fresh = placer._free_counts()
        assert (kept.by_name, {v: c for v, c in kept.hist.items() if c}) == (
            fresh.by_name,
            {v: c for v, c in fresh.hist.items() if c},
        )
    placer.sync(placer.remove(state, infos[1].key))
    one = placer.place(late, {"main": 1}, {}, placer.remove(state, infos[1].key))
    assert isinstance(one, Placement)
    big = placer.place(late, {"main": 3}, {}, placer.remove(state, infos[1].key))
    assert isinstance(big, PlacementFailure)
    assert "at most 2 fit; best node" in big.message
