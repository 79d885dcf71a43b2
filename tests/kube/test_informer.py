"""Informers against the emulator: list+watch, handlers, and convergence through API faults."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queueing.api.base import KubeObject
from queueing.api.core import Pod
from queueing.kube.client import PODS, KubeClient, Resource
from queueing.kube.informer import Informer
from queueing.testing import Emulator
from tests.kube.conftest import eventually

WIDGETS = Resource("test.queueing.dra.io", "v1", "widgets", True, "Widget")


def pod(name: str, labels: dict[str, str] | None = None, ns: str = "default") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns, "labels": labels or {}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}  # fmt: skip


class Mirror:
    """State rebuilt only from handler calls, to prove handlers saw every change exactly once."""

    def __init__(self) -> None:
        self.state: dict[str, str] = {}  # key -> resourceVersion
        self.calls: list[tuple[str | None, str | None]] = []
        self.problems: list[str] = []

    def __call__(self, old: KubeObject | None, new: KubeObject | None) -> None:
        self.calls.append((old.name if old else None, new.name if new else None))
        if new is None:
            assert old is not None
            if old.key not in self.state:
                self.problems.append(f"delete of unknown {old.key}")
            self.state.pop(old.key, None)
            return
        if old is None and new.key in self.state:
            self.problems.append(f"duplicate add of {new.key}")
        if old is not None and self.state.get(old.key) != old.metadata.resource_version:
            self.problems.append(f"stale old for {old.key}")
        self.state[new.key] = new.metadata.resource_version or ""


def server_state(emu: Emulator, plural: str = "pods", group: str = "") -> dict[str, str]:
    rt = emu.store.resource(plural, group)
    items, _, _, _ = emu.store.list(rt)
    return {
        (f"{o['metadata']['namespace']}/" if o["metadata"].get("namespace") else "") + o["metadata"]["name"]: o["metadata"]["resourceVersion"]
        for o in items
    }  # fmt: skip


def cache_state(inf: Informer[Any]) -> dict[str, str]:
    return {o.key: o.metadata.resource_version or "" for o in inf.list()}


@pytest.fixture
async def pods(kube: KubeClient) -> AsyncIterator[tuple[Informer[Pod], Mirror]]:
    inf: Informer[Pod] = Informer(kube, PODS, Pod, watch_timeout=30, backoff_initial=0.01, backoff_max=0.1)
    mirror = Mirror()
    inf.add_handler(mirror)
    inf.start()
    try:
        yield inf, mirror
    finally:
        await inf.stop()


async def test_lists_then_watches_with_old_and_new(kube: KubeClient, emu: Emulator) -> None:
    await kube.create(PODS, pod("early"))
    inf: Informer[Pod] = Informer(kube, PODS, Pod)
    calls: list[tuple[Pod | None, Pod | None]] = []

    async def handler(old: Pod | None, new: Pod | None) -> None:  # coroutine handlers are awaited
        calls.append((old, new))

    inf.add_handler(handler)
    assert not inf.has_synced
    inf.start()
    await inf.wait_synced(5)
    assert inf.has_synced and inf.keys() == ["default/early"]
    assert isinstance(inf.get("early", "default"), Pod)
    await kube.create(PODS, pod("late"))
    await kube.bind("late", "default", "n1")
    await kube.delete(PODS, "early", "default")
    await eventually(lambda: len(calls) == 4, "4 handler calls")
    summary = [(o.name if o else None, n.name if n else None) for o, n in calls]
    assert summary == [(None, "early"), (None, "late"), ("late", "late"), ("early", None)]
    old, new = calls[2]
    assert old is not None and new is not None
    assert old.spec.node_name is None and new.spec.node_name == "n1"
    assert inf.get("late", "default") == new
    await inf.stop()
    assert inf.stats.lists == 1 and inf.stats.events == 3
    await eventually(lambda: emu.open_watches == 0, "the watch to close")


async def test_selectors_namespace_and_untyped_fallback(kube: KubeClient, emu: Emulator) -> None:
    await kube.create(PODS, pod("ours", {"queueing.dra.io/pod-group": "g"}))
    await kube.create(PODS, pod("theirs"))
    ours: Informer[Any] = Informer(
        kube, PODS, namespace="default", label_selector="queueing.dra.io/pod-group"
    )
    widgets: Informer[Any] = Informer(kube, WIDGETS)
    ours.start()
    widgets.start()
    await ours.wait_synced(5)
    await widgets.wait_synced(5)
    assert ours.keys() == ["default/ours"]
    obj = ours.get("ours", "default")
    assert type(obj) is KubeObject and obj is not None
    assert obj.to_dict()["spec"] == {"containers": [{"name": "c", "image": "x"}]}  # unknown fields kept
    await kube.create(WIDGETS, {"metadata": {"name": "w", "namespace": "default"}, "spec": {"size": 2}})
    await kube.patch(PODS, "theirs", {"metadata": {"labels": {"queueing.dra.io/pod-group": "g"}}}, "default")
    await eventually(lambda: ours.keys() == ["default/ours", "default/theirs"], "label change seen as an add")
    await eventually(lambda: widgets.keys() == ["default/w"], "widget seen")
    w = widgets.get("w", "default")
    assert w is not None and w.to_dict()["spec"] == {"size": 2, "color": "red"}
    await ours.stop()
    await widgets.stop()


async def test_invalid_objects_are_reported_not_cached(kube: KubeClient) -> None:
    await kube.create(
        PODS, {"metadata": {"name": "bad", "namespace": "default"}, "spec": {"containers": "oops"}}
    )
    await kube.create(PODS, pod("good"))
    inf: Informer[Pod] = Informer(kube, PODS, Pod)
    inf.start()
    await inf.wait_synced(5)
    assert inf.keys() == ["default/good"]
    assert "Pod default/bad: spec.containers" in inf.invalid["default/bad"]
    await kube.delete(PODS, "bad", "default")
    await eventually(lambda: inf.invalid == {}, "the invalid object's deletion")
    # an object that turns invalid leaves the cache (as a delete for the handlers) until it is fixed
    await kube.patch(
        PODS, "good", {"status": {"conditions": [{"reason": "no type"}]}}, "default", subresource="status"
    )
    await eventually(lambda: inf.keys() == [], "the object turned invalid to leave the cache")
    assert "Pod default/good: status.conditions[0].type: Field required" in inf.invalid["default/good"]
    await kube.patch(PODS, "good", {"status": {"conditions": []}}, "default", subresource="status")
    await eventually(lambda: inf.keys() == ["default/good"], "the fixed object to be cached")
    assert inf.invalid == {}
    await inf.stop()


async def test_survives_watch_drops_gone_and_errors(
    kube: KubeClient, emu: Emulator, pods: tuple[Informer[Pod], Mirror]
) -> None:
    inf, mirror = pods
    await inf.wait_synced(5)
    n = 0

    async def churn() -> None:
        nonlocal n
        for _ in range(3):
            await kube.create(PODS, pod(f"p{n}"))
            if n >= 2:
                await kube.patch(PODS, f"p{n - 2}", {"metadata": {"labels": {"step": str(n)}}}, "default")
            if n >= 4 and n % 2 == 0:
                await kube.delete(PODS, f"p{n - 4}", "default")
            n += 1

    async def converged() -> None:
        await eventually(lambda: cache_state(inf) == server_state(emu), "the cache to match the server")
        assert mirror.state == server_state(emu)

    await churn()
    await converged()
    # clean end of every watch stream
    assert emu.faults.drop_watches() == 1
    await churn()
    await converged()
    # connection aborted mid-stream
    emu.faults.drop_watches(abort=True)
    await churn()
    await converged()
    # the next watch is answered with 410 Gone: re-list
    gone_before = inf.stats.gone
    emu.faults.gone_on_next_watch()
    emu.faults.drop_watches()
    await churn()
    await converged()
    assert inf.stats.gone == gone_before + 1
    # watches and lists fail with 500 for a while, history compacted meanwhile
    emu.faults.fail_next(500, verb="watch", resource="pods", count=3)
    emu.faults.fail_next(500, verb="list", resource="pods", count=1)
    emu.faults.drop_watches(abort=True)
    await churn()
    emu.faults.compact()
    await churn()
    await converged()
    # an API server restart: watches aborted, resourceVersion jumps, old history gone
    emu.faults.restart(rv_jump=5000)
    await churn()
    await converged()
    assert inf.stats.errors >= 3
    assert mirror.problems == []


async def test_relist_reports_objects_deleted_while_disconnected(
    kube: KubeClient, emu: Emulator, pods: tuple[Informer[Pod], Mirror]
) -> None:
    inf, mirror = pods
    await kube.create(PODS, pod("a"))
    await kube.create(PODS, pod("b"))
    await eventually(lambda: inf.keys() == ["default/a", "default/b"], "both pods cached")
    emu.faults.fail_next(500, verb="watch", resource="pods", count=1000)
    emu.faults.drop_watches(abort=True)
    errors = inf.stats.errors
    await eventually(lambda: inf.stats.errors > errors, "the informer to be disconnected")
    await kube.delete(PODS, "a", "default")
    await kube.patch(PODS, "b", {"metadata": {"labels": {"x": "y"}}}, "default")
    emu.faults.compact()  # the deletion event is gone from the history: only a re-list can find it
    emu.faults.clear()
    await eventually(lambda: inf.keys() == ["default/b"], "the deletion to be noticed")
    await eventually(lambda: cache_state(inf) == server_state(emu), "b's update")
    assert ("a", None) in mirror.calls and mirror.problems == []
    assert mirror.state == server_state(emu)


async def test_bookmarks_advance_the_resource_version(
    kube: KubeClient, emu: Emulator, pods: tuple[Informer[Pod], Mirror]
) -> None:
    inf, _ = pods
    await inf.wait_synced(5)
    await eventually(lambda: emu.open_watches == 1, "the watch to open")
    await kube.create(WIDGETS, {"metadata": {"name": "w", "namespace": "default"}, "spec": {"size": 1}})
    emu.send_bookmarks()
    await eventually(lambda: inf.stats.bookmarks == 1, "a bookmark")
    # the widget write moved the global resourceVersion; the pod informer learns it from the bookmark,
    # so compacting now does not force a re-list when its watch restarts
    assert inf.resource_version == str(emu.store.rv)
    lists = inf.stats.lists
    emu.faults.compact()
    emu.faults.drop_watches()
    await kube.create(PODS, pod("after"))
    await eventually(lambda: inf.keys() == ["default/after"], "the new pod")
    assert inf.stats.lists == lists and inf.stats.gone == 0


async def test_server_timeouts_rewatch_without_relisting(kube: KubeClient, emu: Emulator) -> None:
    # timeoutSeconds=1: the server ends the watch every second; each re-watch resumes from the last
    # resourceVersion seen, so nothing is missed and no re-list is needed
    inf: Informer[Pod] = Informer(kube, PODS, Pod, watch_timeout=1, backoff_initial=0.001, backoff_max=0.01)
    mirror = Mirror()
    inf.add_handler(mirror)
    inf.start()
    await inf.wait_synced(5)
    for i in range(3):
        await kube.create(PODS, pod(f"p{i}"))
    await eventually(lambda: inf.stats.watches >= 2, "the first watch to time out")
    await kube.delete(PODS, "p0", "default")
    await kube.create(PODS, pod("p3"))
    await eventually(lambda: cache_state(inf) == server_state(emu), "the cache to match the server")
    await inf.stop()
    assert inf.stats.lists == 1 and inf.stats.errors == 0
    assert mirror.state == server_state(emu) and mirror.problems == []


async def test_a_mirror_sees_observed_writes_and_a_transform_cuts_objects(kube: KubeClient) -> None:
    def keep_name(raw: dict[str, Any]) -> dict[str, Any]:
        meta = raw["metadata"]
        return {
            "metadata": {k: meta[k] for k in ("name", "namespace", "resourceVersion")},
            "spec": raw["spec"],
        }

    inf: Informer[Pod] = Informer(kube, PODS, Pod, transform=keep_name)
    mirror = Mirror()
    inf.add_mirror(mirror)
    inf.start()
    await inf.wait_synced(5)
    raw = await kube.create(PODS, pod("a", {"x": "1"}))
    assert inf.observe(raw) is not None  # cached at once, before the watch echoes it
    assert mirror.state == cache_state(inf) == {"default/a": raw["metadata"]["resourceVersion"]}
    cached = inf.get("a", "default")
    assert cached is not None and cached.metadata.labels is None  # the transform dropped them
    await kube.bind("a", "default", "n1")
    await eventually(
        lambda: (p := inf.get("a", "default")) is not None and p.spec.node_name == "n1", "the bind"
    )
    assert mirror.state == cache_state(inf)
    await kube.delete(PODS, "a", "default")
    inf.forget("a", "default")
    assert mirror.state == cache_state(inf) == {}
    await eventually(lambda: inf.stats.events >= 3, "the watch's events")
    assert mirror.state == {} and not mirror.problems
    await inf.stop()


async def test_a_write_answered_after_the_watch_delivered_its_deletion_does_not_bring_it_back(
    kube: KubeClient,
) -> None:
    """A status write races a deletion: the watch delivers DELETED before the write's response is
    handled. ``observe`` of that response must not put the deleted object back into the cache (the
    controller would keep a pending reason and an Event for it, tests/controller/test_forget.py);
    an object created again under the same name (a later resourceVersion) is cached as usual."""
    inf: Informer[Pod] = Informer(kube, PODS, Pod)
    inf.start()
    await inf.wait_synced(5)
    raw = await kube.create(PODS, pod("race", {"x": "1"}))
    written = await kube.patch(PODS, "race", {"metadata": {"labels": {"x": "2"}}}, "default")
    await kube.delete(PODS, "race", "default")
    await eventually(lambda: inf.get("race", "default") is None and inf.stats.events >= 3, "the deletion")
    assert inf.observe(written) is None and inf.observe(raw) is None  # answered late: stays gone
    assert inf.get("race", "default") is None
    again = await kube.create(PODS, pod("race", {"x": "3"}))
    assert inf.observe(again) is not None  # created anew: a later version than the deletion
    cached = inf.get("race", "default")
    assert cached is not None and cached.labels == {"x": "3"}
    await inf.stop()


async def test_managed_fields_are_not_kept(kube: KubeClient) -> None:
    """What a real API server adds to every object (the emulator does not): the cache leaves it out,
    the dict given to ``observe`` keeps it."""
    inf: Informer[Pod] = Informer(kube, PODS, Pod)
    raw = await kube.create(PODS, pod("mf", {"x": "1"}))
    managed = [
        {
            "manager": "kubectl",
            "operation": "Update",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {}},
        }
    ]
    raw["metadata"]["managedFields"] = managed
    cached = inf.observe(raw)
    assert cached is not None and cached.labels == {"x": "1"}
    assert "managedFields" not in cached.metadata.to_dict() and raw["metadata"]["managedFields"] == managed


async def test_short_strings_are_shared_between_cached_objects(emu: Emulator) -> None:
    """Two Pods read through two informers of one client hold one str per repeated value (one
    table), their UIDs untouched; in verify mode each is also parsed without the table and equal."""
    from queueing.kube.client import api_client_for_url
    from queueing.kube.informer import INTERN_MAX, intern_strings

    api = api_client_for_url(emu.url, token="admin-token")
    try:
        kube = KubeClient(api, environ={"QUEUEING_VERIFY": "1"})
        a_inf: Informer[Pod] = Informer(kube, PODS, Pod, label_selector="set=a")
        b_inf: Informer[Pod] = Informer(kube, PODS, Pod, label_selector="set=b")
        a = a_inf.observe(await kube.create(PODS, pod("pa", {"set": "a", "team": "blue"})))
        b = b_inf.observe(await kube.create(PODS, pod("pb", {"set": "b", "team": "blue"})))
        assert a is not None and b is not None
        assert a.labels["team"] is b.labels["team"] and a.namespace is b.namespace
        assert a.spec.containers[0].image is b.spec.containers[0].image == "x"
        assert a.metadata.uid not in kube.strings and a.metadata.uid != b.metadata.uid
    finally:
        await api.close()
    table: dict[str, str] = {}
    long = "y" * (INTERN_MAX + 1)
    raw = {"a": ["s", {"b": "s", "uid": "u"}], "c": long, "n": 1}
    assert intern_strings(raw, table) == {"a": ["s", {"b": "s", "uid": "u"}], "c": long, "n": 1}
    assert table == {"s": "s"}


_event = st.tuples(
    st.sampled_from(["ADDED", "MODIFIED", "DELETED", "observe", "forget", "invalid"]),
    st.sampled_from(["b", "a", "c", "a0", "z"]),
    st.sampled_from(["default", "kube-system"]),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_event, max_size=30), st.booleans())
def test_list_is_in_key_order_after_any_sequence_of_changes(
    events: list[tuple[str, str, str]], verify: bool
) -> None:
    """``list``/``keys`` keep the sorted keys until a key joins or leaves: after any sequence of watch
    events, observed writes, forgets and objects turned invalid they give the cache in key order (in
    verify mode the kept keys are also compared with a fresh sort at every call)."""
    client = SimpleNamespace(verify=verify, strings={})
    inf: Informer[Pod] = Informer(client, PODS, Pod)  # type: ignore[arg-type]

    async def run() -> None:
        for rv, (kind, name, ns) in enumerate(events, 1):
            raw = pod(name, ns=ns)
            raw["metadata"]["resourceVersion"] = str(rv)
            if kind == "observe":
                inf.observe(raw)
            elif kind == "forget":
                inf.forget(name, ns)
            elif kind == "invalid":
                raw["spec"] = {"containers": "not a list"}
                await inf._apply({"type": "MODIFIED", "raw_object": raw})
            else:
                await inf._apply({"type": kind, "raw_object": raw})
            assert inf.keys() == sorted(inf._cache)
            assert [p.key for p in inf.list()] == sorted(inf._cache)

    asyncio.run(run())
