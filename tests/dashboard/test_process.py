"""``dashboard.bindAddress``: the controller process serves the dashboard on it (off by default)."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from queueing.config import Config, ConfigError, load_config
from queueing.kube.client import JOBS, KubeClient
from queueing.testing import Emulator
from queueing.testing.cluster import StandIns
from tests.controller.conftest import job
from tests.controller.test_process import Replicas, free_port


@pytest.fixture
def config() -> Config:
    return Config(
        leader_election={"leader_elect": False},
        metrics={"bind_address": f"127.0.0.1:{free_port()}"},
        health={"health_probe_bind_address": f"127.0.0.1:{free_port()}"},
        dashboard={"bind_address": f"127.0.0.1:{free_port()}"},
    )


async def test_controller_process_serves_the_dashboard_on_its_bind_address(
    emu: Emulator, admin: KubeClient, replicas: Replicas, cluster: StandIns
) -> None:
    proc = await replicas.start("only", serve_http=True)
    assert proc.dashboard is not None and proc.dashboard.port
    base = f"http://127.0.0.1:{proc.dashboard.port}"
    await admin.create(JOBS, job("d1", template="gpu-2"))
    async with aiohttp.ClientSession() as s:

        async def admitted() -> int:
            async with s.get(base + "/api/queues") as r:
                assert r.status == 200
                data = (await r.json())["data"]
            return next(q["admitted"] for q in data["clusterQueues"] if q["name"] == "team")

        deadline = time.monotonic() + 30
        while await admitted() != 1:  # the page's data follows the controller (rebuilt once a second)
            assert time.monotonic() < deadline, "the dashboard never showed the admission"
            await asyncio.sleep(0.05)
        async with s.get(base + "/workloads") as r:
            assert r.status == 200 and "Workloads" in await r.text()
    await proc.stop()
    with pytest.raises(aiohttp.ClientConnectionError):  # stopped with the process
        async with aiohttp.ClientSession() as s, s.get(base + "/queues"):
            pass


def test_dashboard_is_off_by_default_and_its_address_is_checked() -> None:
    assert Config().dashboard.bind_address is None
    assert load_config(None, {"QUEUEING_DASHBOARD__BIND_ADDRESS": ":8083"}).dashboard.bind_address == ":8083"
    with pytest.raises(ConfigError, match="dashboard"):
        load_config(None, {"QUEUEING_DASHBOARD__BIND_ADDRESS": "8083"})
