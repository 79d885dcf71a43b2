"""The dashboard's device map on the large benchmark shape, first render in headless Chromium.

    python bench/dashboard_render.py [--nodes 2500] [--gpus 8] [--fill 0.8] [--runs 3]

Builds 2,500 nodes x 8 GPUs (the large shape of bench/admission.py: 1,000 ClusterQueues in 200
cohorts), with ``--fill`` of the GPUs held by gangs of 8 GPUs on one node, serves them with the
dashboard's server, and opens ``/devices`` in Debian's headless Chromium (Playwright). "First render"
is the page's own mark: from navigation start until the map and its held devices are in the DOM
(``data-first-render``), and until the browser painted it (``data-first-paint``, after the next
animation frame). Also: the server's time to build the JSON and its size. Prints the reference loop
of bench/admission.py (the machine's speed today). The target (issue #23): first render <= 2 s.
Figures: docs/performance.md ("Dashboard"), next to the target.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from admission import reference_loop

from queueing.api.resource import ResourceSlice
from queueing.dashboard.model import DashboardInput, PlannedPod, devices_view
from queueing.dashboard.server import DashboardServer
from queueing.gcpolicy import paused
from queueing.scheduling.snapshot import (
    AdmittedWorkload,
    ClusterQueueSpec,
    CohortSpec,
    FlavorQuotas,
    LocalQueueSpec,
    ResourceGroup,
    ResourceQuota,
    WorkloadInfo,
)

CHROMIUM = "/usr/bin/chromium"
GPU = "gpu.example.com"


def large_input(nodes: int = 2500, gpus: int = 8, fill: float = 0.8, queues: int = 1000) -> DashboardInput:
    slices = [
        ResourceSlice.model_validate(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"node-{n:04d}-gpus"},
                "spec": {
                    "driver": GPU,
                    "nodeName": f"node-{n:04d}",
                    "pool": {"name": f"node-{n:04d}", "generation": 1, "resourceSliceCount": 1},
                    "devices": [
                        {
                            "name": f"gpu-{i}",
                            "attributes": {"index": {"int": i}},
                            "capacity": {"memory": {"value": "80Gi"}},
                        }
                        for i in range(gpus)
                    ],
                },
            }
        )
        for n in range(nodes)
    ]
    cqs = [
        ClusterQueueSpec(
            name=f"cq-{q:04d}",
            cohort=f"cohort-{q // 5:03d}",
            resource_groups=(
                ResourceGroup((GPU,), (FlavorQuotas("default", {GPU: ResourceQuota(Fraction(20))}),)),
            ),
        )
        for q in range(queues)
    ]
    cohorts = [CohortSpec(f"cohort-{c:03d}") for c in range(queues // 5)]
    lqs = [LocalQueueSpec("default", f"lq-{q:04d}", f"cq-{q:04d}") for q in range(queues)]
    admitted: list[AdmittedWorkload] = []
    plans: dict[str, tuple[PlannedPod, ...]] = {}
    for n in range(int(nodes * fill)):
        q = n % queues
        info = WorkloadInfo("default", f"gang-{n:05d}", f"lq-{q:04d}", ())
        admitted.append(AdmittedWorkload(info, f"cq-{q:04d}", {("default", GPU): Fraction(gpus)}, 0.0))
        node = f"node-{n:04d}"
        plans[info.key] = (
            PlannedPod("main", 0, node, tuple(("gpu", (GPU, node, f"gpu-{i}")) for i in range(gpus))),
        )
    return DashboardInput(
        now=time.time(),
        cluster_queues=cqs,
        cohorts=cohorts,
        local_queues=lqs,
        admitted=admitted,
        plans=plans,
        slices=slices,
    )


class StaticSource:
    """A source whose state never changes (the protocol of queueing.dashboard.source)."""

    def __init__(self, inp: DashboardInput) -> None:
        self.inp = inp

    def revision(self) -> int:
        return 0

    def snapshot(self, at: float | None = None) -> DashboardInput:
        return self.inp

    def timeline(self) -> None:
        return None

    async def history(self, at: float | None = None) -> dict[str, Any]:
        return {"events": [], "utilisation": [], "reports": []}


async def first_render(inp: DashboardInput, runs: int = 1) -> dict[str, Any]:
    """Serve ``inp`` and open /devices ``runs`` times in a fresh page: the page's marks (ms) per run."""
    from playwright.async_api import async_playwright

    server = DashboardServer(StaticSource(inp))
    port = await server.start("127.0.0.1:0")
    out: dict[str, Any] = {"runs": []}
    try:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
            try:
                for _ in range(runs):
                    page = await browser.new_page(viewport={"width": 1280, "height": 820})
                    await page.goto(f"http://127.0.0.1:{port}/devices")
                    await page.wait_for_selector("body[data-first-paint]", timeout=120_000)
                    marks = await page.evaluate(
                        """() => ({render: +document.body.dataset.firstRender, paint: +document.body.dataset.firstPaint,
                                  cards: document.querySelectorAll('.card').length,
                                  held: document.querySelectorAll('[data-holder]').length})"""
                    )
                    out["runs"].append(marks)
                    await page.close()
            finally:
                await browser.close()
    finally:
        await server.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=2500)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--fill", type=float, default=0.8)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    reference = reference_loop()
    t0 = time.perf_counter()
    inp = large_input(args.nodes, args.gpus, args.fill)
    built = time.perf_counter() - t0
    t1 = time.perf_counter()
    import json

    with paused():  # as the server builds it
        body = json.dumps(devices_view(inp), separators=(",", ":"))
    view = time.perf_counter() - t1
    res = asyncio.run(first_render(inp, args.runs))
    print(
        f"shape: {args.nodes} nodes x {args.gpus} GPUs, {len(inp.admitted)} gangs hold {args.fill:.0%} of the GPUs"
    )
    print(f"input built in {built:.2f}s; /api/devices JSON built in {view:.2f}s, {len(body) / 1e6:.2f} MB")
    for i, r in enumerate(res["runs"]):
        print(
            f"run {i + 1}: first render {r['render'] / 1000:.2f}s, first paint {r['paint'] / 1000:.2f}s "
            f"({r['cards']} cards, {r['held']} held devices drawn)"
        )
    print(f"machine: reference loop {reference:.3f}s (fixed pure-Python work; compares machines and days)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
