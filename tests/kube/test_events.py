"""EventRecorder: one Event per (object, reason, message); what it remembers is bounded and is dropped
for an object with ``forget(uid)`` (the controller calls it when the object is deleted)."""

from __future__ import annotations

from typing import Any

from queueing.api.base import KubeObject
from queueing.kube.client import EVENTS, KubeClient
from queueing.kube.events import EventRecorder


class Thing(KubeObject):
    API_VERSION = "v1"
    KIND = "ConfigMap"


def thing(name: str) -> Thing:
    return Thing.model_validate({"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"}})


async def events(kube: KubeClient) -> list[dict[str, Any]]:
    return list((await kube.list(EVENTS, "default"))["items"])


async def test_dedupe_forget_and_bound(kube: KubeClient) -> None:
    rec = EventRecorder(kube, memory=3)
    a, b = thing("a"), thing("b")
    await rec.emit(a, "Normal", "Seen", "hello")
    await rec.emit(a, "Normal", "Seen", "hello")  # same key: not written again
    await rec.emit(a, "Normal", "Other", "x")
    await rec.emit(b, "Normal", "Seen", "hello")
    assert rec.emitted == 3 and len(rec) == 3
    assert sorted((e["involvedObject"]["name"], e["reason"]) for e in await events(kube)) == [
        ("a", "Other"),
        ("a", "Seen"),
        ("b", "Seen"),
    ]

    rec.forget("uid-a")  # both keys of a go, b's stays
    assert len(rec) == 1
    await rec.emit(b, "Normal", "Seen", "hello")
    assert rec.emitted == 3

    for i in range(5):  # beyond memory=3: the oldest keys are dropped, the index with them
        await rec.emit(thing(f"n{i}"), "Normal", "Seen", "hello")
    assert len(rec) == 3
    assert set(rec._by_uid) == {"uid-n2", "uid-n3", "uid-n4"}
    rec.forget("uid-unknown")  # harmless
    assert len(rec) == 3
