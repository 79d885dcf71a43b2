"""The emulator's write and watch paths without copies: stored objects are never changed in place, so
the history and the watch events refer to them; a watch event is encoded once for all its watchers.
Driven through HTTP (aiohttp and the real kubernetes-asyncio client), with the store's verify mode on
(every replaced object is checked against its JSON when its event went out, every shortened
validation against the whole one)."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from queueing.dra.verify import VerifyError
from queueing.kube.client import (
    PODS,
    KubeClient,
    api_client_for_url,
    env_has_proxy_or_netrc,
    queueing_resource,
)
from queueing.testing import Emulator, run_emulator
from tests.kube.conftest import CRDS

pytestmark = pytest.mark.asyncio(loop_scope="module")

LOCAL_QUEUES = queueing_resource("localqueues", "LocalQueue", True)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def emu() -> AsyncIterator[Emulator]:
    async with run_emulator(crds_dir=CRDS, bookmark_interval=None) as e:
        e.store.verify = True
        yield e


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def kube(emu: Emulator) -> AsyncIterator[KubeClient]:
    api = api_client_for_url(emu.url, token="admin-token")
    try:
        yield KubeClient(api)
    finally:
        await api.close()


def pod(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


async def read_lines(emu: Emulator, path: str, n: int, **params: str) -> list[bytes]:
    out: list[bytes] = []
    async with aiohttp.ClientSession() as s, s.get(emu.url + path, params={"watch": "1", **params}) as r:
        async for line in r.content:
            out.append(line)
            if len(out) >= n:
                break
    return out


async def test_one_encoding_per_event_for_every_watcher(kube: KubeClient, emu: Emulator) -> None:
    rv = (await kube.list(PODS, "default"))["metadata"]["resourceVersion"]
    watches = [
        asyncio.create_task(read_lines(emu, PODS.path("default"), 3, resourceVersion=rv)) for _ in range(3)
    ]
    while emu.open_watches < 3:
        await asyncio.sleep(0.01)
    await kube.create(PODS, pod("shared", {"v": "1"}))
    await kube.patch(PODS, "shared", {"metadata": {"labels": {"v": "2"}}}, "default")
    await kube.delete(PODS, "shared", "default")
    got = await asyncio.gather(*watches)
    assert got[0] == got[1] == got[2]  # the same bytes on every watch
    events = [json.loads(line) for line in got[0]]
    assert [(e["type"], e["object"]["metadata"]["labels"]) for e in events] == [
        ("ADDED", {"v": "1"}), ("MODIFIED", {"v": "2"}), ("DELETED", {"v": "2"})
    ]  # fmt: skip
    history = [ev for ev in emu.store.history if ev.rv > int(rv) and ev.rkey == "/pods"]
    # each event was encoded once, for one (type, apiVersion), whatever the number of watchers
    assert [len(ev._lines) for ev in history] == [1, 1, 1]
    assert [ev.line(e["type"], "v1") for ev, e in zip(history, events, strict=True)] == got[0]


async def test_replay_shows_each_version_as_it_was(kube: KubeClient, emu: Emulator) -> None:
    created = await kube.create(PODS, pod("versions", {"n": "0"}))
    for n in range(1, 4):
        await kube.patch(PODS, "versions", {"metadata": {"labels": {"n": str(n)}}}, "default")
    lines = await read_lines(
        emu, PODS.path("default"), 3, resourceVersion=created["metadata"]["resourceVersion"]
    )
    assert [json.loads(x)["object"]["metadata"]["labels"]["n"] for x in lines] == ["1", "2", "3"]
    # what a caller in the process got back is its own: changing it changes nothing stored
    store, rt = emu.store, emu.store.resource("pods")
    mine = store.get(rt, "default", "versions")
    mine["metadata"]["labels"]["n"] = "changed by the caller"
    assert store.get(rt, "default", "versions")["metadata"]["labels"]["n"] == "3"
    mine = store.create(rt, "default", pod("mine"))
    mine["spec"]["containers"][0]["image"] = "changed by the caller"
    assert store.get(rt, "default", "mine")["spec"]["containers"][0]["image"] == "busybox"


async def test_status_writes_skip_the_unchanged_spec_but_not_its_errors(
    kube: KubeClient, emu: Emulator
) -> None:
    lq = {
        "apiVersion": "queueing.dra.io/v1beta1",
        "kind": "LocalQueue",
        "metadata": {"name": "team", "namespace": "default"},
        "spec": {"clusterQueue": "cq"},
    }
    await kube.create(LOCAL_QUEUES, lq)
    for pending in range(3):  # verify mode compares each shortened validation with the whole one
        await kube.patch(
            LOCAL_QUEUES, "team", {"status": {"pendingWorkloads": pending}}, "default", subresource="status"
        )
    got = await kube.get(LOCAL_QUEUES, "team", "default")
    assert got["status"]["pendingWorkloads"] == 2 and got["spec"]["clusterQueue"] == "cq"
    # a bad status value is still refused, naming the field
    with pytest.raises(Exception, match="pendingWorkloads"):
        await kube.patch(
            LOCAL_QUEUES, "team", {"status": {"pendingWorkloads": "many"}}, "default", subresource="status"
        )


async def test_verify_mode_catches_a_stored_object_changed_in_place(emu: Emulator) -> None:
    store, rt = emu.store, emu.store.resource("pods")
    store.create(rt, "default", pod("aliased"))
    store.objects[rt.key][("default", "aliased")]["metadata"]["labels"]["sneaky"] = "yes"
    with pytest.raises(VerifyError, match="never changed in place"):
        store.delete(rt, "default", "aliased")


async def test_env_lookups_skipped_only_without_proxy_or_netrc(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for k in list(os.environ):
        if k.lower().endswith("_proxy") or k == "NETRC":
            monkeypatch.delenv(k)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert not env_has_proxy_or_netrc()
    api = api_client_for_url("http://127.0.0.1:1")
    assert api.rest_client.pool_manager.trust_env is False
    await api.close()
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:3128")
    assert env_has_proxy_or_netrc()
    api = api_client_for_url("http://127.0.0.1:1")
    assert api.rest_client.pool_manager.trust_env is True  # aiohttp's behaviour: it reads the proxy
    await api.close()
    monkeypatch.delenv("HTTPS_PROXY")
    (tmp_path / ".netrc").write_text("machine example login u password p\n")
    assert env_has_proxy_or_netrc()
