"""EventRecorder: one Event per (object, reason, message); what it remembers is bounded and is dropped
for an object with ``forget(uid)`` (the controller calls it when the object is deleted). ``emit``
returns without waiting for the API: workers write the queued Events, ``flush``/``stop`` wait for them."""

from __future__ import annotations

import logging
from collections.abc import Coroutine
from typing import Any

import pytest

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
    await rec.flush()
    assert rec.emitted == 3 and len(rec) == 3
    assert sorted((e["involvedObject"]["name"], e["reason"]) for e in await events(kube)) == [
        ("a", "Other"),
        ("a", "Seen"),
        ("b", "Seen"),
    ]

    rec.forget("uid-a")  # both keys of a go, b's stays
    assert len(rec) == 1
    await rec.emit(b, "Normal", "Seen", "hello")
    await rec.flush()
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
    await rec.flush()
    (first,) = await events(kube)
    assert first["count"] == 1
    await rec.emit(a, "Warning", "Bad", "spec.x: wrong")  # within the interval: counted, not written
    await rec.emit(a, "Warning", "Bad", "spec.x: wrong")
    await rec.flush()
    assert rec.updated == 0 and (await events(kube))[0]["count"] == 1
    t[0] = 11.0
    await rec.emit(a, "Warning", "Bad", "spec.x: wrong")  # the repeats so far are written at once
    await rec.flush()
    (ev,) = await events(kube)
    assert ev["count"] == 4 and rec.updated == 1 and rec.emitted == 1
    assert ev["metadata"]["name"] == first["metadata"]["name"]
    assert ev["lastTimestamp"] >= first["lastTimestamp"] and ev["firstTimestamp"] == first["firstTimestamp"]


async def test_after_a_restart_an_existing_event_is_updated_not_dropped(
    kube: KubeClient, caplog: Any
) -> None:
    a = thing("a")
    first = EventRecorder(kube)
    await first.emit(a, "Normal", "Admitted", "by team")
    await first.stop()
    restarted = EventRecorder(kube)  # a new process: nothing remembered, the Event exists (409 on create)
    with caplog.at_level("INFO", logger="queueing.kube.events"):
        await restarted.emit(a, "Normal", "Admitted", "by team")
        await restarted.flush()
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
        await rec.flush()
    assert rec.failed == 1
    (line,) = [r.getMessage() for r in caplog.records]
    assert "\n" not in line and "HTTP response" not in line, line


def finishes_without_suspending(coro: Coroutine[Any, Any, None]) -> bool:
    """Whether the coroutine runs to its end on its first step (it never waits for anything)."""
    try:
        coro.send(None)
    except StopIteration:
        return True
    coro.close()
    return False


async def test_emit_returns_at_once_and_the_workers_write_in_the_background(kube: KubeClient) -> None:
    rec = EventRecorder(kube, repeat_interval=0.0)
    a = thing("a")
    assert finishes_without_suspending(rec.emit(a, "Normal", "Admitted", "by team"))
    assert rec.emitted == 0 and rec.queued == 1  # nothing written yet: no worker has run
    # repeats before the create is written are carried by it
    assert finishes_without_suspending(rec.emit(a, "Normal", "Admitted", "by team"))
    await rec.flush()
    (ev,) = await events(kube)
    assert ev["count"] == 2 and rec.emitted == 1 and rec.updated == 0 and rec.queued == 0
    await rec.emit(a, "Normal", "Admitted", "by team")  # repeat_interval 0: each repeat is written
    await rec.emit(a, "Normal", "Admitted", "by team")
    await rec.stop()  # writes what is queued, then ends the workers
    (ev,) = await events(kube)
    assert ev["count"] == 4 and rec.failed == 0
    await rec.emit(thing("b"), "Normal", "Admitted", "by team")  # a later emit starts them again
    await rec.stop()
    assert sorted(e["involvedObject"]["name"] for e in await events(kube)) == ["a", "b"]


async def test_a_full_buffer_drops_with_a_count_and_one_log_line(kube: KubeClient, caplog: Any) -> None:
    rec = EventRecorder(kube, buffer=2, concurrency=1)
    with caplog.at_level(logging.WARNING, logger="queueing.kube.events"):
        for i in range(5):  # no worker has run yet: two are queued, three dropped
            await rec.emit(thing(f"n{i}"), "Normal", "Seen", "hello")
    assert rec.dropped == 3 and rec.queued == 2 and len(rec) == 2
    (line,) = [r.getMessage() for r in caplog.records]
    assert "dropped" in line and "3 dropped so far" not in line, line
    await rec.flush()
    assert sorted(e["involvedObject"]["name"] for e in await events(kube)) == ["n0", "n1"]
    await rec.emit(thing("n4"), "Normal", "Seen", "hello")  # a dropped Event is not remembered
    await rec.stop()
    assert sorted(e["involvedObject"]["name"] for e in await events(kube)) == ["n0", "n1", "n4"]
    assert rec.emitted == 3 and rec.dropped == 3


@pytest.mark.parametrize("latency", [30.0])
async def test_stop_gives_up_after_its_timeout(kube: KubeClient, emu: Any, latency: float) -> None:
    """An API server that does not answer: ``stop`` returns after its timeout, the write abandoned."""
    emu.faults.add_latency(latency, verb="create", resource="events", count=1)
    rec = EventRecorder(kube)
    await rec.emit(thing("a"), "Normal", "Seen", "hello")
    await rec.stop(timeout=0.2)
    assert rec.emitted == 0 and not rec._workers
