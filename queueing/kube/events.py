"""Kubernetes Events (core/v1, what ``kubectl describe`` lists under "Events") about our objects.

``EventRecorder.emit(obj, "Normal", "Admitted", "...")`` records an Event the way client-go's recorder
does: one Event per key (object, type, reason, message), named ``<object>.<digest of the key>``. The
first emit creates it with ``count: 1``; emitting the same key again patches its ``count`` and
``lastTimestamp`` — at most once per ``repeat_interval`` per key (repeats in between are counted and
carried by the next patch), since the controller reconciles often and every Event is an API write.
After a restart the Event already exists (409 AlreadyExists on create): it is read and updated, its
count going on from the stored one. A failure to record an Event is logged as one line (the API's
status and reason, never the HTTP response) and never stops the caller.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from queueing.api.base import KubeObject
from queueing.kube.client import EVENTS, KubeClient
from queueing.kube.writes import describe_error, is_already_exists

__all__ = ["EventRecorder"]

log = logging.getLogger("queueing.kube.events")

NAME_MAX = 253


@dataclass
class _Recorded:
    name: str
    namespace: str
    count: int  # what the API holds once the pending repeats are written
    written: int  # the count last written
    written_at: float  # the recorder's clock


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventRecorder:
    def __init__(
        self,
        kube: KubeClient,
        component: str = "queueing-controller",
        memory: int = 10000,
        *,
        repeat_interval: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.component = component
        self.memory = memory
        self.repeat_interval = repeat_interval
        self.clock = clock
        self._seen: OrderedDict[tuple[str, str, str, str], _Recorded] = OrderedDict()
        self._by_uid: dict[str, set[tuple[str, str, str, str]]] = {}
        self.emitted = 0  # Events created
        self.updated = 0  # count/lastTimestamp patches
        self.failed = 0

    def __len__(self) -> int:
        """How many (object, type, reason, message) keys are remembered."""
        return len(self._seen)

    def forget(self, uid: str) -> None:
        """Drop what is remembered about an object (call when it is deleted)."""
        for key in self._by_uid.pop(uid, ()):
            self._seen.pop(key, None)

    def _drop_oldest(self) -> None:
        key, _ = self._seen.popitem(last=False)
        keys = self._by_uid.get(key[0])
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_uid[key[0]]

    def _remember(self, key: tuple[str, str, str, str], rec: _Recorded) -> None:
        self._seen[key] = rec
        self._by_uid.setdefault(key[0], set()).add(key)
        while len(self._seen) > self.memory:
            self._drop_oldest()

    async def emit(
        self,
        obj: KubeObject,
        type_: str,
        reason: str,
        message: str,
        *,
        api_version: str | None = None,
        kind: str | None = None,
    ) -> None:
        uid = obj.metadata.uid or obj.key
        key = (uid, type_, reason, message)
        namespace = obj.namespace or "default"
        rec = self._seen.get(key)
        if rec is not None:
            rec.count += 1
            self._seen.move_to_end(key)
            if self.clock() - rec.written_at >= self.repeat_interval:
                await self._update(rec, what=f"{type_} {reason} on {obj.key}")
            return
        digest = hashlib.sha256("\0".join(key).encode()).hexdigest()[:16]
        name = f"{obj.name[: NAME_MAX - len(digest) - 1]}.{digest}"
        now = _now()
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": {
                "apiVersion": api_version or obj.api_version or type(obj).API_VERSION,
                "kind": kind or obj.kind or type(obj).KIND,
                "name": obj.name,
                "namespace": namespace,
                "uid": obj.metadata.uid,
                "resourceVersion": obj.metadata.resource_version,
            },
            "reason": reason,
            "message": message[:1024],
            "type": type_,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        rec = _Recorded(name, namespace, 1, 1, self.clock())
        self._remember(key, rec)
        try:
            await self.kube.create(EVENTS, body, namespace)
            self.emitted += 1
            return
        except Exception as e:  # an Event is best effort
            if not is_already_exists(e):
                self.failed += 1
                log.info("event %s %s on %s not recorded: %s", type_, reason, obj.key, describe_error(e))
                return
        # recorded before a restart (same key, same name): go on from its count, as client-go does
        try:
            existing = await self.kube.get(EVENTS, name, namespace)
            rec.count = int(existing.get("count") or 1) + 1
        except Exception as e:
            self.failed += 1
            log.info("event %s %s on %s not updated: %s", type_, reason, obj.key, describe_error(e))
            return
        await self._update(rec, what=f"{type_} {reason} on {obj.key}")

    async def _update(self, rec: _Recorded, *, what: str) -> None:
        if rec.count == rec.written:
            return
        rec.written_at = self.clock()
        try:
            await self.kube.patch(
                EVENTS, rec.name, {"count": rec.count, "lastTimestamp": _now()}, rec.namespace
            )
        except Exception as e:
            self.failed += 1
            log.info("event %s not updated: %s", what, describe_error(e))
            return
        rec.written = rec.count
        self.updated += 1
