"""Property tests: the allocator's answers are valid, and its "no" agrees with brute force.

Small random worlds: one node, up to six devices with an int attribute ``a``, some consuming a shared
counter, some already allocated; one or two claims with one or two requests each, selectors on ``a``,
optional matchAttribute/distinctAttribute constraints and adminAccess. A brute-force search over all
device combinations is the oracle.

All-mode worlds add ``allocationMode: All`` requests, device taints (NoSchedule, NoExecute, None) and
tolerations, and a second pool ``q`` on the node that may be complete, incomplete, invalid or on
another node; the oracle then follows upstream's rules (k8s.io/dynamic-resource-allocation v0.36.2,
see docs/allocator.md): an All request on a node that sees an unusable pool is an error, All takes
every matching device of the usable pools and fails on an untolerated taint.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import pytest
from dra_helpers import claim, device_class
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queueing.api.core import Node
from queueing.api.resource import ResourceClaim, ResourceSlice
from queueing.dra.allocator import Allocator, SelectorCache, Shortfall
from queueing.dra.cel import SelectorCompiler
from queueing.dra.errors import AllocationError
from queueing.dra.inventory import Inventory

DRIVER = "x.example.com"
NODE = Node.model_validate({"metadata": {"name": "n"}})
CLASS = device_class("c", f'device.driver == "{DRIVER}"')
# compiled expressions are shared; the evaluation memo is not (every example reuses pool "p", generation 1)
COMPILER = SelectorCompiler()


@dataclass(frozen=True)
class Dev:
    a: int
    uses: int  # units of the shared counter (devices of pool p only)
    taken: bool
    taint: str | None = None  # effect of the device's taint, if any
    pool: int = 0  # 0: pool p (with the shared counter), 1: pool q


BLOCKING = ("NoSchedule", "NoExecute")


@dataclass(frozen=True)
class Req:
    count: int
    op: str  # "any", "==", ">="
    k: int
    admin: bool
    every: bool = False  # allocationMode: All (count ignored)
    tolerate: bool = False  # tolerates every taint

    def expr(self) -> str | None:
        if self.op == "any":
            return None
        return f'device.attributes["{DRIVER}"].a {self.op} {self.k}'

    def ok(self, d: Dev) -> bool:
        return self.op == "any" or (d.a == self.k if self.op == "==" else d.a >= self.k)


@dataclass(frozen=True)
class Claim:
    reqs: tuple[Req | tuple[Req, ...], ...]  # a tuple: firstAvailable subrequests, in order
    constraint: str | None  # None, "match", "distinct"


def options(r: Req | tuple[Req, ...]) -> tuple[Req, ...]:
    return r if isinstance(r, tuple) else (r,)


devs_st = st.lists(
    st.builds(Dev, a=st.integers(0, 2), uses=st.integers(0, 2), taken=st.booleans()), min_size=1, max_size=6
)


SOMETIMES_ADMIN = st.sampled_from([False, False, False, True])


def requests(
    admin: st.SearchStrategy[bool] = SOMETIMES_ADMIN, **extra: st.SearchStrategy[Any]
) -> st.SearchStrategy[Req]:
    return st.builds(
        Req,
        count=st.integers(1, 3),
        op=st.sampled_from(["any", "==", ">="]),
        k=st.integers(0, 2),
        admin=admin,
        **extra,
    )


def claims_of(
    reqs: st.SearchStrategy[Req | tuple[Req, ...]], constraints: list[str | None]
) -> st.SearchStrategy[Claim]:
    return st.builds(
        Claim, reqs=st.lists(reqs, min_size=1, max_size=2).map(tuple), constraint=st.sampled_from(constraints)
    )


claim_st = claims_of(requests(), [None, "match", "distinct"])


def uses(d: Dev) -> int:
    return d.uses if d.pool == 0 else 0


def world(devs: list[Dev], total: int, q: str = "none") -> tuple[list[ResourceSlice], list[ResourceClaim]]:
    """Pool p on node n with the shared counter; pool q (``q``: "none" for no slice, "ok",
    "incomplete" (one of two slices), "invalid" (a device consumes an unknown counter set) or
    "elsewhere" (on node other)) with the devices of pool 1."""
    devices: list[dict[str, Any]] = []
    q_devices: list[dict[str, Any]] = []
    for i, d in enumerate(devs):
        dev: dict[str, Any] = {"name": f"d{i}", "attributes": {"a": {"int": d.a}}}
        if uses(d):
            dev["consumesCounters"] = [{"counterSet": "cs", "counters": {"u": {"value": str(d.uses)}}}]
        if d.taint:
            dev["taints"] = [{"key": "t", "value": "v", "effect": d.taint}]
        (devices if d.pool == 0 else q_devices).append(dev)
    slices = []
    if q != "none":
        if q == "invalid":
            q_devices.append({"name": "bad", "consumesCounters": [{"counterSet": "nope", "counters": {}}]})
        slices.append(
            ResourceSlice.model_validate(
                {
                    "metadata": {"name": "q"},
                    "spec": {
                        "driver": DRIVER,
                        "pool": {
                            "name": "q",
                            "generation": 1,
                            "resourceSliceCount": 2 if q == "incomplete" else 1,
                        },
                        "nodeName": "other" if q == "elsewhere" else "n",
                        "devices": q_devices,
                    },
                }
            )
        )
    s = ResourceSlice.model_validate(
        {
            "metadata": {"name": "s"},
            "spec": {
                "driver": DRIVER,
                "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                "nodeName": "n",
                "sharedCounters": [{"name": "cs", "counters": {"u": {"value": str(total)}}}],
                "devices": devices,
            },
        }
    )
    results = [
        {"request": "r", "driver": DRIVER, "pool": "pq"[d.pool], "device": f"d{i}"}
        for i, d in enumerate(devs)
        if d.taken
    ]
    used = ResourceClaim.model_validate(
        {
            "metadata": {"name": "used", "namespace": "o"},
            "status": {"allocation": {"devices": {"results": results}}},
        }
    )
    return [s, *slices], [used] if results else []


def to_claims(claims: list[Claim]) -> list[ResourceClaim]:
    out = []
    for ci, c in enumerate(claims):
        reqs = []
        for ri, rr in enumerate(c.reqs):
            bodies = []
            for r in options(rr):
                body: dict[str, Any] = {"deviceClassName": "c"}
                if r.every:
                    body["allocationMode"] = "All"
                else:
                    body["count"] = r.count
                if r.expr():
                    body["selectors"] = [{"cel": {"expression": r.expr()}}]
                if r.admin:
                    body["adminAccess"] = True
                if r.tolerate:
                    body["tolerations"] = [{"key": "t", "operator": "Exists"}]
                bodies.append(body)
            if isinstance(rr, tuple):
                subs = [{"name": f"s{k}"} | b for k, b in enumerate(bodies)]
                reqs.append({"name": f"r{ri}", "firstAvailable": subs})
            else:
                reqs.append({"name": f"r{ri}", "exactly": bodies[0]})
        cons = None
        if c.constraint == "match":
            cons = [{"matchAttribute": f"{DRIVER}/a"}]
        elif c.constraint == "distinct":
            cons = [{"distinctAttribute": f"{DRIVER}/a"}]
        out.append(claim(f"c{ci}", reqs, cons))
    return out


def brute_force(devs: list[Dev], total: int, claims: list[Claim], q: str = "none") -> bool | None:
    """Is there any assignment? Exhaustive over combinations per request; None: an error aborts
    (an All request while the node sees the incomplete or invalid pool q)."""
    slots = [(ci, options(r)) for ci, c in enumerate(claims) for r in c.reqs]
    # every request and subrequest is validated before the search
    if q in ("incomplete", "invalid") and any(r.every for _, opts in slots for r in opts):
        return None
    usable = [d.pool == 0 or q == "ok" for d in devs]

    def blocked(d: Dev, r: Req) -> bool:
        return d.taint in BLOCKING and not r.tolerate

    def rec(i: int, used: frozenset[int], counter: int, picked: dict[int, list[int]]) -> bool:
        if i == len(slots):
            for ci, c in enumerate(claims):
                vals = [devs[d].a for d in picked.get(ci, [])]
                if c.constraint == "match" and len(set(vals)) > 1:
                    return False
                if c.constraint == "distinct" and len(set(vals)) != len(vals):
                    return False
            return True
        ci, opts = slots[i]
        return any(attempt(i, ci, r, used, counter, picked) for r in opts)

    def attempt(
        i: int, ci: int, r: Req, used: frozenset[int], counter: int, picked: dict[int, list[int]]
    ) -> bool:
        in_claim = set(picked.get(ci, []))
        if r.every:
            # every matching device of the usable pools, or no fit
            every = [j for j, d in enumerate(devs) if usable[j] and r.ok(d)]
            ok = bool(every) and all(
                not blocked(devs[j], r)
                and j not in in_claim
                and (r.admin or (not devs[j].taken and j not in used))
                for j in every
            )
            combos: Any = [tuple(every)] if ok else []
        else:
            cands = [
                j
                for j, d in enumerate(devs)
                if usable[j]
                and r.ok(d)
                and not blocked(d, r)
                and j not in in_claim
                and (r.admin or (not d.taken and j not in used))
            ]
            combos = itertools.combinations(cands, r.count)
        for combo in combos:
            extra = 0 if r.admin else sum(uses(devs[j]) for j in combo)
            if extra and counter + extra > total:  # only devices that consume counters are checked
                continue
            new_used = used if r.admin else used | frozenset(combo)
            p2 = dict(picked)
            p2[ci] = [*picked.get(ci, []), *combo]
            if rec(i + 1, new_used, counter + extra, p2):
                return True
        return False

    base = sum(uses(d) for d in devs if d.taken)
    return rec(0, frozenset(), base, {})


def check(devs: list[Dev], total: int, claims: list[Claim], q: str = "none") -> None:
    """The allocator on the world agrees with ``brute_force``, and what it allocates is valid."""
    slices, in_use = world(devs, total, q)
    inv = Inventory(slices)
    alloc = Allocator(inv, [CLASS], cache=SelectorCache(COMPILER), verify=True)
    usage = inv.usage(in_use)
    before = (dict(usage.devices), dict(usage.counters))
    expected = brute_force(devs, total, claims, q)
    if expected is None:
        with pytest.raises(
            AllocationError, match=r"asks for all devices, but resource pool x\.example\.com/q"
        ):
            alloc.allocate(to_claims(claims), [NODE], usage)
        return
    outcome = alloc.allocate(to_claims(claims), [NODE], usage)
    assert (dict(usage.devices), dict(usage.counters)) == before, "allocate() must not change usage"
    assert outcome.allocated == expected
    if not outcome.allocated:
        assert outcome.reason()
        return
    # soundness: every result satisfies selectors, taints, constraints, exclusivity and counters
    exclusive: set[str] = {f"d{i}" for i, d in enumerate(devs) if d.taken}
    counter = sum(uses(d) for d in devs if d.taken)
    for c, ca in zip(claims, outcome.claims, strict=True):
        results = ca.allocation.devices.results if ca.allocation.devices else []
        assert results is not None
        chosen: dict[str, Req] = {}  # result request name -> its request or subrequest
        for ri, rr in enumerate(c.reqs):
            names = {res.request for res in results if res.request.split("/")[0] == f"r{ri}"}
            assert len(names) == 1, f"r{ri}: results for {names}"  # one subrequest, >= 1 device
            name = names.pop()
            r = options(rr)[int(name.split("/s")[1])] if isinstance(rr, tuple) else rr
            chosen[name] = r
            got = [res.device for res in results if res.request == name]
            if r.every:  # every matching device of the usable pools, in pool order
                usable = [d.pool == 0 or q == "ok" for d in devs]
                every = sorted((d.pool, j) for j, d in enumerate(devs) if usable[j] and r.ok(d))
                assert got == [f"d{j}" for _, j in every]
            else:
                assert len(got) == r.count
        vals = []
        seen_in_claim: set[str] = set()
        for res in results:
            r = chosen[res.request]
            d = devs[int(res.device[1:])]
            assert res.pool == "pq"[d.pool]
            assert r.ok(d), f"{res.device} violates the selector of {res.request}"
            assert d.taint not in BLOCKING or r.tolerate, f"{res.device}: taint not tolerated"
            assert res.device not in seen_in_claim
            seen_in_claim.add(res.device)
            vals.append(d.a)
            assert bool(res.admin_access) == r.admin
            if not r.admin:
                assert res.device not in exclusive, f"{res.device} allocated twice"
                exclusive.add(res.device)
                counter += uses(d)
        if c.constraint == "match":
            assert len(set(vals)) == 1
        if c.constraint == "distinct":
            assert len(set(vals)) == len(vals)
    # counters never go negative: what is consumed fits the total (when the in-use claims fit it)
    if sum(uses(d) for d in devs if d.taken) <= total:
        assert counter <= total
    else:
        assert counter == sum(uses(d) for d in devs if d.taken)
    assert all(v >= Fraction(0) for v in inv.counters.values())


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(devs=devs_st, total=st.integers(0, 6), claims=st.lists(claim_st, min_size=1, max_size=2))
def test_allocator_is_sound_and_complete(devs: list[Dev], total: int, claims: list[Claim]) -> None:
    check(devs, total, claims)


all_devs_st = st.lists(
    st.builds(
        Dev,
        a=st.integers(0, 2),
        uses=st.integers(0, 2),
        taken=st.sampled_from([False, False, True]),
        taint=st.sampled_from([None, None, None, "NoSchedule", "NoExecute", "None"]),
        pool=st.sampled_from([0, 0, 1]),
    ),
    min_size=1,
    max_size=6,
)
_tolerate = st.sampled_from([False, False, True])
all_claim_st = claims_of(
    st.one_of(
        requests(every=st.booleans(), tolerate=_tolerate),
        # firstAvailable: subrequests have no adminAccess
        st.tuples(*[requests(admin=st.just(False), every=st.booleans(), tolerate=_tolerate)] * 2),
    ),
    [None, None, "match", "distinct"],
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    devs=all_devs_st,
    total=st.integers(0, 6),
    claims=st.lists(all_claim_st, min_size=1, max_size=2),
    q=st.sampled_from(["none", "ok", "incomplete", "invalid", "elsewhere"]),
)
def test_all_mode_taints_and_unusable_pools_as_upstream(
    devs: list[Dev], total: int, claims: list[Claim], q: str
) -> None:
    """All requests, taints and a second pool that may be unusable or elsewhere: errors, fits and
    misses as the oracle decides with upstream's rules; what is allocated is valid."""
    check(devs, total, claims, q)


def _answer(got: object) -> object:
    """``allocate_on``'s answer as a value: the devices per claim, or the miss with its explanation."""
    if isinstance(got, tuple):
        return [[(p.request, p.device.key) for p in ca.picks] for ca in got]
    assert isinstance(got, Shortfall)
    return (got.bound_hit, got.claim, got.request, got.detail)


class _GeneralOnly(Allocator):
    """The allocator without its greedy first path: every search through ``_solve``."""

    def _greedy(self, *args: object) -> bool:
        return False


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    devs=devs_st,
    total=st.integers(0, 6),
    claims=st.lists(claim_st, min_size=1, max_size=2),
    max_steps=st.sampled_from([1, 2, 3, 5, 8, 200_000]),
)
def test_greedy_path_is_the_general_search(
    devs: list[Dev], total: int, claims: list[Claim], max_steps: int
) -> None:
    """``allocate_on`` answers exactly as the general depth-first search alone: the same devices per
    claim, the same usage afterwards, the same step-bound hits (small bounds included); and so does
    it in verify mode (which raises where the greedy path differs from the search)."""
    slices, in_use = world(devs, total)
    outs = []
    for cls, verify in ((Allocator, False), (_GeneralOnly, False), (Allocator, True)):
        inv = Inventory(slices)
        alloc = cls(inv, [CLASS], cache=SelectorCache(COMPILER), max_steps=max_steps, verify=verify)
        usage = inv.usage(in_use)
        got = alloc.allocate_on(alloc.prepare(to_claims(claims)), NODE, usage, explain=True)
        answer = _answer(got)
        outs.append((answer, dict(usage.devices), dict(usage.counters), usage.epoch))
    assert outs[0] == outs[1] == outs[2]


class _AlwaysOrdered(Allocator):
    """The allocator without the ``_none_placeable`` short cut: every ordered search orders its
    candidates and searches."""

    def _none_placeable(self, *args: object) -> bool:
        return False


def _reversed(cands: tuple[object, ...], node: object, usage: object) -> tuple[object, ...]:
    return tuple(reversed(cands))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    devs=devs_st,
    total=st.integers(0, 6),
    claims=st.lists(claim_st, min_size=1, max_size=2),
    max_steps=st.sampled_from([1, 2, 3, 5, 8, 200_000]),
)
def test_no_placeable_device_is_the_ordered_search(
    devs: list[Dev], total: int, claims: list[Claim], max_steps: int
) -> None:
    """Under an order (a placement score's), ``allocate_on`` answers a request none of whose devices
    can be taken without ordering them (``_none_placeable``): exactly as the ordered search (the same
    devices or the same miss and explanation, the same usage and failure memo, the same step-bound
    hits, small bounds included), and so in verify mode (which searches again where it skips)."""
    slices, in_use = world(devs, total)
    outs = []
    for cls, verify in ((Allocator, False), (_AlwaysOrdered, False), (Allocator, True)):
        inv = Inventory(slices)
        alloc = cls(inv, [CLASS], cache=SelectorCache(COMPILER), max_steps=max_steps, verify=verify)
        usage = inv.usage(in_use)
        prepared = alloc.prepare(to_claims(claims))
        got = alloc.allocate_on(prepared, NODE, usage, explain=True, order=_reversed)
        answer = _answer(got)
        shapes = tuple(pc.shape_id for pc in prepared)
        outs.append(
            (
                answer,
                dict(usage.devices),
                dict(usage.counters),
                usage.epoch,
                alloc.known_misfit(shapes, NODE, usage),
            )
        )
    assert outs[0] == outs[1] == outs[2]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(devs=all_devs_st, total=st.integers(0, 6), claims=st.lists(all_claim_st, min_size=1, max_size=2))
def test_devices_in_class_counted_once_per_node(devs: list[Dev], total: int, claims: list[Claim]) -> None:
    """Misses explain with ``devices_in_class``, counted once per class and node: after searches
    that explained misses (and took devices), the kept count is a fresh allocator's count, and a
    verify-mode allocator, which counts again on every hit, agrees with its memo."""
    slices, in_use = world(devs, total)
    inv = Inventory(slices)
    kept = Allocator(inv, [CLASS], cache=SelectorCache(COMPILER))
    checking = Allocator(inv, [CLASS], cache=SelectorCache(COMPILER), verify=True)
    for alloc in (kept, checking):
        usage = inv.usage(in_use)
        for _ in range(2):
            alloc.allocate_on(alloc.prepare(to_claims(claims)), NODE, usage, explain=True)
            alloc.devices_in_class(CLASS.name, NODE)
    fresh = Allocator(inv, [CLASS], cache=SelectorCache(COMPILER))
    want = fresh.devices_in_class(CLASS.name, NODE)
    assert kept.devices_in_class(CLASS.name, NODE) == want == checking.devices_in_class(CLASS.name, NODE)
    assert kept.devices_in_class("no-such-class", NODE) == 0


# ---------------------------------------------------------------- consumable capacity
NIC = device_class("nic", f'device.driver == "{DRIVER}"')


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    caps=st.lists(st.tuples(st.integers(1, 10), st.integers(0, 10)), min_size=1, max_size=3),
    asks=st.lists(st.tuples(st.integers(1, 2), st.integers(1, 6)), min_size=1, max_size=3),
)
def test_shared_capacity_never_overcommitted(
    caps: list[tuple[int, int]], asks: list[tuple[int, int]]
) -> None:
    """Devices with allowMultipleAllocations and bandwidth cap*10G, ``used``*10G (≤ cap) already consumed;
    claims ask ``count`` distinct devices with ``bw``*10G each. Brute force decides whether it fits."""
    caps = [(c, min(u, c)) for c, u in caps]
    devices = [
        {"name": f"nic{i}", "allowMultipleAllocations": True, "capacity": {"bw": {"value": f"{c * 10}G"}}}
        for i, (c, _) in enumerate(caps)
    ]
    s = ResourceSlice.model_validate(
        {
            "metadata": {"name": "s"},
            "spec": {
                "driver": DRIVER,
                "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                "nodeName": "n",
                "devices": devices,
            },
        }
    )
    in_use = [
        ResourceClaim.model_validate(
            {
                "metadata": {"name": f"u{i}", "namespace": "o"},
                "status": {
                    "allocation": {
                        "devices": {
                            "results": [
                                {
                                    "request": "r",
                                    "driver": DRIVER,
                                    "pool": "p",
                                    "device": f"nic{i}",
                                    "shareID": f"00000000-0000-0000-0000-{i:012d}",
                                    "consumedCapacity": {"bw": f"{u * 10}G"},
                                }
                            ]
                        }
                    }
                },
            }
        )
        for i, (_, u) in enumerate(caps)
        if u
    ]
    claims = [
        claim(
            f"c{j}",
            [
                {
                    "name": "r",
                    "exactly": {
                        "deviceClassName": "nic",
                        "count": n,
                        "capacity": {"requests": {"bw": f"{bw * 10}G"}},
                    },
                }
            ],
        )
        for j, (n, bw) in enumerate(asks)
    ]
    inv = Inventory([s])
    out = Allocator(inv, [NIC], cache=SelectorCache(COMPILER), verify=True).allocate(
        claims, [NODE], inv.usage(in_use)
    )

    free0 = [c - u for c, u in caps]

    def brute(j: int, free: list[int]) -> bool:
        if j == len(asks):
            return True
        n, bw = asks[j]
        for combo in itertools.combinations(range(len(caps)), n):
            if all(free[i] >= bw for i in combo):
                f2 = list(free)
                for i in combo:
                    f2[i] -= bw
                if brute(j + 1, f2):
                    return True
        return False

    assert out.allocated == brute(0, free0)
    if out.allocated:
        left = list(free0)
        share_ids = set()
        for ca in out.claims:
            results = ca.allocation.devices.results if ca.allocation.devices else None
            assert results is not None
            names = [r.device for r in results]
            assert len(names) == len(set(names))  # distinct devices within one request
            for r in results:
                assert r.share_id and r.share_id not in share_ids
                share_ids.add(r.share_id)
                assert r.consumed_capacity is not None
                left[int(r.device[3:])] -= int(r.consumed_capacity["bw"].value / 10**10)
        assert all(x >= 0 for x in left), "capacity over-committed"
