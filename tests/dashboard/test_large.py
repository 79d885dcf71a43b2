"""The device map of the large benchmark shape (2,500 nodes x 8 GPUs, 1,000 ClusterQueues, 80 % of the
GPUs held) renders whole in headless Chromium. The time is measured and printed (``bench/dashboard_render.py``
reports it; docs/performance.md has the figures), not asserted."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import dashboard_render as bench


async def test_large_shape_device_map_renders_every_gpu() -> None:
    inp = bench.large_input(nodes=2500, gpus=8, fill=0.8)
    res = await bench.first_render(inp, runs=1)
    (run,) = res["runs"]
    print(f"large shape: first render {run['render'] / 1000:.2f}s, first paint {run['paint'] / 1000:.2f}s")
    assert run["cards"] == 2500 * 8
    assert run["held"] == 2000 * 8
