"""Benchmark the DRA CEL environment: compile time and selector evaluations per second.

    python bench/cel.py [--seconds 1.0]

Devices are H200-like (attributes as the NVIDIA driver publishes them). "warm" reuses DeviceInput
objects (their CEL data is built once, as the allocator does across selectors of one slice
generation); "cold" builds a fresh DeviceInput per evaluation.
"""

from __future__ import annotations

import argparse
import time

from queueing.api.quantity import Quantity
from queueing.dra.cel import DeviceInput, SelectorCompiler, Version

EXPRESSIONS = {
    "driver": 'device.driver == "gpu.nvidia.com"',
    "string attribute": 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H200"',
    "quantity": 'device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("40Gi"))',
    "semver": 'device.attributes["gpu.nvidia.com"].driverVersion.isGreaterThan(semver("550.0.0"))',
    "class+request (bind, 4 terms)": (
        'device.driver == "gpu.nvidia.com" && cel.bind(g, device.attributes["gpu.nvidia.com"], '
        'g.type == "gpu" && g.productName.lowerAscii().contains("h200") && !g.migEnabled) && '
        'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0'
    ),
}


def device(i: int) -> DeviceInput:
    return DeviceInput.from_qualified(
        "gpu.nvidia.com",
        {
            "type": "gpu",
            "productName": "NVIDIA H200",
            "architecture": "Hopper",
            "driverVersion": Version("570.133.20"),
            "cudaComputeCapability": Version("9.0.0"),
            "index": i,
            "uuid": f"GPU-{i:08x}",
            "migEnabled": False,
            "resource.kubernetes.io/pcieRoot": f"pci0000:{i:02x}",
        },
        {"memory": Quantity.parse("143771Mi")},
    )


def rate(fn, seconds: float) -> float:
    n, start = 0, time.perf_counter()
    while True:
        for _ in range(200):
            fn()
        n += 200
        el = time.perf_counter() - start
        if el >= seconds:
            return n / el


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=1.0)
    args = ap.parse_args()

    t = time.perf_counter()
    compiler = SelectorCompiler()
    print(f"environment: {1e3 * (time.perf_counter() - t):.1f} ms")
    devices = [device(i) for i in range(8)]
    for name, expr in EXPRESSIONS.items():
        t = time.perf_counter()
        sel = compiler.compile(expr)
        ms = 1e3 * (time.perf_counter() - t)
        it = iter(range(1 << 62))
        warm = rate(lambda sel=sel, it=it: sel.matches(devices[next(it) & 7]), args.seconds)
        cold = rate(lambda sel=sel: sel.matches(device(0)), args.seconds)
        print(f"{name:32s} compile {ms:6.2f} ms   warm {warm:9,.0f}/s   cold {cold:9,.0f}/s")


if __name__ == "__main__":
    main()
