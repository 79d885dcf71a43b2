"""The base of the stand-in operators for the integrated kinds served from CRDs (RayJob/RayCluster:
queueing/testing/ray.py; JobSet: queueing/testing/jobset.py), played on the emulator's store next to
the stand-in cluster (queueing/testing/cluster.py, which starts every operator it lists).

An operator waits until its kind's CRD is served (a test may install the CRD later), then watches its
kind and what it makes (pods, Jobs) and reconciles one object at a time on each event: it creates the
pods (or Jobs) the real operator would make from the object's templates, deletes them when it is
suspended, and writes its status. Reconciling is idempotent, so no test depends on timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any

from queueing.api.core import FINISHED_POD_PHASES
from queueing.testing.resources import ResourceType
from queueing.testing.store import CRD_KEY, ApiError, Store, Watcher

if TYPE_CHECKING:
    from queueing.testing.cluster import StandIns

__all__ = ["TEST_CRDS", "Key", "Operator", "next_events", "owner_ref", "pod_done"]

#: the test CRDs of the integrated kinds (only the fields queueing and the stand-ins read and write)
TEST_CRDS = Path(__file__).resolve().parent / "crds"

Key = tuple[str, str]  # (namespace, name)


def pod_done(pod: dict[str, Any]) -> bool:
    """The pod (as stored) has ended: it takes no node resources any more."""
    return (pod.get("status") or {}).get("phase") in FINISHED_POD_PHASES


def owner_ref(obj: dict[str, Any]) -> dict[str, Any]:
    """A controller owner reference to ``obj``."""
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


async def next_events(watchers: list[Watcher]) -> list[list[dict[str, Any]]]:
    """Wait for the next event of any of ``watchers``; then every event each holds, per watcher."""
    getters = [asyncio.ensure_future(w.queue.get()) for w in watchers]
    try:
        await asyncio.wait(getters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for g in getters:
            g.cancel()
    out: list[list[dict[str, Any]]] = []
    for g, w in zip(getters, watchers, strict=True):
        events = [g.result()] if g.done() and not g.cancelled() else []
        while not w.queue.empty():
            events.append(w.queue.get_nowait())
        out.append([e for e in events if e is not None])
    return out


class Operator:
    """Subclasses set ``group``/``plural`` (their kind), ``children`` (the (plural, group) of what
    they make, whose events reconcile the owner named by ``owner_label``), and :meth:`reconcile`."""

    group = ""
    plural = ""
    children: tuple[tuple[str, str], ...] = (("pods", ""),)
    owner_label = ""

    def __init__(self, standins: StandIns) -> None:
        self.standins = standins
        self.store: Store = standins.store
        self.errors = standins.errors
        self._timers: dict[tuple[str, str, str], asyncio.TimerHandle] = {}

    # ---------------------------------------------------------------- the loop
    def _served(self) -> ResourceType | None:
        try:
            return self.store.resource(self.plural, self.group)
        except KeyError:
            return None

    async def run(self) -> None:
        crds = self.store.watch(self.store.types[CRD_KEY], None, str(self.store.rv), None, None, False)
        try:
            while (rt := self._served()) is None:
                await crds.queue.get()
        finally:
            self.store.unwatch(crds)
        self.rt = rt
        watchers = [self.store.watch(rt, None, "0", None, None, False)]
        for plural, group in self.children:
            watchers.append(
                self.store.watch(self.store.resource(plural, group), None, "0", None, None, False)
            )
        try:
            while True:
                keys: dict[Key, None] = {}
                for i, events in enumerate(await next_events(watchers)):
                    for ev in events:
                        obj = ev.get("object") or {}
                        if "metadata" not in obj:
                            continue
                        ns = obj["metadata"].get("namespace") or ""
                        if i == 0:
                            keys[(ns, obj["metadata"]["name"])] = None
                        elif owner := self.owner_of(obj):
                            keys[(ns, owner)] = None
                for k in keys:
                    self.guard(self.reconcile, k)
        finally:
            for w in watchers:
                self.store.unwatch(w)
            for t in self._timers.values():
                t.cancel()

    def guard(self, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except Exception as e:  # keep playing; the test sees it in the stand-ins' errors
            self.errors.append(f"{type(self).__name__}.{fn.__name__}: {type(e).__name__}: {e}")

    def reconcile(self, key: Key) -> None:
        raise NotImplementedError

    def owner_of(self, child: dict[str, Any]) -> str | None:
        """The name of the object of this kind a child belongs to (by ``owner_label``)."""
        return (child["metadata"].get("labels") or {}).get(self.owner_label)

    # ---------------------------------------------------------------- helpers
    def get(self, key: Key) -> dict[str, Any] | None:
        try:
            return self.store.get(self.rt, key[0] or None, key[1])
        except ApiError:
            return None

    def children_of(self, plural: str, group: str, key: Key) -> list[dict[str, Any]]:
        rt = self.store.resource(plural, group)
        return self.store.list(rt, key[0], f"{self.owner_label}={key[1]}")[0]

    def make_pod(
        self, owner: dict[str, Any], template: dict[str, Any], name: str, labels: dict[str, str]
    ) -> None:
        """A pod from a pod template, owned by ``owner``."""
        tmeta = template.get("metadata") or {}
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{name}-{secrets.token_hex(3)}",
                "namespace": owner["metadata"]["namespace"],
                "labels": {**(tmeta.get("labels") or {}), **labels},
                "annotations": dict(tmeta.get("annotations") or {}),
                "ownerReferences": [owner_ref(owner)],
            },
            "spec": template.get("spec") or {},
        }
        self.store.create(self.store.resource("pods"), owner["metadata"]["namespace"], pod)
        self.standins.pods_created += 1

    def delete(self, plural: str, group: str, obj: dict[str, Any]) -> None:
        with contextlib.suppress(ApiError):  # already gone
            meta = obj["metadata"]
            self.store.delete(self.store.resource(plural, group), meta.get("namespace"), meta["name"])

    def set_status(self, key: Key, status: dict[str, Any]) -> None:
        obj = self.get(key)
        if obj is None or obj.get("status") == status:
            return
        obj["status"] = status
        self.store.update(self.rt, key[0] or None, key[1], obj, subresource="status")

    def after(self, key: Key, uid: str, seconds: float, fn: Any) -> None:
        """Call ``fn(key, uid)`` once after ``seconds`` (again only once the first call ran)."""
        timer = (key[0], key[1], uid)
        if timer in self._timers:
            return

        def fire() -> None:
            self._timers.pop(timer, None)
            self.guard(fn, key, uid)

        self._timers[timer] = asyncio.get_running_loop().call_later(seconds, fire)

    def cancel_timer(self, key: Key, uid: str) -> None:
        if (t := self._timers.pop((key[0], key[1], uid), None)) is not None:
            t.cancel()
