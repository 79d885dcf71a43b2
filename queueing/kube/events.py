"""Kubernetes Events (core/v1, what ``kubectl describe`` lists under "Events") about our objects.

``EventRecorder.emit(obj, "Normal", "Admitted", "...")`` records an Event the way client-go's recorder
does: one Event per key (object, type, reason, message), named ``<object>.<digest of the key>``. The
first emit creates it; emitting the same key again patches its ``count`` and ``lastTimestamp`` — at
most once per ``repeat_interval`` per key (repeats in between are counted and carried by the next
write), since the controller reconciles often and every Event is an API write. After a restart the
Event already exists (409 AlreadyExists on create): it is read and updated, its count going on from
the stored one. A failure to record an Event is logged as one line (the API's status and reason, never
the HTTP response) and never stops the caller.

Like client-go's, the recorder is off the caller's path: ``emit`` decides what to write (the names,
counts and aggregation above) and returns at once; background workers (``concurrency`` of them) write
what is queued, each key by one worker at a time, in order. The queue holds at most ``buffer`` keys:
past that an Event is dropped (``dropped`` counts them; a log line at most every
``drop_log_interval`` seconds). ``flush()`` waits until everything queued is written; ``stop()``
flushes (within a timeout) and ends the workers (a later ``emit`` starts them again).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from queueing.api.base import KubeObject
from queueing.kube.client import EVENTS, PATCH_CONTENT_TYPES, KubeClient
from queueing.kube.writes import describe_error, is_already_exists

__all__ = ["EventRecorder"]

log = logging.getLogger("queueing.kube.events")

NAME_MAX = 253

_IDLE, _QUEUED, _WRITING = 0, 1, 2


@dataclass(eq=False)
class _Recorded:
    name: str
    namespace: str
    what: str  # "<type> <reason> on <object>", for the log
    count: int  # what the API holds once the pending repeats are written
    written: int  # the count last written (0: not created yet)
    written_at: float  # the recorder's clock
    body: dict[str, Any] | None = None  # the Event to create, until it is
    state: int = _IDLE
    again: bool = False  # asked for a write while one was under way


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
        concurrency: int = 8,
        buffer: int = 10000,
        drop_log_interval: float = 10.0,
    ) -> None:
        self.kube = kube
        self.component = component
        self.memory = memory
        self.repeat_interval = repeat_interval
        self.clock = clock
        self.concurrency = max(1, concurrency)
        self.buffer = max(1, buffer)
        self.drop_log_interval = drop_log_interval
        self._seen: OrderedDict[tuple[str, str, str, str], _Recorded] = OrderedDict()
        self._by_uid: dict[str, set[tuple[str, str, str, str]]] = {}
        self.emitted = 0  # Events created
        self.updated = 0  # count/lastTimestamp patches
        self.failed = 0
        self.dropped = 0  # writes not queued: the buffer was full
        self._dropped_logged = 0
        self._drop_logged_at: float | None = None
        self._queue: asyncio.Queue[_Recorded] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._workers: list[asyncio.Task[None]] = []

    def __len__(self) -> int:
        """How many (object, type, reason, message) keys are remembered."""
        return len(self._seen)

    @property
    def queued(self) -> int:
        """Writes waiting for a worker."""
        return self._queue.qsize() if self._queue is not None else 0

    def forget(self, uid: str) -> None:
        """Drop what is remembered about an object (call when it is deleted)."""
        for key in self._by_uid.pop(uid, ()):
            self._seen.pop(key, None)

    def _drop_oldest(self) -> None:
        key, _ = self._seen.popitem(last=False)
        self._unindex(key)

    def _unindex(self, key: tuple[str, str, str, str]) -> None:
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
        """Record an Event: decide what to write, queue it and return (nothing here waits for the
        API; a coroutine so that callers ``await`` it as before)."""
        uid = obj.metadata.uid or obj.key
        key = (uid, type_, reason, message)
        rec = self._seen.get(key)
        if rec is not None:
            rec.count += 1
            self._seen.move_to_end(key)
            if rec.state != _QUEUED and self.clock() - rec.written_at >= self.repeat_interval:
                self._enqueue(rec)  # (a queued write carries the new count)
            return
        namespace = obj.namespace or "default"
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
        rec = _Recorded(name, namespace, f"{type_} {reason} on {obj.key}", 1, 0, self.clock(), body)
        if self._enqueue(rec):
            self._remember(key, rec)  # a dropped one is not: the next emit tries again

    # ------------------------------------------------------------ the queue and its workers
    def _enqueue(self, rec: _Recorded) -> bool:
        if rec.state == _QUEUED:
            return True
        if rec.state == _WRITING:
            rec.again = True
            return True
        queue = self._ensure_workers()
        if queue.qsize() >= self.buffer:
            self._drop(rec)
            return False
        rec.state = _QUEUED
        queue.put_nowait(rec)
        return True

    def _drop(self, rec: _Recorded) -> None:
        self.dropped += 1
        now = self.clock()
        if self._drop_logged_at is None or now - self._drop_logged_at >= self.drop_log_interval:
            log.warning(
                "event %s dropped: %d Events queued (%d dropped so far)",
                rec.what,
                self.buffer,
                self.dropped,
            )
            self._drop_logged_at = now

    def _ensure_workers(self) -> asyncio.Queue[_Recorded]:
        loop = asyncio.get_running_loop()
        if self._queue is None or self._loop is not loop:  # first use, or a new event loop
            self._queue, self._loop, self._workers = asyncio.Queue(), loop, []
        self._workers = [w for w in self._workers if not w.done()]
        while len(self._workers) < self.concurrency:
            self._workers.append(loop.create_task(self._work(self._queue), name="event-recorder"))
        return self._queue

    async def _work(self, queue: asyncio.Queue[_Recorded]) -> None:
        while True:
            rec = await queue.get()
            rec.state = _WRITING
            try:
                await self._write(rec)
            except Exception as e:  # an Event is best effort
                self.failed += 1
                log.info("event %s not recorded: %s", rec.what, describe_error(e))
            finally:
                rec.state = _IDLE
                queue.task_done()
            if rec.again:
                rec.again = False
                if rec.count != rec.written:
                    self._enqueue(rec)

    async def flush(self) -> None:
        """Wait until every queued write is done."""
        if self._queue is not None and self._loop is asyncio.get_running_loop():
            await self._queue.join()

    async def stop(self, timeout: float = 10.0) -> None:
        """Write what is queued (for at most ``timeout`` seconds), then end the workers."""
        if self._queue is not None and self._loop is asyncio.get_running_loop():
            try:
                await asyncio.wait_for(self._queue.join(), timeout)
            except TimeoutError:
                log.warning("%d Events not written at stop", self._queue.qsize())
        workers, self._workers = self._workers, []
        for w in workers:
            w.cancel()
        for w in workers:
            with contextlib.suppress(asyncio.CancelledError, RuntimeError):
                await w

    # ------------------------------------------------------------ the writes
    async def _write(self, rec: _Recorded) -> None:
        if rec.body is not None:
            body, rec.body = rec.body, None
            count = body["count"] = rec.count
            rec.written_at = self.clock()
            try:
                await self.kube.request("POST", EVENTS.path(rec.namespace), body=body, parse=False)
            except Exception as e:
                if not is_already_exists(e):
                    rec.written = rec.count
                    self.failed += 1
                    log.info("event %s not recorded: %s", rec.what, describe_error(e))
                    return
            else:
                rec.written = count
                self.emitted += 1
                return
            # recorded before a restart (same key, same name): go on from its count, as client-go does
            try:
                existing = await self.kube.get(EVENTS, rec.name, rec.namespace)
            except Exception as e:
                rec.written = rec.count
                self.failed += 1
                log.info("event %s not updated: %s", rec.what, describe_error(e))
                return
            stored = int(existing.get("count") or 1)
            rec.written = stored
            rec.count += stored
        await self._update(rec)

    async def _update(self, rec: _Recorded) -> None:
        if rec.count == rec.written:
            return
        rec.written_at = self.clock()
        count = rec.count
        try:
            await self.kube.request(
                "PATCH",
                EVENTS.path(rec.namespace, rec.name),
                body={"count": count, "lastTimestamp": _now()},
                content_type=PATCH_CONTENT_TYPES["merge"],
                parse=False,
            )
        except Exception as e:
            self.failed += 1
            log.info("event %s not updated: %s", rec.what, describe_error(e))
            return
        rec.written = count
        self.updated += 1
