"""The simulator's scenario and property tests run in verify mode (``QUEUEING_VERIFY=1``, read by
the shell): every fast path, memo and cache of the cores also runs the general computation and
raises ``VerifyError`` on a difference."""

from __future__ import annotations

import pytest

from queueing.verify import ENV_VERIFY


@pytest.fixture(autouse=True)
def _verify_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VERIFY, "1")
