"""Fixtures for tests against the Kubernetes API emulator through the real kubernetes-asyncio client."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from queueing.kube.client import KubeClient, api_client_for_url
from queueing.testing import Emulator, run_emulator

REPO = Path(__file__).resolve().parents[2]
CRDS = REPO / "crds"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture
async def emu() -> AsyncIterator[Emulator]:
    # no periodic bookmarks: tests ask for them, so nothing depends on timing
    async with run_emulator(crds_dir=CRDS, bookmark_interval=None) as e:
        e.load_crds(FIXTURES)
        yield e


@pytest.fixture
async def kube(emu: Emulator) -> AsyncIterator[KubeClient]:
    api = api_client_for_url(emu.url, token="admin-token")
    try:
        yield KubeClient(api)
    finally:
        await api.close()


async def eventually(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    """Wait until ``check()`` holds (a condition, not a sleep: fast when things work)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        await asyncio.sleep(0.01)
