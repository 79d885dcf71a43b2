"""All-mode edge cases where the allocator follows upstream's structured allocator
(k8s.io/dynamic-resource-allocation v0.36.2, structured/internal/incubating/allocator_incubating.go and
pools_incubating.go), one group per class a differential fuzz against it found (issue 17), and the
counter behaviour where the project keeps upstream's later fix (kubernetes#140436).

1. every request of every claim is validated before the search (``Allocate`` / ``validateDeviceRequest``);
2. an All request aborts on any incomplete or invalid pool the node sees, whatever its driver;
3. an All request fails when one of its devices has a NoSchedule/NoExecute taint it does not tolerate;
4. a pool with shared counters is seen from every node (its counter slice reaches every node);
5. shared counters are given back when a taint or a constraint rejects a device.
"""

from __future__ import annotations

from typing import Any

import pytest
from dra_helpers import claim, device_class, exact

from queueing.api.core import Node
from queueing.api.resource import ResourceClaim, ResourceSlice
from queueing.dra.allocator import AllocationOutcome, Allocator
from queueing.dra.errors import AllocationError
from queueing.dra.features import Features
from queueing.dra.inventory import Inventory

GPU = "gpu.example.com"
NIC = "nic.example.com"
N1 = Node.model_validate({"metadata": {"name": "node-1"}})
N2 = Node.model_validate({"metadata": {"name": "node-2"}})
CLASSES = [device_class("gpu", f'device.driver == "{GPU}"'), device_class("nic", f'device.driver == "{NIC}"')]


def rslice(
    name: str, driver: str, pool: str, devices: list[Any], count: int = 1, **spec: Any
) -> ResourceSlice:
    body: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": pool, "generation": 1, "resourceSliceCount": count},
        "devices": [d if isinstance(d, dict) else {"name": d} for d in devices],
    }
    if not any(k in spec for k in ("nodeName", "allNodes", "nodeSelector")):
        body["nodeName"] = "node-1"
    body.update((k, v) for k, v in spec.items() if v is not None)  # nodeName=None: no targeting
    return ResourceSlice.model_validate({"metadata": {"name": name}, "spec": body})


def gpus(n: int, pool: str = "p1", node: str = "node-1") -> ResourceSlice:
    return rslice(f"{pool}-{node}", GPU, pool, [f"gpu-{i}" for i in range(n)], nodeName=node)


def run(
    slices: list[ResourceSlice], claims: list[ResourceClaim], nodes: list[Node] | None = None
) -> AllocationOutcome:
    inv = Inventory(slices)
    return Allocator(inv, CLASSES).allocate(claims, nodes or [N1], inv.usage([]))


def devices(out: AllocationOutcome) -> list[list[str]]:
    assert out.allocated, out.reason()
    return [[f"{r.request}={r.device}" for r in ca.allocation.devices.results or []] for ca in out.claims]


ALL_GPUS = {"name": "g", "exactly": {"deviceClassName": "gpu", "allocationMode": "All"}}
INCOMPLETE_GPU_POOL = rslice("p2-part-1", GPU, "p2", ["other-0"], count=2)


# ---------------------------------------------------------------- 1. validated before the search
def test_all_request_of_a_later_claim_is_validated_although_an_earlier_claim_cannot_fit() -> None:
    """Claim a cannot fit (3 GPUs, 2 there); upstream still validates claim b's All request, which
    meets the incomplete pool p2: an error, not "does not fit"."""
    claims = [claim("a", [exact("g", "gpu", 3)]), claim("b", [ALL_GPUS])]
    with pytest.raises(AllocationError, match=r"ResourceClaim default/b: .*pool gpu\.example\.com/p2"):
        run([gpus(2), INCOMPLETE_GPU_POOL], claims)


def test_all_request_after_an_unfit_request_of_the_same_claim_is_validated() -> None:
    c = claim("a", [exact("first", "gpu", 5), ALL_GPUS])
    with pytest.raises(
        AllocationError, match=r"requests\[1\]\.exactly\.allocationMode: asks for all devices"
    ):
        run([gpus(2), INCOMPLETE_GPU_POOL], [c])


def test_every_subrequest_is_validated_although_the_first_one_fits() -> None:
    c = claim(
        "a",
        [
            {
                "name": "g",
                "firstAvailable": [
                    {"name": "one", "deviceClassName": "gpu"},
                    {"name": "all", "deviceClassName": "gpu", "allocationMode": "All"},
                ],
            }
        ],
    )
    with pytest.raises(AllocationError, match=r"firstAvailable\[1\]\.allocationMode"):
        run([gpus(2), INCOMPLETE_GPU_POOL], [c])


def test_cel_runtime_error_of_an_all_request_aborts_before_the_search() -> None:
    """Upstream evaluates an All request's selectors on every device of the node up front: a runtime
    error there aborts even though an earlier claim decides "does not fit" first."""
    broken = {
        "name": "g",
        "exactly": {
            "deviceClassName": "gpu",
            "allocationMode": "All",
            "selectors": [{"cel": {"expression": f'device.attributes["{GPU}"].model == "x"'}}],
        },
    }
    claims = [claim("a", [exact("g", "gpu", 3)]), claim("b", [broken])]
    with pytest.raises(AllocationError, match=r"ResourceClaim default/b: .*CEL runtime error"):
        run([gpus(2)], claims)


def test_the_result_limit_counts_all_devices_of_an_all_request_before_the_search() -> None:
    claims = [claim("a", [exact("g", "gpu", 3)]), claim("b", [ALL_GPUS])]
    with pytest.raises(
        AllocationError, match=r"ResourceClaim default/b: spec\.devices\.requests: asks for at least 33"
    ):
        run([gpus(33)], claims)


def test_a_subrequest_over_the_result_limit_is_skipped_not_an_error() -> None:
    """firstAvailable [All (33 devices), one]: the claim's least is 1; the All subrequest would take
    more than 32 results, which upstream treats as "not this subrequest" and tries the next."""
    c = claim(
        "a",
        [
            {
                "name": "g",
                "firstAvailable": [
                    {"name": "all", "deviceClassName": "gpu", "allocationMode": "All"},
                    {"name": "one", "deviceClassName": "gpu"},
                ],
            }
        ],
    )
    assert devices(run([gpus(33)], [c])) == [["g/one=gpu-0"]]


def test_exact_counts_never_exceed_the_result_limit_together() -> None:
    """firstAvailable [20, 1] then 20: the first subrequest would make 40 results; as upstream, the
    search moves on to the subrequest that keeps the claim within 32."""
    c = claim(
        "a",
        [
            {
                "name": "x",
                "firstAvailable": [
                    {"name": "many", "deviceClassName": "gpu", "count": 20},
                    {"name": "few", "deviceClassName": "gpu", "count": 1},
                ],
            },
            exact("y", "gpu", 20),
        ],
    )
    got = devices(run([gpus(40)], [c]))[0]
    assert len(got) == 21
    assert got[0] == "x/few=gpu-0"


# ---------------------------------------------------------------- 2. any unusable pool on the node
def test_all_request_aborts_on_another_drivers_incomplete_pool() -> None:
    nic = rslice("nics-part-1", NIC, "nics", ["nic-0"], count=2)
    with pytest.raises(AllocationError, match=r"resource pool nic\.example\.com/nics is being updated"):
        run([gpus(2), nic], [claim("a", [ALL_GPUS])])


def test_all_request_aborts_on_another_drivers_invalid_pool() -> None:
    nic = rslice("nics", NIC, "nics", ["nic-0", "nic-0"])
    with pytest.raises(AllocationError, match=r"nic\.example\.com/nics is invalid: duplicate device name"):
        run([gpus(2), nic], [claim("a", [ALL_GPUS])])


def test_an_incomplete_pool_slice_without_devices_counts_on_its_node() -> None:
    """Upstream decides which pools a node sees by their slices, not by their devices."""
    empty = rslice("nics-part-1", NIC, "nics", [], count=2)
    with pytest.raises(AllocationError, match=r"nic\.example\.com/nics is being updated"):
        run([gpus(2), empty], [claim("a", [ALL_GPUS])])


def test_an_incomplete_pool_on_another_node_does_not_count() -> None:
    nic = rslice("nics-part-1", NIC, "nics", ["nic-0"], count=2, nodeName="node-2")
    assert devices(run([gpus(2), nic], [claim("a", [ALL_GPUS])])) == [["g=gpu-0", "g=gpu-1"]]


def test_exact_count_ignores_other_incomplete_pools() -> None:
    nic = rslice("nics-part-1", NIC, "nics", ["nic-0"], count=2)
    assert devices(run([gpus(2), nic], [claim("a", [exact("g", "gpu", 2)])])) == [["g=gpu-0", "g=gpu-1"]]


# ---------------------------------------------------------------- 3. taints in All mode
def tainted_gpus(effect: str) -> ResourceSlice:
    return rslice(
        "p1",
        GPU,
        "p1",
        ["gpu-0", {"name": "gpu-1", "taints": [{"key": "broken", "value": "yes", "effect": effect}]}],
    )


@pytest.mark.parametrize("effect", ["NoSchedule", "NoExecute"])
def test_all_request_fails_on_an_untolerated_taint(effect: str) -> None:
    out = run([tainted_gpus(effect)], [claim("a", [ALL_GPUS])])
    assert not out.allocated
    assert "1 with a NoSchedule/NoExecute taint the request does not tolerate" in out.reason()


def test_all_request_takes_a_tolerated_or_harmless_tainted_device() -> None:
    tolerating = {
        "name": "g",
        "exactly": {
            "deviceClassName": "gpu",
            "allocationMode": "All",
            "tolerations": [{"key": "broken", "operator": "Exists"}],
        },
    }
    assert devices(run([tainted_gpus("NoSchedule")], [claim("a", [tolerating])])) == [["g=gpu-0", "g=gpu-1"]]
    assert devices(run([tainted_gpus("None")], [claim("a", [ALL_GPUS])])) == [["g=gpu-0", "g=gpu-1"]]


def test_a_tainted_all_subrequest_falls_back_to_the_next_one() -> None:
    c = claim(
        "a",
        [
            {
                "name": "g",
                "firstAvailable": [
                    {"name": "all", "deviceClassName": "gpu", "allocationMode": "All"},
                    {"name": "one", "deviceClassName": "gpu"},
                ],
            }
        ],
    )
    assert devices(run([tainted_gpus("NoSchedule")], [c])) == [["g/one=gpu-0"]]


def test_exact_count_skips_the_tainted_device() -> None:
    assert devices(run([tainted_gpus("NoSchedule")], [claim("a", [exact("g", "gpu", 1)])])) == [["g=gpu-0"]]


# ---------------------------------------------------------------- 4. shared counters reach every node
def mig_pool(count: int) -> list[ResourceSlice]:
    """Pool ``mig``: a counter slice (reaches every node) and a device slice on node-2."""
    counters = rslice(
        "mig-counters",
        GPU,
        "mig",
        [],
        count=count,
        sharedCounters=[{"name": "gpu-0-counters", "counters": {"memory": {"value": "80Gi"}}}],
    )
    devs = rslice(
        "mig-node-2",
        GPU,
        "mig",
        [
            {
                "name": "mig-0",
                "consumesCounters": [
                    {"counterSet": "gpu-0-counters", "counters": {"memory": {"value": "40Gi"}}}
                ],
            }
        ],
        count=count,
        nodeName="node-2",
    )
    return [counters, devs]


def test_an_incomplete_pool_with_shared_counters_counts_on_every_node() -> None:
    """The pool has no device on node-1, but its counter slice reaches every node: All on node-1
    aborts while the pool is incomplete (3 slices announced, 2 there)."""
    with pytest.raises(AllocationError, match=r"resource pool gpu\.example\.com/mig is being updated"):
        run([gpus(2), *mig_pool(3)], [claim("a", [ALL_GPUS])])


def test_a_complete_pool_with_shared_counters_elsewhere_does_not_disturb_all() -> None:
    assert devices(run([gpus(2), *mig_pool(2)], [claim("a", [ALL_GPUS])])) == [["g=gpu-0", "g=gpu-1"]]
    # and on node-2 All takes the pool's device there too
    out = run([gpus(2), *mig_pool(2)], [claim("a", [ALL_GPUS])], nodes=[N2])
    assert devices(out) == [["g=mig-0"]]


# ---------------------------------------------------------------- 5. counters given back (kubernetes#140436)
def counter_slice(devs: list[dict[str, Any]], total: str) -> ResourceSlice:
    return rslice("p1", GPU, "p1", devs, sharedCounters=[{"name": "cs", "counters": {"u": {"value": total}}}])


def uses(name: str, *, taint: bool = False, a: int = 0) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": name,
        "attributes": {"a": {"int": a}},
        "consumesCounters": [{"counterSet": "cs", "counters": {"u": {"value": "1"}}}],
    }
    if taint:
        d["taints"] = [{"key": "broken", "effect": "NoSchedule"}]
    return d


def test_a_tainted_device_does_not_keep_shared_counters() -> None:
    """Counter total 1: the tainted gpu-0 would take it first. Upstream 1.36 counts gpu-0's counters
    before its taint rejects it and never gives them back, so gpu-1 does not fit there; the project
    keeps the fixed behaviour: gpu-1 is allocated."""
    s = counter_slice([uses("gpu-0", taint=True), uses("gpu-1")], "1")
    assert devices(run([s], [claim("a", [exact("g", "gpu", 1)])])) == [["g=gpu-1"]]


def test_a_constraint_rejection_does_not_keep_shared_counters() -> None:
    """Counter total 2, two devices wanted with the same ``a``: gpu-0 (a=1) then gpu-1 (a=2) is
    rejected by the constraint. Upstream 1.36 keeps gpu-1's counter, so gpu-1 + gpu-2 no longer fit
    after backtracking; the project finds them."""
    s = counter_slice([uses("gpu-0", a=1), uses("gpu-1", a=2), uses("gpu-2", a=2)], "2")
    c = claim("a", [exact("g", "gpu", 2)], [{"matchAttribute": f"{GPU}/a"}])
    assert devices(run([s], [c])) == [["g=gpu-1", "g=gpu-2"]]


# ---------------------------------------------------------------- pool order (from upstream's GatherPools)
def test_pools_with_binding_conditions_come_last() -> None:
    """Pool ``a`` sorts first, but its device has binding conditions: upstream tries the pools with
    such devices after all others, so ExactCount takes pool ``b``'s device and All lists it first."""
    a = rslice(
        "a",
        GPU,
        "a",
        [{"name": "gpu-a", "bindingConditions": ["ready"], "bindingFailureConditions": ["failed"]}],
    )
    b = rslice("b", GPU, "b", ["gpu-b"])
    assert devices(run([a, b], [claim("c", [exact("g", "gpu", 1)])])) == [["g=gpu-b"]]
    assert devices(run([a, b], [claim("c", [ALL_GPUS])])) == [["g=gpu-b", "g=gpu-a"]]


def test_devices_with_binding_conditions_are_not_allocated_while_the_gate_is_off() -> None:
    s = rslice(
        "a",
        GPU,
        "a",
        [{"name": "gpu-a", "bindingConditions": ["ready"], "bindingFailureConditions": ["failed"]}],
    )
    inv = Inventory([s])
    on = Allocator(inv, CLASSES).allocate([claim("c", [exact("g", "gpu", 1)])], [N1], inv.usage([]))
    assert devices(on) == [["g=gpu-a"]]
    off = Allocator(inv, CLASSES, features=Features.parse("DRADeviceBindingConditions=false"))
    assert not off.allocate([claim("c", [exact("g", "gpu", 1)])], [N1], inv.usage([])).allocated
