"""Benchmark the DRA allocator and gang placement on a big simulated cluster.

    python bench/allocator.py [--nodes 1000] [--gpus 8] [--fill 0.5] [--samples 2000] [--seed 1]

Cluster: ``--nodes`` nodes, each with one node-local ResourceSlice of ``--gpus`` H200-like GPUs
(attributes and capacity as NVIDIA's driver publishes them). ``--fill`` of the GPUs are in use: node i
gets k_i allocated GPUs, k_i uniform in 0..gpus (mean = gpus/2 at fill 0.5; other fills scale the
draw), recorded as allocated ResourceClaims. Classes and requests use CEL selectors.

Reported:
* one pod's claim (1 GPU, class + request selector): p50/p99 latency of ``Allocator.allocate`` over all
  nodes in name order, cold (first call: compiles, evaluates selectors) and warm (caches filled);
* a 4-GPU claim with a matchAttribute constraint, warm;
* placements/s: 1-GPU claims allocated and committed one after another (first fit) until
  ``--samples`` are placed;
* a gang of 64 pods x 8 GPUs (ResourceClaimTemplate per pod) with ``place_gang``: build of the
  ClusterState, then cold and warm placement.

The numbers go to stdout; docs/performance/allocator.md records a run. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from typing import Any

from queueing.api.core import Node, Pod
from queueing.api.resource import DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice
from queueing.dra.allocator import Allocator
from queueing.dra.gang import ClusterState, place_gang
from queueing.dra.inventory import Inventory

DRIVER = "gpu.nvidia.com"


def build(
    nodes: int, gpus: int, fill: float, seed: int
) -> tuple[list[Node], list[ResourceSlice], list[ResourceClaim]]:
    rng = random.Random(seed)
    node_objs, slices, used = [], [], []
    for i in range(nodes):
        name = f"node-{i:04d}"
        node_objs.append(
            Node.model_validate(
                {
                    "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-H200"}},
                    "status": {"allocatable": {"cpu": "192", "memory": "2Ti", "pods": "110"}},
                }
            )
        )
        devices = [
            {
                "name": f"gpu-{g}",
                "attributes": {
                    "type": {"string": "gpu"},
                    "productName": {"string": "NVIDIA H200"},
                    "architecture": {"string": "Hopper"},
                    "index": {"int": g},
                    "uuid": {"string": f"GPU-{i:08x}-{g:04x}"},
                    "driverVersion": {"version": "580.159.4"},
                    "cudaComputeCapability": {"version": "9.0.0"},
                    "nvlinkDomain": {"int": i // 8},
                },
                "capacity": {"memory": {"value": "143771Mi"}, "multiprocessors": {"value": "132"}},
            }
            for g in range(gpus)
        ]
        slices.append(
            ResourceSlice.model_validate(
                {
                    "metadata": {"name": f"{name}-{DRIVER}"},
                    "spec": {
                        "driver": DRIVER,
                        "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                        "nodeName": name,
                        "devices": devices,
                    },
                }
            )
        )
        k = min(gpus, round(rng.randint(0, gpus) * fill * 2)) if fill != 0.5 else rng.randint(0, gpus)
        if k:
            taken = sorted(rng.sample(range(gpus), k))
            used.append(
                ResourceClaim.model_validate(
                    {
                        "metadata": {"name": f"busy-{i}", "namespace": "load"},
                        "status": {
                            "allocation": {
                                "devices": {
                                    "results": [
                                        {"request": "g", "driver": DRIVER, "pool": name, "device": f"gpu-{g}"}
                                        for g in taken
                                    ]
                                }
                            }
                        },
                    }
                )
            )
    return node_objs, slices, used


CLASSES = [
    DeviceClass.model_validate(
        {
            "metadata": {"name": "gpu.nvidia.com"},
            "spec": {
                "selectors": [
                    {
                        "cel": {
                            "expression": f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == "gpu"'
                        }
                    }
                ]
            },
        }
    )
]
SELECTOR = f'device.capacity["{DRIVER}"].memory.compareTo(quantity("80Gi")) >= 0'


def claim(name: str, count: int = 1, match: bool = False) -> ResourceClaim:
    devices: dict[str, Any] = {
        "requests": [
            {
                "name": "gpus",
                "exactly": {
                    "deviceClassName": "gpu.nvidia.com",
                    "count": count,
                    "selectors": [{"cel": {"expression": SELECTOR}}],
                },
            }
        ]
    }
    if match:
        devices["constraints"] = [{"matchAttribute": f"{DRIVER}/nvlinkDomain"}]
    return ResourceClaim.model_validate(
        {"metadata": {"name": name, "namespace": "bench"}, "spec": {"devices": devices}}
    )


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(p * len(s)))]


def ms(x: float) -> str:
    return f"{x * 1000:.3f} ms"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--fill", type=float, default=0.5)
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--gang", type=int, default=64, help="pods in the gang (each asks for --gpus GPUs)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    t0 = time.perf_counter()
    nodes, slices, used = build(args.nodes, args.gpus, args.fill, args.seed)
    t_objects = time.perf_counter() - t0
    t0 = time.perf_counter()
    inv = Inventory(slices)
    allocator = Allocator(inv, CLASSES)
    usage = inv.usage(used)
    t_inv = time.perf_counter() - t0
    total = args.nodes * args.gpus
    print(
        f"cluster: {args.nodes} nodes x {args.gpus} GPUs = {total} devices, {len(usage.devices)} in use "
        f"({len(usage.devices) / total:.0%})"
    )
    print(f"  build objects {t_objects:.2f} s, inventory + usage {t_inv:.2f} s")

    # one pod's claim: cold, then warm
    t0 = time.perf_counter()
    out = allocator.allocate([claim("cold")], nodes, usage)
    cold = time.perf_counter() - t0
    assert out.allocated
    lat = []
    for n in range(args.samples):
        c = claim(f"c{n}")
        t0 = time.perf_counter()
        out = allocator.allocate([c], nodes, usage)
        lat.append(time.perf_counter() - t0)
        assert out.allocated
    print(
        f"one pod, 1 GPU claim: cold {ms(cold)}; warm p50 {ms(pct(lat, 0.5))}, p99 {ms(pct(lat, 0.99))}, "
        f"mean {ms(statistics.mean(lat))} (n={len(lat)}), chosen node {out.node}"
    )

    lat4 = []
    for n in range(min(args.samples, 500)):
        c = claim(f"m{n}", count=4, match=True)
        t0 = time.perf_counter()
        out = allocator.allocate([c], nodes, usage)
        lat4.append(time.perf_counter() - t0)
    print(
        f"one pod, 4 GPUs + matchAttribute: warm p50 {ms(pct(lat4, 0.5))}, p99 {ms(pct(lat4, 0.99))} "
        f"(allocated={out.allocated}, node {out.node})"
    )

    # placements/s: allocate and commit one after another (claim objects built outside the timing)
    free = total - len(usage.devices)
    n_place = min(args.samples, free)
    claims = [claim(f"p{n}") for n in range(n_place)]

    def place(alloc: Allocator) -> tuple[int, float, float]:
        u = inv.usage(used)
        t0 = time.perf_counter()
        placed = 0
        for c in claims:
            out = alloc.allocate([c], nodes, u)
            if not out.allocated:
                break
            for ca in out.claims:
                for p in ca.picks:
                    u.take(p)
            placed += 1
        return placed, time.perf_counter() - t0, len(u.devices) / total

    cold_alloc = Allocator(inv, CLASSES)
    placed, dt, fill_now = place(cold_alloc)
    print(
        f"placements, cold selector caches: {placed} one-GPU claims committed in {dt:.2f} s = "
        f"{placed / dt:,.0f} placements/s (fill now {fill_now:.0%})"
    )
    warm_alloc = Allocator(inv, CLASSES)
    t0 = time.perf_counter()
    warm_alloc.warm(warm_alloc.prepare([claims[0]]), nodes)
    t_warm = time.perf_counter() - t0
    placed, dt, fill_now = place(warm_alloc)
    print(
        f"placements, warm (selectors evaluated on all {total} devices first, {t_warm:.2f} s): {placed} "
        f"committed in {dt:.2f} s = {placed / dt:,.0f} placements/s"
    )

    # gang: 64 pods x 8 GPUs on the original 50% fill
    t0 = time.perf_counter()
    templates = [
        ResourceClaimTemplate.model_validate(
            {
                "metadata": {"name": "full-node", "namespace": "bench"},
                "spec": {
                    "spec": {
                        "devices": {
                            "requests": [
                                {
                                    "name": "gpus",
                                    "exactly": {
                                        "deviceClassName": "gpu.nvidia.com",
                                        "count": args.gpus,
                                        "selectors": [{"cel": {"expression": SELECTOR}}],
                                    },
                                }
                            ]
                        }
                    }
                },
            }
        )
    ]
    state = ClusterState(nodes, slices, CLASSES, claims=used, templates=templates)
    t_state = time.perf_counter() - t0
    pods = [
        Pod.model_validate(
            {
                "metadata": {"name": f"trainer-{i}", "namespace": "bench"},
                "spec": {
                    "containers": [
                        {"name": "t", "resources": {"requests": {"cpu": "32", "memory": "256Gi"}}}
                    ],
                    "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "full-node"}],
                },
            }
        )
        for i in range(args.gang)
    ]
    full_nodes = sum(
        1 for i in range(args.nodes) if not any(k[1] == nodes[i].name for k in state.usage.devices)
    )
    times = []
    result = None
    for _ in range(5):
        t0 = time.perf_counter()
        result = place_gang(pods, state)
        times.append(time.perf_counter() - t0)
        if result.transaction is not None:
            result.transaction.discard()
    assert result is not None
    print(
        f"gang: {args.gang} pods x {args.gpus} GPUs, {full_nodes} fully free nodes; ClusterState build "
        f"{t_state:.2f} s; place_gang cold {ms(times[0])}, warm median {ms(statistics.median(times[1:]))} "
        f"(placed={result.placed}, node checks {result.node_checks})"
    )
    if not result.placed and result.explanation:
        print(f"  why: {result.explanation}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
