"""`queueing run` as a process: configuration from $QUEUEING_CONFIG, the emulator through --kubeconfig,
a Job admitted, a clean stop on SIGTERM; a bad configuration exits 2 with the field named."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path

from queueing.kube.client import JOBS, LEASES, KubeClient
from queueing.testing import Emulator
from queueing.testing.cluster import StandIns
from tests.controller.conftest import eventually, job
from tests.controller.test_admission import running


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_run_admits_and_stops_on_sigterm(
    emu: Emulator, admin: KubeClient, cluster: StandIns, tmp_path: Path
) -> None:
    emu.authorizer = None  # the kubeconfig's user is admin
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        "planBindingMode: Full\nlogLevel: info\nnamespace: default\n"
        f"metrics:\n  bindAddress: 127.0.0.1:{free_port()}\n"
        f"health:\n  healthProbeBindAddress: 127.0.0.1:{free_port()}\n"
        "leaderElection:\n  leaseDuration: 3s\n  renewDeadline: 2s\n  retryPeriod: 1s\n"
    )
    env = {
        **os.environ,
        "QUEUEING_CONFIG": str(cfg),
        "QUEUEING_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "queueing", "run", "--kubeconfig", str(emu.kubeconfig_path(tmp_path)),
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        await admin.create(JOBS, job("cli"))
        await eventually(lambda: running(emu, "cli", 1), "the Job runs", timeout=60)
    finally:
        proc.send_signal(signal.SIGTERM)
        _out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    text = err.decode()
    assert "controller started (plan binding mode Full" in text and "leader election on" in text
    assert (tmp_path / "ledger.db").exists()
    lease = await admin.get(LEASES, "queueing-controller", "default")
    assert not lease["spec"].get("holderIdentity")  # released on SIGTERM


async def test_run_rejects_a_bad_configuration(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("planBindingMode: Sometimes\n")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "queueing", "run", "--config", str(cfg),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2
    text = err.decode()
    assert text.startswith("queueing run: invalid configuration: planBindingMode:"), text
    assert "Traceback" not in text
