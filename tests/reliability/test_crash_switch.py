"""The crash switch ``QUEUEING_CRASH_AT`` is honoured only by the testing entry point
(``python -m queueing.testing.crash_switch ...``), never by the production one: ``queueing.faults``
itself does not read the environment."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from queueing import faults
from queueing.testing.crash_switch import ENV, arm_from_env, main, parse

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
