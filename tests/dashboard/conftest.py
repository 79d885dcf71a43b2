"""Dashboard fixtures: real headless Chromium (Debian's ``chromium``, driven by Playwright), an H200
cluster with dynamic MIG in the API emulator (ResourceSlices from the real hardware read-out,
tests/fixtures/dra/h200.py), and the controller with the dashboard served over HTTP."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from queueing.config import Config
from queueing.dashboard import ControllerSource, DashboardServer
from queueing.ledger.repository import Ledger
from queueing.testing import Emulator
from tests.controller.conftest import Harness, admin, cluster, config, emu, job, ledger  # noqa: F401  (fixtures)
from tests.controller.test_process import replicas  # noqa: F401  (fixture)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "dra"))
import h200

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
CHROMIUM = os.environ.get("QUEUEING_CHROMIUM", "/usr/bin/chromium")
MIG_NODE = "h200-0"  # one card per node is enough to see every placement rule
GPU_NODES = ("h200-1", "h200-2")


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    """Where the tests put their screenshots: docs/ (the pictures of docs/dashboard.md) with
    QUEUEING_UPDATE_SCREENSHOTS=1, else a temporary folder (a test run leaves the checkout as it was)."""
    if os.environ.get("QUEUEING_UPDATE_SCREENSHOTS") == "1":
        return DOCS
    return tmp_path


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"{CHROMIUM} is missing: `make install` installs Debian's chromium (apt-get install chromium)"
        )
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            yield b
        finally:
            await b.close()


def h200_objects() -> list[dict[str, Any]]:
    """Two H200 nodes of whole GPUs (8 each) and one with dynamic MIG (2 cards), the classes, claim
    templates (whole GPUs, one 1g.18gb and one 3g.71gb MIG instance), a cohort of two ClusterQueues
    with preemption by priority, their LocalQueues and priority classes."""
    hw = h200.hardware()
    objs: list[dict[str, Any]] = [*h200.CLASSES]
    objs += [h200.node(MIG_NODE), *h200.node_slices(MIG_NODE, hw, gpus=2, mig=True)]
    for n in GPU_NODES:
        objs += [h200.node(n), *h200.node_slices(n, hw, gpus=8, mig=False)]
    for name, cls, count, sel in (
        ("gpus-4", "gpu.nvidia.com", 4, None),
        ("gpus-8", "gpu.nvidia.com", 8, None),
        ("mig-1g", "mig.nvidia.com", 1, "1g.18gb"),
        ("mig-3g", "mig.nvidia.com", 1, "3g.71gb"),
    ):
        exactly: dict[str, Any] = {"deviceClassName": cls, "count": count}
        if sel:
            exactly["selectors"] = [
                {"cel": {"expression": f"device.attributes['gpu.nvidia.com'].profile == '{sel}'"}}
            ]
        objs.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
            }
        )
    objs.append(
        {"apiVersion": "queueing.dra.io/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": "h200"}}
    )
    objs.append({"apiVersion": "queueing.dra.io/v1beta1", "kind": "Cohort", "metadata": {"name": "research"}})
    for cq, gpus in (("training", 8), ("inference", 8)):
        objs.append(
            {
                "apiVersion": "queueing.dra.io/v1beta1",
                "kind": "ClusterQueue",
                "metadata": {"name": cq},
                "spec": {
                    "cohortName": "research",
                    "namespaceSelector": {},
                    "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"},
                    "resourceGroups": [
                        {
                            "coveredResources": ["gpu.nvidia.com", "mig.nvidia.com"],
                            "flavors": [
                                {
                                    "name": "h200",
                                    "resources": [
                                        {"name": "gpu.nvidia.com", "nominalQuota": gpus, "borrowingLimit": 8},
                                        {"name": "mig.nvidia.com", "nominalQuota": 4},
                                    ],
                                }
                            ],
                        }
                    ],
                },
            }
        )
        objs.append(
            {
                "apiVersion": "queueing.dra.io/v1beta1",
                "kind": "LocalQueue",
                "metadata": {"name": cq, "namespace": "default"},
                "spec": {"clusterQueue": cq},
            }
        )
    objs += [
        {
            "apiVersion": "queueing.dra.io/v1beta1",
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": n},
            "value": v,
        }
        for n, v in (("low", 10), ("high", 100))
    ]
    return objs


def gpu_job(
    name: str, template: str, queue: str, *, parallelism: int = 1, priority: str | None = None
) -> dict[str, Any]:
    """A Job of ``parallelism`` pods, each with a claim from ``template`` (tests/controller's job)."""
    body = job(name, parallelism=parallelism, template=template, queue=queue)
    if priority:
        body["metadata"]["labels"]["queueing.dra.io/priority-class"] = priority
    return body


class Live:
    """The controller (verify mode) and its dashboard on a free port."""

    def __init__(self, harness: Harness) -> None:
        self.harness = harness
        self.server: DashboardServer | None = None
        self.url = ""

    async def start(self) -> Live:
        ctl = await self.harness.start()
        self.server = DashboardServer(ControllerSource(ctl, self.harness.ledger))
        port = await self.server.start("127.0.0.1:0")
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()
        await self.harness.stop()


@pytest.fixture
async def live(emu: Emulator, ledger: Ledger, config: Config) -> AsyncIterator[Live]:  # noqa: F811
    emu.load_objects(h200_objects())
    lv = Live(Harness(emu, ledger, config))
    try:
        yield lv
    finally:
        await lv.stop()
