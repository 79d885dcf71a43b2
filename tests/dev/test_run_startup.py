"""`queueing run` says in one line what keeps it from starting (issue #20), instead of looping: no
kubeconfig, CRDs not installed, the leader-election Lease's namespace missing, an API server that does
not answer. Against the emulator, through the real kubernetes-asyncio client."""

from __future__ import annotations

import argparse
import socket
from pathlib import Path

import pytest

from queueing.api.crdgen import all_crds
from queueing.commands.run import missing_kubeconfig, preflight, serve
from queueing.config import load_config
from queueing.kube.client import KubeClient, api_client_for_url
from queueing.testing import run_emulator


async def check(url: str, env: dict[str, str] | None = None) -> str | None:
    api = api_client_for_url(url)
    try:
        return await preflight(KubeClient(api), load_config(None, env or {}))
    finally:
        await api.close()


async def test_missing_crds_then_namespace_then_nothing() -> None:
    async with run_emulator(bookmark_interval=None) as emu:
        problem = await check(emu.url)
        assert problem is not None and "\n" not in problem
        served = ", ".join(f"{c['spec']['names']['plural']}.queueing.dra.io" for c in all_crds())
        assert problem.startswith(f"the API server {emu.url} does not serve {served}: ")  # each CRD
        assert problem.endswith("the CRDs are not installed (kubectl apply --server-side -f crds/)")
        emu.load_objects(list(all_crds()))
        problem = await check(emu.url)
        assert problem is not None and problem.startswith(
            "the namespace queueing-system does not exist, so the leader-election Lease "
            "queueing-system/queueing-controller cannot be created: kubectl create namespace queueing-system"
        )
        # one replica without leader election needs no Lease
        assert await check(emu.url, {"QUEUEING_LEADER_ELECTION__LEADER_ELECT": "false"}) is None
        emu.load_objects([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "queueing-system"}}])
        assert await check(emu.url) is None


async def test_an_api_server_that_does_not_answer() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again when the check runs
    problem = await check(f"http://127.0.0.1:{port}")
    assert problem is not None and problem.startswith(
        f"cannot reach the API server http://127.0.0.1:{port}: "
    )


def test_missing_kubeconfig(tmp_path: Path) -> None:
    assert missing_kubeconfig(str(tmp_path / "nope"), {}) == f"kubeconfig {tmp_path / 'nope'}: no such file"
    found = tmp_path / "kubeconfig"
    found.write_text("{}")
    assert missing_kubeconfig(str(found), {}) is None
    assert missing_kubeconfig(None, {"KUBECONFIG": f"{tmp_path / 'a'}:{found}"}) is None
    problem = missing_kubeconfig(None, {"KUBECONFIG": str(tmp_path / "a")})
    assert problem == (
        f"no cluster configuration: not in a pod (no service account) and $KUBECONFIG ({tmp_path / 'a'}) "
        "does not exist; pass --kubeconfig FILE (`queueing dev` writes one for a local cluster)"
    )


async def test_serve_exits_2_with_the_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with run_emulator(bookmark_interval=None) as emu:
        args = argparse.Namespace(
            config=None, kubeconfig=str(emu.kubeconfig_path(tmp_path)), context=None, skip_migrations=True
        )
        assert await serve(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(
        f"queueing run: the API server {emu.url} does not serve clusterqueues.queueing.dra.io"
    )
