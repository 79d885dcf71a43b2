"""The crash switch ``QUEUEING_CRASH_AT`` is honoured only by the testing entry point
(``python -m queueing.testing.crash_switch ...``), never by the production one: ``queueing.faults``
itself does not read the environment. Through the testing entry point a real ``queueing run`` process
dies at the named fault point, and the next controller recovers."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from queueing import faults
from queueing.kube.client import JOBS, KubeClient
from queueing.ledger.repository import Ledger
from queueing.testing import Emulator
from queueing.testing.cluster import StandIns
from queueing.testing.crash_switch import ENV, arm_from_env, main, parse
from tests.controller.conftest import Harness, eventually, job
from tests.controller.test_admission import is_true, running, workload
from tests.controller.test_process import free_port
from tests.controller.test_reliability import admissions_per_workload

HIT_TWICE = "from queueing.faults import fault_point; fault_point('bind.after_pod'); fault_point('bind.after_pod'); print('alive')"


def _python(code: str, crash_at: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, ENV: crash_at}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)


def test_the_production_code_ignores_the_crash_switch() -> None:
    ran = _python(HIT_TWICE, "bind.after_pod")
    assert (ran.returncode, ran.stdout) == (0, "alive\n"), ran.stderr


def test_the_testing_entry_point_dies_at_the_named_hit() -> None:
    arm = "import os; from queueing.testing.crash_switch import arm_from_env; arm_from_env(os.environ); "
    ran = _python(arm + HIT_TWICE, "bind.after_pod:2")
    assert (ran.returncode, ran.stdout) == (137, ""), ran.stderr  # like SIGKILL: no output after it
    ran = _python(arm + HIT_TWICE, "bind.after_pod:3")  # not reached
    assert (ran.returncode, ran.stdout) == (0, "alive\n"), ran.stderr


def test_arming_in_process_and_bad_values() -> None:
    exits: list[int] = []
    try:
        assert arm_from_env({ENV: "finish.after_status"}, exit=exits.append) == ("finish.after_status", 1)
        faults.fault_point("admission.after_ledger")
        assert exits == []
        faults.fault_point("finish.after_status")
        assert exits == [137]
    finally:
        faults.disarm()
    assert arm_from_env({}) is None
    for bad in ("no.such.point", "bind.after_pod:0", "bind.after_pod:x"):
        with pytest.raises(ValueError, match=ENV):
            parse(bad)


def test_the_entry_point_refuses_a_bad_value(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, "nowhere")
    assert main(["--help"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown fault point 'nowhere'" in err


async def test_a_controller_process_killed_at_a_fault_point_is_recovered(
    emu: Emulator, admin: KubeClient, cluster: StandIns, harness: Harness, ledger: Ledger, tmp_path: Path
) -> None:
    """``queueing run`` through the testing entry point dies (exit 137, no cleanup) right after the
    ledger committed the admission and before the Workload's status said so; a new controller on the
    same ledger recovers: the Job is admitted once and runs."""
    emu.authorizer = None  # the kubeconfig's user is admin
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        "namespace: default\nleaderElection:\n  leaderElect: false\n"
        f"metrics:\n  bindAddress: 127.0.0.1:{free_port()}\n"
        f"health:\n  healthProbeBindAddress: 127.0.0.1:{free_port()}\n"
    )
    env = {
        **os.environ,
        "QUEUEING_CONFIG": str(cfg),
        "QUEUEING_DATABASE_URL": str(ledger.engine.url),
        ENV: "admission.after_ledger",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "queueing.testing.crash_switch", "run",
        "--kubeconfig", str(emu.kubeconfig_path(tmp_path)),
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        await admin.create(JOBS, job("crash"))
        _, err = await asyncio.wait_for(proc.communicate(), 120)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 137, err.decode()
    assert (await admissions_per_workload(ledger)) == {"job-crash": 1}  # committed, then the crash
    assert not is_true(workload(emu, "job-crash"), "QuotaReserved")  # the status write never happened

    await harness.start()  # the next controller recovers from the ledger and the Workloads
    await eventually(lambda: running(emu, "crash", 1), "the Job runs after the recovery", timeout=60)
    # the lost admission released (its status was never written), one fresh admission active
    assert (await admissions_per_workload(ledger)) == {"job-crash": 2}
    state = await ledger.load_state()
    assert len(state.admissions) == 1
