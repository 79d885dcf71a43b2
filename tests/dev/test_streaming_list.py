"""Streaming lists (kubectl >= 1.35 lists this way for `wait` and `get -w`): a watch with
sendInitialEvents=true gets the current objects as ADDED events, then a BOOKMARK annotated
k8s.io/initial-events-end at the current resourceVersion, then the changes."""

from __future__ import annotations

import json

import aiohttp

from queueing.testing import run_emulator


async def test_initial_events_then_the_end_bookmark_then_changes() -> None:
    async with run_emulator(bookmark_interval=None) as emu:
        emu.load_objects([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in "ab"])
        rv = str(emu.store.rv)
        existing = len(emu.store.list(emu.store.resource("namespaces"), None)[0])
        query = {
            "watch": "true",
            "sendInitialEvents": "true",
            "resourceVersionMatch": "NotOlderThan",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "30",
        }
        events = []
        async with aiohttp.ClientSession() as s, s.get(f"{emu.url}/api/v1/namespaces", params=query) as r:
            async for line in r.content:
                events.append(json.loads(line))
                if events[-1]["object"]["metadata"].get("name") == "c":
                    break
                if len(events) == existing + 1:
                    emu.load_objects([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "c"}}])
    names = [(e["type"], e["object"]["metadata"].get("name")) for e in events]
    initial, end, changes = names[:existing], events[existing], names[existing + 1 :]
    assert {t for t, _ in initial} == {"ADDED"} and {("ADDED", "a"), ("ADDED", "b")} <= set(initial)
    assert end["type"] == "BOOKMARK"
    assert end["object"]["metadata"] == {
        "resourceVersion": rv,
        "annotations": {"k8s.io/initial-events-end": "true"},
    }
    assert ("ADDED", "c") in changes
