"""Event expiry (kube-apiserver's --event-ttl) and the watch-history cap, driven by an injected clock."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from queueing.kube.client import EVENTS, KubeClient, api_client_for_url
from queueing.testing import run_emulator
from queueing.testing.store import ApiError, Store


class FakeClock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def event(name: str, ns: str = "default") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": ns},
        "involvedObject": {"kind": "Job", "name": "j", "namespace": ns},
        "reason": "Test",
        "message": name,
        "count": 1,
    }


def names(store: Store, plural: str = "events", group: str = "") -> list[str]:
    items, *_ = store.list(store.resource(plural, group), "default")
    return [o["metadata"]["name"] for o in items]


def test_events_expire_after_the_ttl_since_their_last_write() -> None:
    clock = FakeClock()
    store = Store(clock=clock, event_ttl=600)
    core = store.resource("events")
    new_api = store.resource("events", "events.k8s.io")
    store.create(core, "default", event("a"))
    store.create(new_api, "default", {"metadata": {"name": "n"}, "reason": "Test", "note": "x"})
    clock.advance(300)
    store.create(core, "default", event("b"))
    # "a" is written again (the recorder bumps count): its TTL starts over
    a = store.get(core, "default", "a")
    a["count"] = 2
    store.update(core, "default", "a", a)
    cm = store.create(store.resource("configmaps"), "default", {"metadata": {"name": "keep"}})
    clock.advance(299)
    assert names(store) == ["a", "b"]
    assert names(store, "events", "events.k8s.io") == ["n"]
    clock.advance(1)  # 600 s after "n" was created
    assert names(store, "events", "events.k8s.io") == []
    assert names(store) == ["a", "b"]
    clock.advance(300)  # 600 s after "a" was updated and "b" created
    with pytest.raises(ApiError) as err:
        store.get(core, "default", "a")
    assert err.value.code == 404
    assert names(store) == []
    assert store.events_expired == 3
    # only Events expire
    assert (
        store.get(store.resource("configmaps"), "default", "keep")["metadata"]["uid"] == cm["metadata"]["uid"]
    )


def test_event_ttl_none_keeps_events_and_deleted_events_are_not_expired_twice() -> None:
    clock = FakeClock()
    forever = Store(clock=clock, event_ttl=None)
    forever.create(forever.resource("events"), "default", event("a"))
    clock.advance(10 * 86400)
    assert names(forever) == ["a"]

    store = Store(clock=clock, event_ttl=60)
    core = store.resource("events")
    store.create(core, "default", event("a"))
    store.delete(core, "default", "a")
    store.create(core, "default", event("a"))  # a new object with the same name, created later
    clock.advance(30)
    store.create(core, "default", event("b"))
    clock.advance(30)
    assert store.expire_events() == 1  # the second "a"; the deleted one is skipped
    assert names(store) == ["b"]


def test_history_limit_caps_the_watch_replay() -> None:
    store = Store(history_limit=3)
    cms = store.resource("configmaps")
    start = store.rv
    for i in range(5):
        store.create(cms, "default", {"metadata": {"name": f"c{i}"}})
    assert len(store.history) == 3
    with pytest.raises(ApiError) as err:
        store.watch(cms, "default", str(start), None, None, False)
    assert err.value.code == 410
    w = store.watch(cms, "default", str(store.rv - 3), None, None, False)
    assert [w.queue.get_nowait()["object"]["metadata"]["name"] for _ in range(3)] == ["c2", "c3", "c4"]


async def test_expired_events_are_deleted_for_watchers_through_the_api() -> None:
    clock = FakeClock()
    async with run_emulator(bookmark_interval=None, event_ttl=120, history_limit=50, clock=clock) as emu:
        assert emu.store.history_limit == 50
        api = api_client_for_url(emu.url, token="admin-token")
        try:
            kube = KubeClient(api)
            created = await kube.create(EVENTS, event("e"), "default")
            w = emu.store.watch(
                emu.store.resource("events"),
                "default",
                created["metadata"]["resourceVersion"],
                None,
                None,
                False,
            )
            clock.advance(121)
            items = (await kube.list(EVENTS, "default"))["items"]
            assert items == []
            ev = await asyncio.wait_for(w.queue.get(), 5)
            assert ev is not None
            assert (ev["type"], ev["object"]["metadata"]["name"]) == ("DELETED", "e")
        finally:
            await api.close()
