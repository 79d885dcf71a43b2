"""EventRecorder: one Event per (object, reason, message); what it remembers is bounded and is dropped
for an object with ``forget(uid)`` (the controller calls it when the object is deleted)."""

from __future__ import annotations

from typing import Any

from queueing.api.base import KubeObject, ObjectMeta
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


async def test_repeats_patch_count_and_last_timestamp_like_client_go(kube: KubeClient) -> None:
    t = [0.0]
    rec = EventRecorder(kube, repeat_interval=10.0, clock=lambda: t[0])
    a = thing("a")
    await rec.emit(a, "Warning", "Bad", "spec.x: wrong")
    (first,) = await events(kube)
    assert first["count"] == 1
    await rec.emit(a, "Warning", "Bad", "spec.x: wrong")  # within the interval: counted, not written
    await rec.emit(a, "Warning", "Bad", "spec.x: wrong")
    assert rec.updated == 0 and (await events(kube))[0]["count"] == 1
    t[0] = 11.0
    await rec.emit(a, "Warning", "Bad", "spec.x: wrong")  # the repeats so far are written at once
    (ev,) = await events(kube)
    assert ev["count"] == 4 and rec.updated == 1 and rec.emitted == 1
    assert ev["metadata"]["name"] == first["metadata"]["name"]
    assert ev["lastTimestamp"] >= first["lastTimestamp"] and ev["firstTimestamp"] == first["firstTimestamp"]


async def test_after_a_restart_an_existing_event_is_updated_not_dropped(
    kube: KubeClient, caplog: Any
) -> None:
    a = thing("a")
    await EventRecorder(kube).emit(a, "Normal", "Admitted", "by team")
    restarted = EventRecorder(kube)  # a new process: nothing remembered, the Event exists (409 on create)
    with caplog.at_level("INFO", logger="queueing.kube.events"):
        await restarted.emit(a, "Normal", "Admitted", "by team")
    (ev,) = await events(kube)
    assert ev["count"] == 2 and restarted.updated == 1 and restarted.failed == 0
    assert not caplog.records  # nothing to say: the 409 became an update


async def test_a_failed_event_is_one_log_line(kube: KubeClient, caplog: Any) -> None:
    rec = EventRecorder(kube)
    # an object our models would refuse (its name is too long for an Event's): built past validation,
    # as if read from an older API server
    meta = ObjectMeta.model_construct(name="x" * 300, namespace="no-such-ns", uid="u")
    long_name = Thing.model_construct(metadata=meta)
    with caplog.at_level("INFO", logger="queueing.kube.events"):
        await rec.emit(long_name, "Normal", "Seen", "hello")  # refused by the API server
    assert rec.failed == 1
    (line,) = [r.getMessage() for r in caplog.records]
    assert "\n" not in line and "HTTP response" not in line, line
