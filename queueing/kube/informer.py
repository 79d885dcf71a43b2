"""Informers: list then watch one kind, keep a typed in-memory cache, call handlers with (old, new).

The loop: LIST (paged) -> replace the cache, reporting the differences to the handlers -> WATCH from the
list's resourceVersion with ``allowWatchBookmarks`` and a server-side ``timeoutSeconds`` -> on a clean
end of the stream, re-WATCH from the last resourceVersion seen (events and BOOKMARKs both advance it);
on 410 Gone (the resourceVersion was compacted away) LIST again; on any other failure (connection lost,
5xx, client timeout) back off exponentially and re-WATCH (LIST again after repeated failures).

kubernetes-asyncio's ``Watch`` is used for the stream; it is always given ``timeout_seconds`` so it
never reconnects or retries a 410 by itself — this loop owns all of that. Its lines are parsed with
the client's ``loads`` (orjson, ``json``'s results); ERROR events and malformed lines go to
kubernetes-asyncio's own ``unmarshal_event``, which raises what it always raised.

Objects are parsed with the model class given (any ``KubeObject`` subclass); without one, the cache holds
plain ``KubeObject``s (every field kept). An object the model rejects is left out of the cache and
recorded in ``invalid`` (key -> message), so the controller can report it and keep going;
``invalid_objects()`` gives each with a reference to it (apiVersion, kind and metadata only), e.g. for
an Event.

Handlers are called in event order, after the cache is updated, with ``(old, new)``; ``new`` is None
on delete, ``old`` is None on add. A handler may be a plain function or a coroutine function; an
exception in a handler is logged and does not stop the informer. A mirror (``add_mirror``: a plain
function) sees every change of the cache, the watch's and those of ``observe``/``forget`` too, so a
structure kept in step with the cache (the cluster cache) stays equal to it.

``transform`` cuts each object (the raw dict) down before it is parsed and kept, e.g. to a light
projection of every Pod of the cluster (memory). ``metadata.managedFields`` is never kept (client-go's
``TransformStripManagedFields``, as Kueue's manager sets it): nothing here reads it, and on a real API
server it is often the largest part of an object (a write without it leaves the stored one as is).

The short strings of every object (at most ``INTERN_MAX`` characters: namespaces, labels, images,
condition types and reasons, timestamps, ...) are interned in the client's table (``KubeClient.strings``,
shared by its informers) before the object is parsed, so the cached models of 15,000 Jobs and their
Workloads hold one str per distinct value rather than one per object (about 2 KB less per Job). UIDs
and resourceVersions, unique by nature, are left as they are; the table is emptied when it holds
``INTERN_TABLE_MAX`` strings. In verify mode each object is also parsed without interning and must equal.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import copy
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.watch import Watch
from pydantic import ValidationError

from queueing.api.base import KubeObject, format_validation_error
from queueing.dra.verify import VerifyError
from queueing.kube.client import KubeClient, Resource, allow_long_lines, loads
from queueing.kube.writes import describe_error

__all__ = ["INTERN_MAX", "INTERN_TABLE_MAX", "Handler", "Informer", "InformerStats", "intern_strings"]

log = logging.getLogger("queueing.kube.informer")

T = TypeVar("T", bound=KubeObject)
Handler = Callable[[T | None, T | None], Awaitable[None] | None]


@dataclass
class InformerStats:
    lists: int = 0
    watches: int = 0
    gone: int = 0  # 410s handled by a re-list
    errors: int = 0  # failed requests or streams (backed off)
    events: int = 0  # ADDED/MODIFIED/DELETED events applied
    bookmarks: int = 0


INTERN_MAX = 64  # longer strings are rarely repeated
INTERN_TABLE_MAX = 200_000
_UNIQUE_KEYS = frozenset({"uid", "resourceVersion"})  # never repeated: not worth a table entry


def intern_strings(raw: Any, table: dict[str, str]) -> Any:
    """Replace (in place) each str value of at most ``INTERN_MAX`` characters in the JSON value ``raw``
    by the equal one of ``table`` (added when new); returns ``raw``. Keys need nothing: orjson reuses
    one str per key already."""
    if isinstance(raw, dict):
        for k, v in raw.items():
            if type(v) is str:
                if len(v) <= INTERN_MAX and k not in _UNIQUE_KEYS:
                    raw[k] = table.setdefault(v, v)
            elif isinstance(v, dict | list):
                intern_strings(v, table)
    elif isinstance(raw, list):
        for i, v in enumerate(raw):
            if type(v) is str:
                if len(v) <= INTERN_MAX:
                    raw[i] = table.setdefault(v, v)
            elif isinstance(v, dict | list):
                intern_strings(v, table)
    return raw


class _Watch(Watch):
    """kubernetes-asyncio's Watch, each line parsed once with orjson (``loads``); a line that is not an
    ADDED/MODIFIED/DELETED/BOOKMARK event with an object is handed to ``Watch.unmarshal_event``."""

    def __init__(self, verify: bool = False) -> None:
        super().__init__()
        self.verify = verify

    def unmarshal_event(self, data: str | bytes, response_type: str | None) -> Any:
        try:
            js = loads(data, verify=self.verify)
        except ValueError:
            return data
        obj = js.get("object") if isinstance(js, dict) else None
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        etype = js.get("type") if isinstance(js, dict) else None
        if response_type or not isinstance(meta, dict) or etype not in _EVENT_TYPES:
            return super().unmarshal_event(data, response_type)  # errors, bookmarks without metadata
        js["raw_object"] = obj
        if "resourceVersion" in meta:
            self.resource_version = meta["resourceVersion"]
        return js


_EVENT_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK"})


#: deleted keys an informer remembers with their deletion's resourceVersion (see ``Informer.observe``)
GONE_KEPT = 4096


def _newer(rv: str, than: str | None) -> bool:
    """Whether resourceVersion ``rv`` is newer than ``than`` (integers as etcd revisions; otherwise
    assume it is newer, as a fresh response is)."""
    if not than:
        return True
    try:
        return int(rv) > int(than)
    except ValueError:
        return rv != than


class Informer(Generic[T]):
    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        model: type[T] | None = None,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        watch_timeout: int = 300,
        request_timeout: float = 60.0,
        backoff_initial: float = 0.05,
        backoff_max: float = 5.0,
        page_size: int = 500,
        relist_after_errors: int = 5,
        transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        self.client = client
        self.resource = resource
        self.model: type[Any] = model or KubeObject
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.watch_timeout = watch_timeout
        self.request_timeout = request_timeout
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.page_size = page_size
        self.relist_after_errors = relist_after_errors
        self.transform = transform
        self.resource_version = ""
        self.has_synced = False
        self.invalid: dict[str, str] = {}
        self._invalid_refs: dict[str, KubeObject] = {}
        self.stats = InformerStats()
        self._cache: dict[str, T] = {}
        # the cache's keys, sorted (what ``list`` and ``keys`` return objects in): kept until a key
        # joins or leaves the cache (an update of an object keeps its key), None until asked again
        self._sorted: builtins.list[str] | None = None
        # key -> resourceVersion of its DELETED event (the last GONE_KEPT): ``observe`` does not bring
        # back an object whose deletion the watch delivered before our write's response came
        self._gone: dict[str, str] = {}
        self._handlers: list[Handler[T]] = []
        self._mirrors: list[Callable[[T | None, T | None], None]] = []
        self._task: asyncio.Task[None] | None = None
        self._synced = asyncio.Event()
        self._watch: _Watch | None = None
        self._stopping = False

    def invalid_objects(self) -> list[tuple[KubeObject, str]]:
        """(reference to the object, message) for each object in ``invalid``."""
        for key in self._invalid_refs.keys() - self.invalid.keys():
            del self._invalid_refs[key]
        return [(self._invalid_refs[k], msg) for k, msg in self.invalid.items() if k in self._invalid_refs]

    # ------------------------------------------------------------ cache access
    def get(self, name: str, namespace: str | None = None) -> T | None:
        return self._cache.get(f"{namespace}/{name}" if namespace else name)

    def get_key(self, key: str) -> T | None:
        return self._cache.get(key)

    def list(self) -> list[T]:
        """The cached objects in key order."""
        cache = self._cache
        return [cache[k] for k in self._sorted_keys()]

    def keys(self) -> builtins.list[str]:
        return builtins.list(self._sorted_keys())

    def _sorted_keys(self) -> builtins.list[str]:
        """The cache's keys sorted, sorted again only after a key joined or left (a sort of every
        key on every call was most of what a pass over 15,000 Workloads or 50,000 pods cost); in
        verify mode sorted afresh too and compared."""
        got = self._sorted
        if got is None:
            got = self._sorted = sorted(self._cache)
        elif self.client.verify:
            general = sorted(self._cache)
            if got != general:
                raise VerifyError(f"informer {self.resource.plural}: sorted keys", got, general)
        return got

    def __len__(self) -> int:
        return len(self._cache)

    def observe(self, raw: dict[str, Any]) -> T | None:
        """Put an object we just wrote (the API server's response) into the cache at once, unless the
        cache already holds a newer version; the watch event that follows changes nothing more. This
        keeps the controller from acting twice on a stale cache (client-go's mutation cache). Handlers
        are not called. Returns the cached object: None when it is invalid, or when the watch delivered
        its deletion (of a later resourceVersion) before this response came: a gone object stays gone."""
        key = self._key(raw)
        old = self._cache.get(key)
        rv = str((raw.get("metadata") or {}).get("resourceVersion") or "")
        if old is not None and not _newer(rv, old.metadata.resource_version):
            return old
        gone = self._gone.get(key) if old is None else None
        if gone is not None and not _newer(rv, gone):
            return None  # written before its deletion, which the watch delivered first: it stays gone
        obj = self._parse(raw)
        if obj is not None:
            if old is None:
                self._sorted = None
            self._cache[key] = obj
            self._mirror(old, obj)
        return obj

    def forget(self, name: str, namespace: str | None = None) -> None:
        """Drop an object we just deleted from the cache (the watch's DELETED event follows)."""
        old = self._cache.pop(f"{namespace}/{name}" if namespace else name, None)
        if old is not None:
            self._sorted = None
            self._mirror(old, None)

    # ------------------------------------------------------------ lifecycle
    def add_handler(self, handler: Handler[T]) -> None:
        self._handlers.append(handler)

    def add_mirror(self, mirror: Callable[[T | None, T | None], None]) -> None:
        """Call ``mirror(old, new)`` on every change of the cache (watch, list, observe, forget)."""
        self._mirrors.append(mirror)

    def _mirror(self, old: T | None, new: T | None) -> None:
        for m in self._mirrors:
            try:
                m(old, new)
            except Exception:
                log.exception("informer %s: mirror failed", self.resource.plural)

    def start(self) -> None:
        if self._task is None:
            self._stopping = False
            self._task = asyncio.create_task(self._run(), name=f"informer-{self.resource.plural}")

    async def wait_synced(self, timeout: float | None = None) -> None:
        await asyncio.wait_for(self._synced.wait(), timeout)

    async def stop(self) -> None:
        self._stopping = True
        if self._watch is not None:
            self._watch.stop()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._close_watch()

    async def _close_watch(self) -> None:
        if self._watch is not None:
            watch, self._watch = self._watch, None
            with contextlib.suppress(Exception):
                await watch.close()

    # ------------------------------------------------------------ the loop
    def _key(self, raw: dict[str, Any]) -> str:
        meta = raw.get("metadata") or {}
        ns = meta.get("namespace")
        return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))

    def _parse(self, raw: dict[str, Any]) -> T | None:
        key = self._key(raw)
        meta = raw.get("metadata")
        if isinstance(meta, dict) and "managedFields" in meta:  # a copy: the caller's dict stays whole
            raw = {**raw, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
        try:
            data = self.transform(raw) if self.transform is not None else raw
            general = self.model.model_validate(copy.deepcopy(data)) if self.client.verify else None
            strings = self.client.strings
            if len(strings) >= INTERN_TABLE_MAX:
                strings.clear()
            obj: T = self.model.model_validate(intern_strings(data, strings))
            if general is not None and general != obj:
                raise VerifyError("interned strings", obj, general, key)
        except ValidationError as e:
            msg = format_validation_error(e, f"{self.resource.kind or self.resource.plural} {key}")
            if self.invalid.get(key) != msg:
                log.warning("ignoring invalid object: %s", msg)
            self.invalid[key] = msg
            with contextlib.suppress(ValidationError):  # a reference: the metadata and the kind only
                self._invalid_refs[key] = KubeObject.model_validate(
                    {
                        "apiVersion": raw.get("apiVersion") or self.resource.api_version,
                        "kind": raw.get("kind") or self.resource.kind or None,
                        "metadata": raw.get("metadata"),
                    }
                )
            return None
        self.invalid.pop(key, None)
        return obj

    async def _dispatch(self, old: T | None, new: T | None) -> None:
        self._mirror(old, new)
        for handler in list(self._handlers):
            try:
                result = handler(old, new)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("informer %s: handler failed", self.resource.plural)

    async def _list(self) -> None:
        page = await self.client.list(
            self.resource, self.namespace, self.label_selector, self.field_selector, limit=self.page_size
        )
        self.stats.lists += 1
        fresh: dict[str, T] = {}
        seen: set[str] = set()
        for raw in page.get("items") or []:
            key = self._key(raw)
            seen.add(key)
            obj = self._parse(raw)
            if obj is not None:
                fresh[key] = obj
        for key in list(self.invalid):
            if key not in seen:
                del self.invalid[key]
        old_cache, self._cache = self._cache, dict(fresh)
        self._sorted = None
        self.resource_version = str((page.get("metadata") or {}).get("resourceVersion") or "")
        for key in sorted(old_cache.keys() - fresh.keys()):
            await self._dispatch(old_cache[key], None)
        for key in sorted(fresh):
            old = old_cache.get(key)
            if old is None:
                await self._dispatch(None, fresh[key])
            elif old.metadata.resource_version != fresh[key].metadata.resource_version:
                await self._dispatch(old, fresh[key])
        if not self.has_synced:
            self.has_synced = True
            self._synced.set()

    async def _watch_fn(self, **kwargs: Any) -> Any:
        """Issue the watch request (called by kubernetes-asyncio's Watch, which reads the stream)."""
        query = {
            "watch": True,
            "resourceVersion": kwargs.get("resource_version") or None,
            "allowWatchBookmarks": True,
            "timeoutSeconds": kwargs.get("timeout_seconds"),
            "labelSelector": self.label_selector,
            "fieldSelector": self.field_selector,
        }
        resp = await self.client.raw(
            "GET",
            self.resource.path(self.namespace),
            query,
            timeout=self.watch_timeout + self.request_timeout,
        )
        return allow_long_lines(resp)  # one event is one line: any object the API server allows

    async def _apply(self, event: dict[str, Any]) -> None:
        etype = event.get("type")
        raw = event.get("raw_object") or event.get("object")
        if not isinstance(raw, dict):
            return
        rv = str((raw.get("metadata") or {}).get("resourceVersion") or "")
        if etype == "BOOKMARK":
            self.stats.bookmarks += 1
            if rv:
                self.resource_version = rv
            return
        key = self._key(raw)
        old = self._cache.get(key)
        self.stats.events += 1
        if etype == "DELETED":
            self.invalid.pop(key, None)
            if rv:
                self._gone.pop(key, None)
                self._gone[key] = rv
                if len(self._gone) > GONE_KEPT:
                    del self._gone[next(iter(self._gone))]
            if old is not None:
                del self._cache[key]
                self._sorted = None
                await self._dispatch(old, None)
        elif etype in ("ADDED", "MODIFIED"):
            if old is not None and not _newer(rv, old.metadata.resource_version):
                # ``observe`` already cached this write (or a later one): nothing new
                if rv:
                    self.resource_version = rv
                return
            new = self._parse(raw)
            if new is None:
                if old is not None:  # it became invalid: it is gone from our point of view
                    del self._cache[key]
                    self._sorted = None
                    await self._dispatch(old, None)
            else:
                if old is None:
                    self._sorted = None
                self._cache[key] = new
                await self._dispatch(old, new)
        if rv:
            self.resource_version = rv

    async def _watch_once(self) -> int:
        """One watch request until the stream ends; returns the number of events and bookmarks received.
        Raises ApiException (incl. 410) or connection errors."""
        self._watch = _Watch(self.client.verify)
        self.stats.watches += 1
        received = 0
        try:
            stream = self._watch.stream(
                self._watch_fn, resource_version=self.resource_version, timeout_seconds=self.watch_timeout
            )
            async for event in stream:
                received += 1
                await self._apply(event)
        finally:
            await self._close_watch()
        return received

    async def _run(self) -> None:
        delay = self.backoff_initial
        failures = 0
        need_list = True
        while not self._stopping:
            try:
                if need_list:
                    await self._list()
                    need_list = False
                if await self._watch_once() > 0:
                    delay = self.backoff_initial
                    failures = 0
                    continue
                # a stream that ended without sending anything: do not spin, back off a little
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.backoff_max)
                continue
            except asyncio.CancelledError:
                raise
            except ApiException as e:
                if e.status == 410:
                    self.stats.gone += 1
                    log.info("informer %s: %s; re-listing", self.resource.plural, e.reason)
                    need_list = True
                    continue
                log.warning("informer %s: API error %s %s", self.resource.plural, e.status, e.reason)
            except Exception as e:  # connection lost, client timeout, malformed stream ...
                log.warning("informer %s: %s", self.resource.plural, describe_error(e))
            self.stats.errors += 1
            failures += 1
            if failures >= self.relist_after_errors:
                need_list = True
                failures = 0
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.backoff_max)
