"""``place_simple`` (a gang of simple pods placed without per-pod objects) against ``place_gang``, and
``DraPlacer.place`` through it against the placer's general path: on varied clusters (node-local
GPUs, floating pools, devices with multiple allocations, partitionable H200s with MIG slices, node
cpu, taints, selectors, devices already taken, work bounds) and gangs (several pod sets, several
claims per pod, selectors; constraints, firstAvailable, admin access and shared claims, which must
fall back), the fast path either gives up or gives exactly what the general path gives, and leaves
the state as it found it."""

from __future__ import annotations

import json
import random
from fractions import Fraction
from typing import Any

import pytest
from dra_helpers import device_class, load
from test_free_index import floating, shared_gpus
from test_gang import DRIVER, GPU

from queueing.api.base import ObjectMeta
from queueing.api.core import Node, Pod, PodSpec, PodTemplateSpec
from queueing.api.resource import DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice
from queueing.dra.errors import AllocationError
from queueing.dra.gang import ClusterState, place_gang, place_simple
from queueing.dra.inventory import Pick
from queueing.scheduling import dra_placer
from queueing.scheduling.dra_placer import ClaimRef, DraPlacer, DraPodSet, DraRequest, DraState
from queueing.scheduling.placer import Placement, PlacementFailure
from queueing.scheduling.snapshot import PodSetInfo, WorkloadInfo

MIG_NODES, MIG_SLICES, MIG_CLASSES = load("h200-mig-1gpu.yaml")
PROFILES = ("1g-18gb", "1g-35gb", "2g-35gb", "3g-71gb", "7g-141gb")
GPU_FAST = device_class("fast", f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].model == "a"')


def _renamed(obj: Any, old: str, new: str) -> Any:
    return type(obj).model_validate(json.loads(json.dumps(obj.to_dict()).replace(old, new)))


def mig_node(name: str) -> tuple[Node, list[ResourceSlice]]:
    """The one-GPU H200 of the fixture (a partitionable GPU and its MIG slices), as node ``name``."""
    old = MIG_NODES[0].name
    return _renamed(MIG_NODES[0], old, name), [_renamed(s, old, name) for s in MIG_SLICES]


def node(name: str, rng: random.Random) -> Node:
    spec: dict[str, Any] = {}
    if rng.random() < 0.15:
        spec["taints"] = [{"key": "t", "value": "x", "effect": "NoSchedule"}]
    if rng.random() < 0.05:
        spec["unschedulable"] = True
    status: dict[str, Any] = {}
    if rng.random() < 0.9:
        alloc = {"cpu": rng.choice(["2", "3", "4", "64"]), "memory": "64Gi", "pods": rng.choice(["3", "110"])}
        if rng.random() < 0.2:
            alloc["example.com/foo"] = rng.choice(["1", "4"])
        status["allocatable"] = alloc
    return Node.model_validate(
        {
            "metadata": {"name": name, "labels": {"zone": rng.choice("ab")}},
            "spec": spec,
            "status": status,
        }
    )


def gpus(node_name: str, n: int, rng: random.Random) -> ResourceSlice:
    devices = [
        {
            "name": f"gpu-{i}",
            "attributes": {"index": {"int": i}, "model": {"string": rng.choice("ab")}},
            "capacity": {"memory": {"value": rng.choice(["40Gi", "80Gi"])}},
        }
        for i in range(n)
    ]
    return ResourceSlice.model_validate(
        {
            "metadata": {"name": f"{node_name}-gpus"},
            "spec": {
                "driver": DRIVER,
                "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
                "nodeName": node_name,
                "devices": devices,
            },
        }
    )


def _req(name: str, cls: str, count: int = 1, *selectors: str, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": cls, "count": count} | extra
    if selectors:
        body["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"name": name, "exactly": body}


def _mig(profile: str) -> str:
    return f"device.attributes['gpu.nvidia.com'].profile == '{profile}'"


# template name -> (devices spec, simple: the fast path may take it)
TEMPLATES: dict[str, tuple[dict[str, Any], bool]] = {
    "one": ({"requests": [_req("g", "gpu")]}, True),
    "two": ({"requests": [_req("g", "gpu", 2)]}, True),
    "high": ({"requests": [_req("g", "gpu", 1, f'device.attributes["{DRIVER}"].index >= 2')]}, True),
    "pair": ({"requests": [_req("a", "gpu"), _req("b", "fast")]}, True),  # the greedy may need to backtrack
    "fast": ({"requests": [_req("g", "fast", 1)]}, True),
    "mig-small": ({"requests": [_req("m", "mig.nvidia.com", 1, _mig("1g-18gb"))]}, True),
    "mig-mixed": (
        {"requests": [_req("m", "mig.nvidia.com", 1, _mig("3g-71gb")), _req("n", "mig.nvidia.com", 2)]},
        True,
    ),
    "h200": ({"requests": [_req("g", "gpu.nvidia.com")]}, True),
    "same-model": (
        {
            "requests": [_req("g", "gpu", 2)],
            "constraints": [{"matchAttribute": f"{DRIVER}/model"}],
        },
        False,
    ),
    "either": (
        {
            "requests": [
                {
                    "name": "g",
                    "firstAvailable": [
                        {"name": "big", "deviceClassName": "gpu", "count": 2},
                        {"name": "small", "deviceClassName": "gpu", "count": 1},
                    ],
                }
            ]
        },
        False,
    ),
    "admin": ({"requests": [_req("g", "gpu", 1, adminAccess=True)]}, False),
    "tolerant": (
        {"requests": [_req("g", "gpu", 1, tolerations=[{"key": "k", "operator": "Exists"}])]},
        False,
    ),
    "mem": ({"requests": [_req("g", "gpu", 1, capacity={"requests": {"memory": "40Gi"}})]}, True),
}


def templates(namespace: str = "default") -> list[ResourceClaimTemplate]:
    return [
        ResourceClaimTemplate.model_validate(
            {"metadata": {"name": name, "namespace": namespace}, "spec": {"spec": {"devices": devices}}}
        )
        for name, (devices, _) in TEMPLATES.items()
    ]


def shared_claim(name: str) -> ResourceClaim:
    return ResourceClaim.model_validate(
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"devices": {"requests": [_req("g", "gpu")]}},
        }
    )


def cluster(rng: random.Random) -> tuple[list[Node], list[ResourceSlice], list[DeviceClass]]:
    nodes: list[Node] = []
    slices: list[ResourceSlice] = []
    n = rng.randint(2, 9)
    for i in range(n):
        name = f"n{i}"
        if rng.random() < 0.2:
            nd, ss = mig_node(name)
            nodes.append(nd)
            slices.extend(ss)
            continue
        nodes.append(node(name, rng))
        k = rng.choice([0, 1, 2, 4, 4, 8])
        if k:
            slices.append(gpus(name, k, rng))
    if rng.random() < 0.15:
        slices.append(floating("pool-f", 2, {"zone": "a"}))
    if rng.random() < 0.15:
        slices.append(shared_gpus(f"n{rng.randrange(n)}", 1))
    return nodes, slices, [GPU, GPU_FAST, *MIG_CLASSES]


def spec(rng: random.Random, claims: list[tuple[str, str]]) -> PodSpec:
    """A pod spec with claims (name in the spec, template or ``shared:<claim>``)."""
    body: dict[str, Any] = {
        "containers": [
            {
                "name": "c",
                "resources": {
                    "requests": {"cpu": rng.choice(["500m", "1", "2"]), "memory": "1Gi"}
                    | ({"example.com/foo": "1"} if rng.random() < 0.1 else {}),
                    "claims": [{"name": n} for n, _ in claims],
                },
            }
        ],
        "resourceClaims": [
            {"name": n, "resourceClaimName": src[7:]}
            if src.startswith("shared:")
            else {"name": n, "resourceClaimTemplateName": src}
            for n, src in claims
        ],
    }
    if rng.random() < 0.2:
        body["nodeSelector"] = {"zone": rng.choice("ab")}
    if rng.random() < 0.3:
        body["tolerations"] = [{"key": "t", "operator": "Exists"}]
    return PodSpec.model_validate(body)


def claim_choice(rng: random.Random, simple_only: bool) -> list[tuple[str, str]]:
    names = [n for n, (_, simple) in TEMPLATES.items() if simple or not simple_only]
    k = rng.choice([0, 1, 1, 1, 2])
    out = [(f"c{j}", rng.choice(names)) for j in range(k)]
    if not simple_only and rng.random() < 0.1:
        out.append(("s", "shared:common"))
    return out


def take_some(state: ClusterState, rng: random.Random) -> None:
    for d in sorted(state.inventory.devices.values(), key=lambda d: d.order):
        if not d.multi and rng.random() < 0.25:
            state.usage.take(Pick(d, "r", False, d.consumes, ()))


def snapshot(state: ClusterState) -> tuple[object, ...]:
    u = state.usage
    return (
        list(u.devices.items()),
        list(u.counters.items()),
        list(u.capacity.items()),
        list(u.node_taken.items()),
        list(u.block_free),
        [list(x.items()) for x in state.used],
    )


def general(r: Any) -> tuple[object, ...]:
    assert r.placed
    return (
        tuple(p.node for p in r.placements),
        tuple(tuple(ca.picks for ca in p.claims) for p in r.placements),
        tuple(p.node_resources for p in r.placements),
        r.node_checks,
    )


@pytest.mark.parametrize("seed", range(120))
def test_place_simple_is_place_gang_or_gives_up(seed: int) -> None:
    rng = random.Random(seed)
    nodes, slices, classes = cluster(rng)
    state = ClusterState(nodes, slices, classes, claims=[shared_claim("common")], templates=templates())
    take_some(state, rng)
    bound = rng.choice([None, None, 3, 10, 40])
    kw: dict[str, Any] = {} if bound is None else {"max_node_checks": bound}
    for _ in range(4):
        groups = []
        pods: list[Pod] = []
        for g in range(rng.randint(1, 3)):
            sp = spec(rng, claim_choice(rng, simple_only=rng.random() < 0.7))
            n = rng.randint(1, 5)
            groups.append((sp, "default", n))
            pods.extend(
                Pod(metadata=ObjectMeta(name=f"p{g}-{i}", namespace="default"), spec=sp) for i in range(n)
            )
        assert place_simple(groups, state, **kw) is None or not any(
            (id(sp), "default") not in state._spec_static for sp, _, _ in groups
        )
        try:
            r = place_gang(pods, state, **kw)
        except AllocationError:
            continue
        if r.transaction is not None:
            r.transaction.discard()
        before = snapshot(state)
        got = place_simple(groups, state, **kw)
        assert snapshot(state) == before
        if got is None:
            continue
        assert len(got.pod_sets) == len(groups)
        want = general(r)
        claims = tuple(
            tuple(ps.claims) for ps, (_, _, n) in zip(got.pod_sets, groups, strict=True) for _ in range(n)
        )
        assert (
            tuple(state.nodes[i].name for i in got.nodes),
            got.picks,
            tuple(ps.resources for ps, (_, _, n) in zip(got.pod_sets, groups, strict=True) for _ in range(n)),
            got.node_checks,
        ) == want
        # claim names in spec order, results as the allocator gave them
        for p, cs in zip(r.placements, claims, strict=True):
            assert [f"{p.pod.split('/')[1]}-{name}" for name, _ in cs] == [ca.name for ca in p.claims]
            for ca in p.claims:
                assert ca.allocation.devices is not None
                assert state.allocator.plain_results(ca.picks) == tuple(ca.allocation.devices.results or ())


def test_place_simple_takes_the_common_case() -> None:
    rng = random.Random(7)
    names = [f"n{i}" for i in range(6)]
    state = ClusterState(
        [node(n, random.Random(1)) for n in names],
        [gpus(n, 8, rng) for n in names],
        [GPU],
        templates=templates(),
    )
    sp = PodSpec.model_validate(
        {
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}],
            "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "one"}],
            "tolerations": [{"key": "t", "operator": "Exists"}],
        }
    )
    pods = [Pod(metadata=ObjectMeta(name=f"p{i}", namespace="default"), spec=sp) for i in range(12)]
    assert place_simple([(sp, "default", 12)], state) is None  # the spec was never prepared
    r = place_gang(pods, state)
    assert r.transaction is not None
    r.transaction.discard()
    got = place_simple([(sp, "default", 12)], state)
    assert got is not None
    want = general(r)
    assert (tuple(state.nodes[i].name for i in got.nodes), got.picks, got.node_checks) == (
        want[0],
        want[1],
        want[3],
    )


# ------------------------------------------------------------------------------------ the placer
def workload(name: str, pod_sets: list[tuple[str, int, PodSpec]]) -> WorkloadInfo:
    req = DraRequest(
        tuple(
            DraPodSet(
                ps,
                PodTemplateSpec(spec=sp),
                tuple(
                    ClaimRef(c.name, c.resource_claim_name, c.resource_claim_template_name)
                    for c in sp.resource_claims or []
                ),
            )
            for ps, _, sp in pod_sets
        )
    )
    return WorkloadInfo(
        namespace="default",
        name=name,
        queue_name="lq",
        pod_sets=tuple(PodSetInfo(ps, n) for ps, n, _ in pod_sets),
        placement_request=req,
    )


def _pick(p: Pick) -> tuple[object, ...]:
    return (p.device.key, p.request, p.admin_access, p.counters, p.capacity)


def outcome(pl: Placement | PlacementFailure) -> object:
    if isinstance(pl, PlacementFailure):
        return pl.message
    d = pl.detail
    assert isinstance(d, dra_placer.DraPlan)
    return (
        pl.nodes,
        list(pl.device_charges.items()),
        [
            (
                p.pod_set,
                p.index,
                p.pod,
                p.node,
                [_pick(x) for x in p.picks],
                p.shared,
                p.node_resources,
                p.claims,
                p.extended_mappings,
                [(k, [_pick(x) for x in getattr(c, "picks", ())]) for k, c in p.shared_new],
            )
            for p in d.pods
        ],
        d.unowned,
        list(d.device_classes.items()),
    )


def run_placer(seed: int, verify: bool = False) -> tuple[list[object], int]:
    rng = random.Random(seed)
    nodes, slices, classes = cluster(rng)
    placer = DraPlacer(
        nodes, slices, classes, claims=[shared_claim("common")], templates=templates(), verify=verify
    )
    shapes = [
        [
            (f"ps{j}", rng.randint(1, 4), spec(rng, claim_choice(rng, simple_only=rng.random() < 0.7)))
            for j in range(rng.randint(1, 2))
        ]
        for _ in range(3)
    ]
    state = placer.initial_state([])
    states = [state]
    out: list[object] = []
    simple = 0
    for k in range(12):
        wl = workload(f"w{k}", rng.choice(shapes))
        counts = {ps.name: rng.randint(0, ps.count) for ps in wl.pod_sets} if rng.random() < 0.2 else {}
        at = rng.choice(states)
        pl = placer.place(wl, counts, {}, at)
        out.append(outcome(pl))
        if isinstance(pl, Placement):
            simple += all(not p.shared for p in pl.detail.pods)  # type: ignore[attr-defined]
            kept = placer._kept_info(pl.detail)  # type: ignore[arg-type]
            if kept is not None:  # kept by the fast path: what ``_info`` computes
                fresh = placer._info(pl.detail)  # type: ignore[arg-type]
                assert [(id(u), r) for u, r in kept.totals] == [(id(u), r) for u, r in fresh.totals]
                assert (kept.picks, kept.taken, kept.shared) == (fresh.picks, fresh.taken, fresh.shared)
            states.append(placer.add(at, wl.key, pl))
        if rng.random() < 0.2 and len(states) > 1:
            states.append(placer.remove(states[-1], rng.choice(list(states[-1].holds) or ["x"])))
    assert isinstance(states[-1], DraState)
    return out, simple


# 695: a CEL error on a device of a floating pool; the error's message names the claim whose
# search built the node's candidate list first (the fast path must not be the one)
@pytest.mark.parametrize("seed", [*range(40), 695])
def test_placer_fast_path_equals_general_path(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = [0, 0]
    real = dra_placer.place_simple

    def counting(*a: Any, **k: Any) -> Any:
        calls[0] += 1
        got = real(*a, **k)
        calls[1] += got is not None
        return got

    monkeypatch.setattr(dra_placer, "place_simple", counting)
    fast, _ = run_placer(seed)
    assert calls[0] > 0
    # the general path alone: neither the check before the search nor ``place_simple``
    monkeypatch.setattr(dra_placer, "place_simple", lambda *a, **k: None)
    monkeypatch.setattr(DraPlacer, "_quick_miss", lambda *a, **k: None)
    slow, _ = run_placer(seed)
    assert [fast_or_miss(x) for x in fast] == [fast_or_miss(x) for x in slow]
    return None


def test_pod_plan_is_the_dataclass_made_faster() -> None:
    """``dra_placer._pod_plan`` (a PodPlan made without the frozen dataclass's ``__init__``) is the
    PodPlan its arguments make: the same fields and values, repr, type; the other fields at their
    defaults; still frozen."""
    import dataclasses

    rng = random.Random(3)
    for i in range(50):
        args = (
            rng.choice(["main", "workers"]),
            rng.randrange(100),
            f"w-{i}",
            rng.choice(["n1", "n2"]),
            tuple(range(rng.randrange(3))),
            tuple(
                (r, Fraction(rng.randrange(5), rng.choice([1, 3]))) for r in rng.sample(["cpu", "memory"], 2)
            ),
            tuple(f"c{j}" for j in range(rng.randrange(3))),
        )
        fast = dra_placer._pod_plan(*args)  # type: ignore[arg-type]
        want = dra_placer.PodPlan(*args[:5], node_resources=args[5], claims=args[6])  # type: ignore[arg-type]
        assert type(fast) is dra_placer.PodPlan
        assert [getattr(fast, f.name) for f in dataclasses.fields(want)] == [
            getattr(want, f.name) for f in dataclasses.fields(want)
        ]
        assert vars(fast) == vars(want) and repr(fast) == repr(want)
        with pytest.raises(dataclasses.FrozenInstanceError):
            fast.node = "n3"  # type: ignore[misc]


def fast_or_miss(out: object) -> object:
    """A placement as it is; a failure as a failure (``_quick_miss`` says why in its own words)."""
    return "does not fit" if isinstance(out, str) else out


@pytest.mark.parametrize("seed", range(12))
def test_placer_in_verify_mode_answers_as_without(seed: int) -> None:
    """Verify mode runs the general path beside every fast one (raising on a difference) and
    changes no answer."""
    assert run_placer(seed, verify=True)[0] == run_placer(seed)[0]


def test_charges_are_fractions() -> None:
    placer = DraPlacer(
        [node("n0", random.Random(3))], [gpus("n0", 8, random.Random(3))], [GPU], templates=templates()
    )
    sp = PodSpec.model_validate(
        {
            "containers": [{"name": "c"}],
            "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "two"}],
            "tolerations": [{"key": "t", "operator": "Exists"}],
        }
    )
    state = placer.initial_state([])
    for k in range(2):  # the first through the general path, the second through the fast one
        pl = placer.place(workload(f"w{k}", [("main", 2, sp)]), {}, {}, state)
        assert isinstance(pl, Placement)
        assert pl.device_charges["gpu"] == Fraction(4) and type(pl.device_charges["gpu"]) is Fraction


@pytest.mark.parametrize("seed", range(30))
def test_wide_clusters_skip_blocks_and_count_checks_alike(seed: int) -> None:
    # enough nodes for the search's free-device blocks (32 nodes each) to be skipped whole
    rng = random.Random(seed)
    names = [f"n{i:03d}" for i in range(rng.randint(33, 110))]
    nodes = [node(n, rng) for n in names]
    slices = [gpus(n, rng.choice([1, 2, 4]), rng) for n in names]
    state = ClusterState(nodes, slices, [GPU, GPU_FAST], templates=templates())
    full = rng.randint(0, len(names))
    for d in state.inventory.devices.values():
        if (d.node_name is not None and d.node_name < f"n{full:03d}") or rng.random() < 0.1:
            state.usage.take(Pick(d, "r", False, (), ()))
    groups = []
    pods: list[Pod] = []
    for g in range(rng.randint(1, 2)):
        sp = spec(rng, [("c", rng.choice(["one", "two", "fast"]))])
        n = rng.randint(1, 6)
        groups.append((sp, "default", n))
        pods.extend(
            Pod(metadata=ObjectMeta(name=f"p{g}-{i}", namespace="default"), spec=sp) for i in range(n)
        )
    r = place_gang(pods, state)
    if r.transaction is not None:
        r.transaction.discard()
    if not r.placed:
        assert place_simple(groups, state) is None
        return
    for bound in (r.node_checks - 1, r.node_checks, None):
        kw: dict[str, Any] = {} if bound is None else {"max_node_checks": bound}
        got = place_simple(groups, state, **kw)
        if bound is not None and bound < r.node_checks:
            assert got is None  # place_gang stops at the bound
            continue
        if got is None:
            # one pod set: identical pods, one request each; the first descent fails only where
            # no placement exists (each node takes what it can); several: the search may backtrack
            assert len(groups) > 1
            continue
        want = general(r)
        assert (tuple(state.nodes[i].name for i in got.nodes), got.picks, got.node_checks) == (
            want[0],
            want[1],
            want[3],
        )


# ------------------------------------------------------------------------------------ charges
def _charges_pick_by_pick(
    classes: dict[str, str], picks: list[Pick]
) -> tuple[dict[str, Fraction], tuple[tuple[str, str, str, str], ...]]:
    """``charges._charges`` as it was: adding pick by pick."""
    out: dict[str, Fraction] = {}
    devices = []
    for p in picks:
        if p.admin_access:
            continue
        cls = classes.get(p.request) or classes.get(p.request.split("/", 1)[0], "")
        dev = p.device
        devices.append((cls, dev.key[0], dev.key[1], dev.key[2]))
        n = out.get(cls)
        out[cls] = Fraction(1) if n is None else n + 1
        if p.capacity:
            for fq, amount in p.capacity:
                published = dev.capacity[fq][0] if fq in dev.capacity else fq.rsplit("/", 1)[-1]
                k = f"{cls}/{published}"
                have = out.get(k)
                out[k] = amount if have is None else have + amount
        elif not dev.multi:
            for published, cap in dev.capacity.values():
                k = f"{cls}/{published}"
                have = out.get(k)
                out[k] = cap.value.value if have is None else have + cap.value.value
    return out, tuple(devices)


@pytest.mark.parametrize("seed", range(30))
def test_charges_sum_as_pick_by_pick(seed: int) -> None:
    from queueing.dra.charges import _charges

    rng = random.Random(seed)
    _, slices, _ = cluster(rng)
    slices = [*slices, gpus("x", 4, rng), shared_gpus("x", 2), *mig_node("m")[1]]
    inv = ClusterState([], slices, [GPU]).inventory
    devs = sorted(inv.devices.values(), key=lambda d: d.order)
    classes = {"g": "gpu", "h/a": "fast", "h/b": "gpu", "m": "mig.nvidia.com", "x": "gpu/memory"}
    picks = []
    for _ in range(rng.randint(0, 30)):
        d = rng.choice(devs)
        cap: tuple[tuple[str, Fraction], ...] = ()
        if d.multi:
            cap = tuple(
                (q, Fraction(rng.choice([1, 3, 7]), rng.choice([1, 2]))) for q in list(d.capacity)[:1]
            ) or ((f"{DRIVER}/unknown", Fraction(5)),)
        req = rng.choice(["g", "h/a", "h/b", "h/c", "m", "x", "nope"])
        picks.append(Pick(d, req, rng.random() < 0.1, d.consumes, cap))
    got = _charges(classes, picks)
    want = _charges_pick_by_pick(classes, picks)
    assert (list(got[0].items()), got[1]) == (list(want[0].items()), want[1])
    again = _charges(classes, picks)  # the devices' capacities now come from the cache
    assert (list(again[0].items()), again[1]) == (list(want[0].items()), want[1])
    assert all(type(v) is Fraction for v in got[0].values())


# ------------------------------------------------------------------------------------ the allocator
@pytest.mark.parametrize("seed", range(80))
def test_greedy_fill_is_allocate_on_in_a_row(seed: int) -> None:
    rng = random.Random(seed)
    nodes, slices, classes = cluster(rng)
    # the second in verify mode: greedy_fill checks itself against allocate_on in a row as well
    states = [ClusterState(nodes, slices, classes, templates=templates(), verify=v) for v in (False, True)]
    busy = [rng.random() < 0.25 for _ in states[0].inventory.devices]
    for st in states:
        for d, b in zip(sorted(st.inventory.devices.values(), key=lambda d: d.order), busy, strict=True):
            if b and not d.multi:
                st.usage.take(Pick(d, "r", False, d.consumes, ()))
    names = [n for n, (_, simple) in TEMPLATES.items() if (simple and n != "mem") or rng.random() < 0.3]
    chosen = [rng.choice(names) for _ in range(rng.randint(1, 2))]
    prepared = [
        [
            st.allocator.prepare_claim(
                ResourceClaim.model_validate(
                    {
                        "metadata": {"name": f"c{j}", "namespace": "default"},
                        "spec": {"devices": TEMPLATES[t][0]},
                    }
                )
            )
            for j, t in enumerate(chosen)
        ]
        for st in states
    ]
    steps = [(ci, alts) for ci, pc in enumerate(prepared[1]) for alts in pc.requests]
    for i in range(len(nodes)):
        limit = rng.randint(0, 4)
        a, b = states
        nd = a.nodes[i]
        got, after = b.allocator.greedy_fill(prepared[1], steps, b.nodes[i], b.usage, limit)
        for one in got:
            want = a.allocator.allocate_on(prepared[0], nd, a.usage, explain=False)
            assert isinstance(want, tuple)
            assert [[_pick(p) for p in picks] for picks in one] == [
                [_pick(p) for p in ca.picks] for ca in want
            ]
        if after is None:
            assert len(got) == limit
        elif after is False:
            assert a.allocator.allocate_on(prepared[0], nd, a.usage, explain=False) is None
        else:  # only the backtracking search can tell: what it takes is not compared
            try:
                nxt = a.allocator.allocate_on(prepared[0], nd, a.usage, explain=False)
            except AllocationError:  # a CEL error on a device the search reaches
                return
            if isinstance(nxt, tuple):
                for ca in nxt:
                    for p in ca.picks:
                        a.usage.give_back(p, backtrack=True)
        assert list(a.usage.devices.items()) == list(b.usage.devices.items())
        assert list(a.usage.counters.items()) == list(b.usage.counters.items())


@pytest.mark.parametrize("seed", range(10))
def test_plain_picks_are_kept_per_candidate_list_and_request(seed: int) -> None:
    """``Allocator._plain_picks_of`` (the picks ``_fill_plain`` takes, made once per candidate list)
    is keyed by the list's identity and the request: a list equal in content but another object, a
    list whose id a kept entry of another list has (as after a list was dropped), and another
    request each get their own picks, every time the picks made afresh; in verify mode a kept
    entry that was tampered with raises."""
    from queueing.dra.verify import VerifyError

    rng = random.Random(seed)
    nodes, slices, classes = cluster(rng)
    for verify in (False, True):
        st = ClusterState(nodes, slices, classes, templates=templates(), verify=verify)
        alloc = st.allocator
        claims = [
            alloc.prepare_claim(
                ResourceClaim.model_validate(
                    {
                        "metadata": {"name": f"c{t}", "namespace": "default"},
                        "spec": {"devices": TEMPLATES[t][0]},
                    }
                )
            )
            for t in ("one", "two", "high", "fast")
        ]
        lists = [alloc.candidates(alts[0], nd) for pc in claims for alts in pc.requests for nd in st.nodes]
        lists = [c for c in lists if alloc._list_flags(c)[2]]
        assert lists, "some candidate lists are plain"
        for _ in range(40):
            cands = rng.choice(lists)
            if rng.random() < 0.3:
                cands = tuple(list(cands))  # equal, another object when not empty
            if rng.random() < 0.2:  # another list's entry under this list's id
                other = rng.choice(lists)
                alloc._plain_picks[(id(cands), "r")] = (other, *alloc._plain_picks_of(other, "r"))
            request = rng.choice(["r", "g", "a/b"])
            keys, got = alloc._plain_picks_of(cands, request)
            want = tuple(Pick(c.dev, request, False, c.dev.consumes, c.capacity) for c in cands)
            assert [_pick(p) for p in got] == [_pick(p) for p in want]
            assert keys == tuple(c.dev.key for c in cands)
            assert alloc._plain_picks_of(cands, request)[1] is got  # kept
        if verify and lists[0]:
            cands = lists[0]
            wrong = tuple(Pick(c.dev, "other", False, c.dev.consumes, c.capacity) for c in cands)
            alloc._plain_picks[(id(cands), "r")] = (cands, tuple(c.dev.key for c in cands), wrong)
            with pytest.raises(VerifyError, match="_plain_picks_of"):
                alloc._plain_picks_of(cands, "r")


def test_an_error_deep_in_the_search_leaves_nothing_taken() -> None:
    # request b's selector fails on gpu-1 (no index) after request a took gpu-0: the error aborts
    # the allocation, and gpu-0 is given back
    sl = ResourceSlice.model_validate(
        {
            "metadata": {"name": "n1-gpus"},
            "spec": {
                "driver": DRIVER,
                "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                "nodeName": "n1",
                "devices": [
                    {"name": "gpu-0", "attributes": {"index": {"int": 0}}},
                    {"name": "gpu-1"},
                    {"name": "gpu-2", "attributes": {"index": {"int": 2}}},
                ],
            },
        }
    )
    devices = {
        "requests": [_req("a", "gpu"), _req("b", "gpu", 1, f'device.attributes["{DRIVER}"].index == 0')]
    }
    t = ResourceClaimTemplate.model_validate(
        {"metadata": {"name": "t", "namespace": "default"}, "spec": {"spec": {"devices": devices}}}
    )
    state = ClusterState([node("n1", random.Random(1))], [sl], [GPU], templates=[t])
    sp = PodSpec.model_validate(
        {
            "containers": [{"name": "c"}],
            "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "t"}],
            "tolerations": [{"key": "t", "operator": "Exists"}],
        }
    )
    with pytest.raises(AllocationError, match="CEL runtime error"):
        place_gang([Pod(metadata=ObjectMeta(name="p", namespace="default"), spec=sp)], state)
    assert not any(state.usage.devices.values())


@pytest.mark.parametrize("seed", range(30))
def test_take_all_and_give_back_all_are_one_by_one(seed: int) -> None:
    rng = random.Random(seed)
    nodes, slices, classes = cluster(rng)
    states = [ClusterState(nodes, [*slices, shared_gpus("n0", 2)], classes) for _ in range(2)]
    devs = sorted(states[0].inventory.devices.values(), key=lambda d: d.order)

    def book(st: ClusterState) -> tuple[object, ...]:
        u = st.usage
        items = (u.devices, u.counters, u.capacity, u.node_taken)
        return (*(list(x.items()) for x in items), list(u.block_free), u.epoch)

    held: list[list[Pick]] = []
    for _ in range(8):
        if held and rng.random() < 0.4:
            picks = held.pop(rng.randrange(len(held)))
            for p in picks:
                states[0].usage.give_back(p)
            states[1].usage.give_back_all(picks)
        else:
            picks = []
            for _ in range(rng.randint(0, 6)):
                d = rng.choice(devs)
                cap = tuple((q, Fraction(1, 2)) for q in list(d.capacity)[:1]) if d.multi else ()
                picks.append(Pick(d, "r", rng.random() < 0.1, d.consumes, cap))
            for p in picks:
                states[0].usage.take(p)
            states[1].usage.take_all(picks)
            held.append(picks)
        assert book(states[0]) == book(states[1])


@pytest.mark.parametrize("seed", range(10))
def test_room_is_the_least_floor_of_free_over_request(seed: int) -> None:
    """``_room`` in integers where every amount is whole: the same as in Fractions."""
    from queueing.dra.gang import _NO_BOUND, _room

    rng = random.Random(seed)
    nodes, slices, classes = cluster(rng)
    st = ClusterState(nodes, slices, classes)

    def amount() -> Fraction:
        return Fraction(rng.randrange(0, 40), rng.choice([1, 1, 1, 2, 1000]))

    names = ["cpu", "memory", "pods", "example.com/x", "example.com/y"]
    for _ in range(60):
        i = rng.randrange(len(st.nodes))
        st.allocatable[i] = None if rng.random() < 0.1 else {r: amount() for r in rng.sample(names, 3)}
        st.used[i] = {r: amount() / 4 for r in rng.sample(names, 2)}
        extra = rng.choice([None, {}, {r: amount() / 8 for r in rng.sample(names, 2)}])
        requests = [(r, amount() + Fraction(1, rng.choice([1, 1, 3]))) for r in rng.sample(names, 2)]
        want = _NO_BOUND
        cap = st.allocatable[i]
        for r, need in requests:
            if "/" not in r and (cap is None or r not in cap):
                continue
            free = (cap or {}).get(r, Fraction(0)) - st.used[i].get(r, Fraction(0))
            free -= (extra or {}).get(r, Fraction(0))
            want = min(want, free // need)
        assert _room(st, i, requests, extra) == want
