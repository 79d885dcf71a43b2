"""The emulator's state: objects per resource, a global resourceVersion, a bounded event history and
the active watches. Synchronous and single-threaded (it runs inside the emulator's event loop); every
method returns deep copies, so callers can never alias stored state.

A stored object is never changed in place: every write stores a new object, so the event history and
the watch events refer to the stored objects themselves instead of copies. ``share=True`` (the
emulator's HTTP layer) hands the request body over to the store and gets the stored object back
without a copy, to serialise it at once; a ``shared`` watcher's events refer to the stored objects and
carry their JSON line, encoded once per event however many watchers get it.

Verify mode (``verify``, on with ``QUEUEING_VERIFY=1``) checks both claims on every write: a stored
object is unchanged when it is replaced or dropped (its JSON is compared with what it was when its
event went out), and the validation that skips unchanged parts gives the errors the whole validation
gives; a difference raises ``VerifyError``.

API semantics kept here (HTTP-independent): generateName, uid, creationTimestamp, generation bumps on
spec changes, optimistic concurrency (409 on a stale resourceVersion), status subresources (writes to
the main resource ignore ``status``, writes to ``/status`` change only ``status``), finalizers and
``deletionTimestamp``, garbage collection by ownerReferences (Background/Foreground/Orphan; batch Jobs
default to Orphan like the real API), namespace deletion, CRD defaulting/pruning/validation, watch
replay from a resourceVersion with 410 Gone before the compaction point.
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import contextlib
import copy
import heapq
import json
import os
import random
import re
import string
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from queueing.api.validation import DNS_LABEL_PATTERN, DNS_SUBDOMAIN_PATTERN
from queueing.dra.verify import VerifyError
from queueing.testing import builtin_rules, crd_rules, defaults
from queueing.testing import schema as schemas
from queueing.testing.admission import (
    BINDINGS_KEY,
    POLICIES_KEY,
    PolicyAdmission,
    PolicyDenied,
    compile_policy,
    validate_binding,
)
from queueing.testing.resources import BUILTINS, ResourceType, from_crd
from queueing.testing.selectors import SelectorError, parse_field_selector, parse_label_selector
from queueing.verify import verify_from_env

__all__ = [
    "AdmissionHook",
    "AdmissionRequest",
    "ApiError",
    "Store",
    "StoreEvent",
    "Watcher",
    "dumps",
    "loads",
]

CRD_KEY = "apiextensions.k8s.io/customresourcedefinitions"
EVENT_KEYS = frozenset({"/events", "events.k8s.io/events"})  # expire after ``event_ttl`` like etcd leases
NS_KEY = "/namespaces"
JOBS_KEY = "batch/jobs"
INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")

_SUBDOMAIN = re.compile(DNS_SUBDOMAIN_PATTERN)
_LABEL = re.compile(DNS_LABEL_PATTERN)


class ApiError(Exception):
    """An API failure carried as a ``Status`` object."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            out["details"] = self.details
        return out

    @classmethod
    def not_found(cls, rt: ResourceType, name: str) -> ApiError:
        return cls(
            404,
            "NotFound",
            f'{rt.qualified} "{name}" not found',
            {"name": name, "group": rt.group, "kind": rt.plural},
        )

    @classmethod
    def conflict(cls, rt: ResourceType, name: str, why: str | None = None) -> ApiError:
        why = (
            why
            or "the object has been modified; please apply your changes to the latest version and try again"
        )
        return cls(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {rt.qualified} "{name}": {why}',
            {"name": name, "group": rt.group, "kind": rt.plural},
        )

    @classmethod
    def invalid(cls, rt: ResourceType, name: str, errors: list[schemas.FieldError]) -> ApiError:
        group_kind = f"{rt.kind}.{rt.group}" if rt.group else rt.kind
        body = errors[0].message if len(errors) == 1 else "[" + ", ".join(e.message for e in errors) + "]"
        return cls(
            422,
            "Invalid",
            f'{group_kind} "{name}" is invalid: {body}',
            {"name": name, "group": rt.group, "kind": rt.kind, "causes": [e.to_cause() for e in errors]},
        )

    @classmethod
    def bad_request(cls, message: str) -> ApiError:
        return cls(400, "BadRequest", message)


@dataclass
class AdmissionRequest:
    """What a mutating admission hook sees; it returns the (possibly changed) object or raises ApiError."""

    resource: ResourceType
    operation: str  # CREATE or UPDATE
    subresource: str  # "" or "status"
    object: dict[str, Any]
    old_object: dict[str, Any] | None


AdmissionHook = Callable[[AdmissionRequest], dict[str, Any]]


@dataclass
class StoreEvent:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    rkey: str
    old: dict[str, Any] | None  # the stored objects themselves: never changed in place
    new: dict[str, Any]
    _lines: dict[tuple[str, str], bytes] = field(default_factory=dict, repr=False)

    def line(self, type_: str, api_version: str) -> bytes:
        """The watch event ``{"type": type_, "object": new}`` as one JSON line, ``new`` served as
        ``api_version``; encoded once per (type, version), whichever watchers send it."""
        got = self._lines.get((type_, api_version))
        if got is None:
            obj = (
                self.new
                if self.new.get("apiVersion") == api_version
                else {**self.new, "apiVersion": api_version}
            )
            got = self._lines[(type_, api_version)] = dumps({"type": type_, "object": obj}) + b"\n"
        return got


def dumps(obj: Any) -> bytes:
    """JSON bytes of an API object, as the emulator serves them: orjson's (UTF-8 where ``json``
    escapes non-ASCII, ``1e-05`` as ``0.00001``: the same JSON values; NaN and infinities, which are
    not JSON, as null), or ``json``'s for what orjson
    refuses (integers beyond 64 bits, keys that are not strings)."""
    try:
        return orjson.dumps(obj)
    except TypeError:
        return json.dumps(obj, separators=(",", ":")).encode()


_LONG_NUMBER = re.compile(rb"[0-9]{19}")


def loads(raw: bytes) -> Any:
    """The JSON value of a request body: orjson's, or ``json``'s where orjson would differ or refuse
    (orjson reads an integer beyond 64 bits as a float, and refuses NaN): a body with a run of 19
    digits or more, or one orjson cannot read (``json``'s ValueError then names the problem)."""
    if not _LONG_NUMBER.search(raw):
        with contextlib.suppress(orjson.JSONDecodeError):
            return orjson.loads(raw)
    return json.loads(raw)


@dataclass(eq=False)
class Watcher:
    rt: ResourceType
    namespace: str | None
    label_pred: Callable[[dict[str, str]], bool]
    field_pred: Callable[[dict[str, Any]], bool]
    bookmarks: bool
    queue: asyncio.Queue[dict[str, Any] | None] = field(default_factory=asyncio.Queue)
    closed: bool = False
    # True: the queued objects are the stored ones (read them, never change them) and each item of a
    # stored event carries it as "event" (its ``line`` is the encoded event); False: deep copies
    shared: bool = False

    def _put(self, type_: str, obj: dict[str, Any], ev: StoreEvent | None) -> None:
        if self.shared:
            self.queue.put_nowait({"type": type_, "object": obj, "event": ev})
        else:
            self.queue.put_nowait({"type": type_, "object": copy.deepcopy(obj)})

    def _matches(self, obj: dict[str, Any] | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        return self.label_pred(meta.get("labels") or {}) and self.field_pred(obj)

    def offer(self, ev: StoreEvent) -> None:
        if self.closed or ev.rkey != self.rt.key:
            return
        new_match = self._matches(ev.new)
        if ev.type == "DELETED":
            if new_match:
                self._put("DELETED", ev.new, ev)
            return
        old_match = self._matches(ev.old)
        if new_match:
            self._put("MODIFIED" if old_match else "ADDED", ev.new, ev)
        elif old_match:
            self._put("DELETED", ev.new, ev)

    def bookmark(self, rv: int) -> None:
        if self.closed or not self.bookmarks:
            return
        obj = {
            "kind": self.rt.kind,
            "apiVersion": self.rt.group_version,
            "metadata": {"resourceVersion": str(rv)},
        }
        self.queue.put_nowait({"type": "BOOKMARK", "object": obj})

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.queue.put_nowait(None)


def _now() -> datetime:
    return datetime.now(UTC)


def _ts(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _content(obj: dict[str, Any]) -> dict[str, Any]:
    """What bumps ``metadata.generation``: everything but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


class Store:
    """``history_limit``: watch events kept for replay (older resourceVersions get 410).
    ``event_ttl``: seconds an Event lives after its last write (kube-apiserver's ``--event-ttl``,
    default 1h; None keeps Events forever). ``clock``: the time source of timestamps and expiry."""

    def __init__(
        self,
        history_limit: int = 10000,
        clock: Callable[[], datetime] = _now,
        event_ttl: float | None = 3600.0,
    ) -> None:
        self.types: dict[str, ResourceType] = {}
        self.by_gvr: dict[tuple[str, str, str], ResourceType] = {}
        self.objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
        self.rv = 0
        self.history: deque[StoreEvent] = deque()
        self.history_limit = history_limit
        self.compacted_rv = 0
        self.watchers: set[Watcher] = set()
        self.clock = clock
        self.event_ttl = event_ttl
        # (expiry, resource key, object key, resourceVersion) of every Event write, earliest first
        self._expiry: builtins.list[tuple[datetime, str, tuple[str, str], str]] = []
        self.events_expired = 0
        self._owned: dict[str, set[tuple[str, tuple[str, str]]]] = {}  # owner uid -> dependents
        self._uids: set[str] = set()  # of the stored objects (an owner reference's owner exists)
        # (resource key, object key) -> the schema the stored object passed (``schemas.validate``
        # skips what an update leaves as it was under the same schema)
        self._validated: dict[tuple[str, tuple[str, str]], dict[str, Any]] = {}
        self.verify = verify_from_env(os.environ)
        self._fingerprints: dict[tuple[str, tuple[str, str]], bytes] = {}  # verify: JSON when shared
        # the API server's validation beyond the structural schema: CRD rules (x-kubernetes-validations,
        # CEL) and the resource.k8s.io kinds (the queueing.api models: names, limits, CEL selectors
        # that do not compile or cost too much). False stores such objects anyway, as written under an
        # older API server or CRD version, for tests of how the controller copes with them.
        self.api_validation = True
        # fieldValidation of the request being served (Strict/Warn/Ignore) and the warnings it produced
        self.field_validation = "Warn"
        self.warnings: list[str] = []
        # the user of the request being served (``request.userInfo`` of admission policies)
        self.user = "admin"
        # MutatingAdmissionPolicies with bindings, run on create/update before ``admission_hooks``
        self.policies = PolicyAdmission(
            lambda: builtins.list(self.objects.get(POLICIES_KEY, {}).values()),
            lambda: builtins.list(self.objects.get(BINDINGS_KEY, {}).values()),
            lambda ns: self.objects[NS_KEY].get(("", ns)),
        )
        # Python mutating admission hooks (stand-ins for webhooks), run after the policies
        self.admission_hooks: list[AdmissionHook] = []
        for rt in BUILTINS:
            self.register(copy.deepcopy(rt))
        for ns in INITIAL_NAMESPACES:
            self.create(self.types[NS_KEY], None, {"metadata": {"name": ns}})

    # ------------------------------------------------------------ registry
    def register(self, rt: ResourceType) -> None:
        old = self.types.get(rt.key)
        if old is not None:
            for v in old.versions:
                self.by_gvr.pop((old.group, v, old.plural), None)
        self.types[rt.key] = rt
        for v in rt.versions:
            self.by_gvr[(rt.group, v, rt.plural)] = rt
        self.objects.setdefault(rt.key, {})

    def unregister(self, key: str) -> None:
        rt = self.types.pop(key, None)
        if rt is None:
            return
        for v in rt.versions:
            self.by_gvr.pop((rt.group, v, rt.plural), None)
        for w in list(self.watchers):
            if w.rt.key == key:
                w.close()
        for obj in self.objects.pop(key, {}).values():
            self._uids.discard(obj["metadata"].get("uid"))

    def resolve(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self.by_gvr.get((group, version, plural))

    def resource(self, plural: str, group: str = "") -> ResourceType:
        """Look a served resource up by plural (and group): ``store.resource("workloads", "queueing.dra.io")``."""
        rt = self.types.get(f"{group}/{plural}")
        if rt is None:
            raise KeyError(f"resource {plural}.{group} is not served")
        return rt

    # ------------------------------------------------------------ helpers
    def _put(self, rt: ResourceType, key: tuple[str, str], obj: dict[str, Any]) -> None:
        old = self.objects[rt.key].get(key)
        if old is not None:
            self._check_unchanged(rt, key, old)
            self._unindex(rt, key, old)
        self.objects[rt.key][key] = obj
        uid = obj["metadata"].get("uid")
        if uid:
            self._uids.add(uid)
        if rt.key in EVENT_KEYS and self.event_ttl is not None:
            expires = self.clock() + timedelta(seconds=self.event_ttl)
            heapq.heappush(self._expiry, (expires, rt.key, key, obj["metadata"].get("resourceVersion", "")))
        for ref in obj["metadata"].get("ownerReferences") or []:
            if isinstance(ref, dict) and ref.get("uid"):
                self._owned.setdefault(ref["uid"], set()).add((rt.key, key))

    def _check_unchanged(self, rt: ResourceType, key: tuple[str, str], obj: dict[str, Any]) -> None:
        """Verify mode: the stored object is as it was when its event went out."""
        was = self._fingerprints.get((rt.key, key)) if self.verify else None
        if was is not None and dumps(obj) != was:
            raise VerifyError(
                "stored objects are never changed in place",
                dumps(obj).decode(),
                was.decode(),
                f"{rt.key} {key}",
            )

    def _shares(self, rt: ResourceType, key: tuple[str, str]) -> bool:
        """Whether an update of the stored object at ``key`` may keep the parts it leaves unchanged
        (the same dicts and lists) in the new object instead of copies: when what runs on the new
        object before it is stored cannot change those parts in place. Job defaulting and the schema's
        defaulting and pruning change nothing in what already passed them under the same schema, and
        admission policies copy before they mutate; Python ``admission_hooks`` may change anything,
        so with any of them installed every update copies. Verify mode checks the claim: a stored
        object that changed in place raises when it is replaced (``_check_unchanged``)."""
        if self.admission_hooks:
            return False
        return rt.schema is None or self._validated.get((rt.key, key)) is rt.schema

    def _mark_validated(self, rt: ResourceType, key: tuple[str, str]) -> None:
        if rt.schema is not None:
            self._validated[(rt.key, key)] = rt.schema

    def _drop(self, rt: ResourceType, key: tuple[str, str]) -> dict[str, Any]:
        obj = self.objects[rt.key].pop(key)
        self._uids.discard(obj["metadata"].get("uid"))
        self._check_unchanged(rt, key, obj)
        self._fingerprints.pop((rt.key, key), None)
        self._validated.pop((rt.key, key), None)
        self._unindex(rt, key, obj)
        return obj

    def _unindex(self, rt: ResourceType, key: tuple[str, str], obj: dict[str, Any]) -> None:
        for ref in obj["metadata"].get("ownerReferences") or []:
            if isinstance(ref, dict) and ref.get("uid") in self._owned:
                self._owned[ref["uid"]].discard((rt.key, key))
                if not self._owned[ref["uid"]]:
                    del self._owned[ref["uid"]]

    def _next_rv(self) -> int:
        self.rv += 1
        return self.rv

    def _emit(self, rt: ResourceType, type_: str, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
        ev = StoreEvent(self.rv, type_, rt.key, old, new)
        if self.verify and type_ != "DELETED":
            meta = new["metadata"]
            self._fingerprints[(rt.key, self._key(rt, meta.get("namespace"), meta["name"]))] = dumps(new)
        self.history.append(ev)
        while len(self.history) > self.history_limit:
            dropped = self.history.popleft()
            self.compacted_rv = dropped.rv
        for w in list(self.watchers):
            w.offer(ev)

    def expire_events(self) -> int:
        """Delete the Events whose TTL has passed by ``clock()`` (a DELETED watch event each, as when an
        etcd lease expires). Called at the start of every read and write; returns how many went."""
        n = 0
        now = self.clock() if self._expiry else None
        while self._expiry and now is not None and self._expiry[0][0] <= now:
            _, rkey, key, rv = heapq.heappop(self._expiry)
            obj = self.objects.get(rkey, {}).get(key)
            if obj is None or obj["metadata"].get("resourceVersion") != rv:
                continue  # deleted, or written again since (a later entry holds its new expiry)
            self._force_delete(self.types[rkey], key[0] or None, key[1])
            n += 1
        self.events_expired += n
        return n

    def compact(self) -> None:
        """Forget all history: any watch from an older resourceVersion now gets 410 Gone."""
        self.history.clear()
        self.compacted_rv = self.rv

    def bookmark(self) -> None:
        for w in list(self.watchers):
            w.bookmark(self.rv)

    def _key(self, rt: ResourceType, ns: str | None, name: str) -> tuple[str, str]:
        return (ns or "", name) if rt.namespaced else ("", name)

    def _require_ns(self, rt: ResourceType, ns: str | None) -> None:
        if not rt.namespaced:
            return
        if not ns:
            raise ApiError.bad_request("the namespace of the object must be set")
        if ("", ns) not in self.objects[NS_KEY]:
            raise ApiError(
                404, "NotFound", f'namespaces "{ns}" not found', {"name": ns, "kind": "namespaces"}
            )
        nsobj = self.objects[NS_KEY][("", ns)]
        if nsobj["metadata"].get("deletionTimestamp"):
            raise ApiError(
                403,
                "Forbidden",
                f"{rt.plural} is forbidden: unable to create new content in namespace {ns} because it is being terminated",
            )

    def _check_schema(
        self, rt: ResourceType, name: str, obj: dict[str, Any], old: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        errors: list[schemas.FieldError] = []
        meta = obj.get("metadata") or {}
        nm = meta.get("name") or ""
        pattern = _LABEL if rt.key == NS_KEY else _SUBDOMAIN
        if nm and (not pattern.match(nm) or len(nm) > (63 if rt.key == NS_KEY else 253)):
            errors.append(
                schemas.FieldError(
                    "metadata.name",
                    "FieldValueInvalid",
                    f"metadata.name: Invalid value: {json.dumps(nm)}: a lowercase RFC 1123 "
                    f"{'label' if rt.key == NS_KEY else 'subdomain'} must consist of lower case alphanumeric "
                    "characters, '-' or '.', and must start and end with an alphanumeric character",
                )
            )
        for which in ("labels", "annotations"):
            vals = meta.get(which)
            if vals is not None and (
                not isinstance(vals, dict) or not all(isinstance(v, str) for v in vals.values())
            ):
                errors.append(
                    schemas.FieldError(
                        f"metadata.{which}",
                        "FieldValueInvalid",
                        f"metadata.{which}: Invalid value: must be strings",
                    )
                )
        if rt.schema is not None:
            pruned: list[str] = []
            obj = schemas.prune(schemas.apply_defaults(obj, rt.schema), rt.schema, root=True, pruned=pruned)
            if pruned and self.field_validation == "Strict":
                unknown = ", ".join(f'unknown field "{p}"' for p in pruned)
                raise ApiError.bad_request(f"strict decoding error: {unknown}")
            if self.field_validation != "Ignore":
                self.warnings.extend(f'unknown field "{p}"' for p in pruned)
            passed = None
            if old is not None:
                ometa = old.get("metadata") or {}
                okey = self._key(rt, ometa.get("namespace"), ometa.get("name", ""))
                if self._validated.get((rt.key, okey)) is rt.schema:
                    passed = old
            errors.extend(schemas.validate(obj, rt.schema, passed=passed))
            if self.verify and passed is not None:
                whole = schemas.validate(obj, rt.schema)
                if [e.message for e in whole] != [e.message for e in errors]:
                    raise VerifyError("schema validation of the changed parts", errors, whole, name)
            if not errors and self.api_validation:
                errors.extend(crd_rules.validate_rules(obj, rt.schema, old, verify=self.verify))
        elif self.api_validation and rt.group == "resource.k8s.io":
            errors.extend(builtin_rules.validate_resource_object(rt, obj))
        if rt.key == CRD_KEY:
            try:
                new_rt = from_crd(obj)
            except ValueError as e:
                errors.append(schemas.FieldError("spec", "FieldValueInvalid", f"spec: Invalid value: {e}"))
            else:
                for problem in crd_rules.compile_errors(new_rt.schema or {}) if self.api_validation else []:
                    errors.append(
                        schemas.FieldError(
                            "spec.validation.openAPIV3Schema",
                            "FieldValueInvalid",
                            f"spec.validation.openAPIV3Schema: Invalid value: compilation failed: {problem}",
                        )
                    )
        if rt.key == POLICIES_KEY:
            errors.extend(compile_policy(obj)[1])
        if rt.key == BINDINGS_KEY:
            errors.extend(validate_binding(obj))
        if errors:
            raise ApiError.invalid(rt, name, errors)
        return obj

    def _admit(
        self,
        rt: ResourceType,
        op: str,
        sub: str,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        try:
            obj = self.policies.admit(rt, op, sub, obj, old, self.user, dry_run)
        except PolicyDenied as e:
            name = (obj.get("metadata") or {}).get("name", "")
            raise ApiError(
                403, "Forbidden", str(e), {"name": name, "group": rt.group, "kind": rt.plural}
            ) from None
        for hook in self.admission_hooks:
            obj = hook(AdmissionRequest(rt, op, sub, obj, copy.deepcopy(old) if old is not None else None))
        return obj

    def _out(self, rt: ResourceType, obj: dict[str, Any], version: str | None = None) -> dict[str, Any]:
        """``obj`` as served in ``version``: itself, or a shallow copy with that apiVersion (to be
        serialised at once, never changed)."""
        if version and version != rt.version:
            return {**obj, "apiVersion": f"{rt.group}/{version}" if rt.group else version}
        return obj

    # ------------------------------------------------------------ reads
    def get(self, rt: ResourceType, ns: str | None, name: str, share: bool = False) -> dict[str, Any]:
        """A copy of the object (``share``: the stored object itself, to read only)."""
        self.expire_events()
        obj = self.objects[rt.key].get(self._key(rt, ns, name))
        if obj is None:
            raise ApiError.not_found(rt, name)
        return obj if share else copy.deepcopy(obj)

    def list(
        self,
        rt: ResourceType,
        ns: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        share: bool = False,
    ) -> tuple[list[dict[str, Any]], str, str | None, int | None]:
        """Matching objects sorted by key (copies; ``share``: the stored objects, to read only), the
        list resourceVersion, a continue token, remaining count."""
        self.expire_events()
        try:
            lp = parse_label_selector(label_selector)
            fp = parse_field_selector(field_selector)
        except SelectorError as e:
            raise ApiError.bad_request(str(e)) from e
        list_rv = self.rv
        start: tuple[str, str] | None = None
        if continue_token:
            try:
                tok = json.loads(base64.urlsafe_b64decode(continue_token.encode()))
                start = (tok["start"][0], tok["start"][1])
                list_rv = int(tok["rv"])
            except (ValueError, KeyError, TypeError) as e:
                raise ApiError.bad_request(f"invalid continue token: {e}") from e
        items = []
        for key in sorted(self.objects[rt.key]):
            if start is not None and key <= start:
                continue
            obj = self.objects[rt.key][key]
            if rt.namespaced and ns is not None and key[0] != ns:
                continue
            if not lp((obj.get("metadata") or {}).get("labels") or {}) or not fp(obj):
                continue
            items.append((key, obj))
        cont = None
        remaining = None
        if limit and len(items) > limit:
            remaining = len(items) - limit
            items = items[:limit]
            last = items[-1][0]
            cont = base64.urlsafe_b64encode(
                json.dumps({"rv": list_rv, "start": list(last)}).encode()
            ).decode()
        objs = [o for _, o in items] if share else [copy.deepcopy(o) for _, o in items]
        return objs, str(list_rv), cont, remaining

    # ------------------------------------------------------------ writes
    def create(
        self,
        rt: ResourceType,
        ns: str | None,
        body: dict[str, Any],
        dry_run: bool = False,
        share: bool = False,
    ) -> dict[str, Any]:
        """Store a new object; returns a copy of it. ``share``: the store takes ``body`` over (the
        caller never uses it again) and returns the stored object itself, to read only."""
        self.expire_events()
        if not isinstance(body, dict):
            raise ApiError.bad_request("the body of the request must be an object")
        obj = body if share else copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise ApiError.bad_request("metadata must be an object")
        self._check_kind(rt, obj)
        if rt.namespaced:
            body_ns = meta.get("namespace")
            if ns and body_ns and body_ns != ns:
                raise ApiError.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            ns = ns or body_ns or None
            self._require_ns(rt, ns)
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        if meta.get("resourceVersion"):
            raise ApiError.bad_request("resourceVersion should not be set on objects to be created")
        if not meta.get("name"):
            gen = meta.get("generateName")
            if not gen:
                errs = [
                    schemas.FieldError(
                        "metadata.name",
                        "FieldValueRequired",
                        "metadata.name: Required value: name or generateName is required",
                    )
                ]
                raise ApiError.invalid(rt, "", errs)
            for _ in range(100):
                cand = gen + "".join(random.choices(string.ascii_lowercase + string.digits, k=5))
                if self._key(rt, ns, cand) not in self.objects[rt.key]:
                    meta["name"] = cand
                    break
        name = meta["name"]
        if self._key(rt, ns, name) in self.objects[rt.key]:
            raise ApiError(
                409,
                "AlreadyExists",
                f'{rt.qualified} "{name}" already exists',
                {"name": name, "group": rt.group, "kind": rt.plural},
            )
        if rt.status_subresource and rt.key not in (CRD_KEY, "/nodes"):  # nodes register with their status
            obj.pop("status", None)
            if rt.key == "/pods":
                obj["status"] = {"phase": "Pending"}
            if rt.key == NS_KEY:
                obj["status"] = {"phase": "Active"}
        for k in ("deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            meta.pop(k, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _ts(self.clock())
        meta["generation"] = 1
        if rt.key == JOBS_KEY:
            defaults.default_job(obj)
        obj = self._admit(rt, "CREATE", "", obj, None, dry_run)
        if rt.key == JOBS_KEY:
            defaults.default_job(obj)  # what a mutating admission policy changed is decoded again
            defaults.generate_job_selector(obj)
        errs = builtin_rules.validate_create(rt, obj)
        if errs:
            raise ApiError.invalid(rt, name, errs)
        obj = self._check_schema(rt, name, obj)
        if dry_run:
            return obj
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self._next_rv())
        self._put(rt, self._key(rt, ns, name), obj)
        self._mark_validated(rt, self._key(rt, ns, name))
        if rt.key == CRD_KEY:
            obj = self._sync_crd(None, obj)
        self._emit(rt, "ADDED", None, obj)
        if meta.get("ownerReferences"):
            obj = self._absent_owners(rt, self._key(rt, ns, name), obj)
        return obj if share else copy.deepcopy(obj)

    def _owner_type(self, ref: dict[str, Any]) -> ResourceType | None:
        api_version, kind = ref.get("apiVersion", ""), ref.get("kind")
        for rt in self.types.values():
            if rt.kind == kind and any(
                api_version == (f"{rt.group}/{v}" if rt.group else v) for v in rt.versions
            ):
                return rt
        return None

    def _absent_owners(self, rt: ResourceType, key: tuple[str, str], obj: dict[str, Any]) -> dict[str, Any]:
        """What the garbage collector does with an object created for an owner that is gone (its
        ``ownerReferences`` name a UID no object of that kind and name has): all owners absent, it is
        deleted (Background); some absent, their references are removed. A controller that created
        a Workload for a Job whose deletion it had not read yet ends up with nothing left over, as on
        a real cluster. An owner kind the store does not serve is left alone (the real collector
        cannot resolve it either), and so is a reference whose UID a stored object of another kind
        or name has: the stand-ins' shortcut (a LeaderWorkerSet's pods name the StatefulSets the
        real controller would make, with the LeaderWorkerSet's UID), where the real collector would
        find the StatefulSet."""
        refs = [r for r in obj["metadata"]["ownerReferences"] if isinstance(r, dict)]
        solid = []
        for ref in refs:
            ort = self._owner_type(ref)
            if ort is None or not ref.get("uid") or ref["uid"] in self._uids:
                solid.append(ref)
        if len(solid) == len(refs):
            return obj
        if not solid:
            return self.delete(rt, key[0] or None, key[1], {"propagationPolicy": "Background"})
        new = copy.deepcopy(obj)
        new["metadata"]["ownerReferences"] = solid
        new["metadata"]["resourceVersion"] = str(self._next_rv())
        self._put(rt, key, new)
        self._emit(rt, "MODIFIED", obj, new)
        return new

    def _check_kind(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        kind = obj.get("kind")
        if kind and kind != rt.kind:
            raise ApiError.bad_request(
                f"the kind {kind!r} does not match the resource {rt.plural!r} ({rt.kind})"
            )
        api_version = obj.get("apiVersion")
        gvs = {f"{rt.group}/{v}" if rt.group else v for v in rt.versions}
        if api_version and api_version not in gvs:
            raise ApiError.bad_request(f"the apiVersion {api_version!r} does not match {rt.group_version!r}")
        obj["kind"] = rt.kind
        obj["apiVersion"] = rt.group_version

    def update(
        self,
        rt: ResourceType,
        ns: str | None,
        name: str,
        body: dict[str, Any],
        subresource: str | None = None,
        dry_run: bool = False,
        share: bool = False,
    ) -> dict[str, Any]:
        """Replace the object (or its status); returns a copy of the result. ``share`` as in ``create``."""
        self.expire_events()
        if not isinstance(body, dict):
            raise ApiError.bad_request("the body of the request must be an object")
        key = self._key(rt, ns, name)
        old = self.objects[rt.key].get(key)
        if old is None:
            raise ApiError.not_found(rt, name)
        if not share:
            body = copy.deepcopy(body)
        bmeta = body.get("metadata")
        if not isinstance(bmeta, dict):
            bmeta = body["metadata"] = {}
        if bmeta.get("name") and bmeta["name"] != name:
            raise ApiError.bad_request(
                f"the name of the object ({bmeta['name']}) does not match the name on the URL ({name})"
            )
        want_rv = bmeta.get("resourceVersion")
        if want_rv and str(want_rv) != old["metadata"]["resourceVersion"]:
            raise ApiError.conflict(rt, name)
        uid = bmeta.get("uid")
        if uid and uid != old["metadata"].get("uid"):
            raise ApiError.conflict(
                rt,
                name,
                f"Precondition failed: UID in precondition: {uid}, UID in object meta: {old['metadata'].get('uid')}",
            )
        self._check_kind(rt, body)
        if rt.key == JOBS_KEY and not subresource:
            defaults.default_job(body)
        # the new object may hold the parts of the stored one it leaves as they were (see _shares)
        keep = share and self._shares(rt, key)
        if subresource == "status":
            new = {**old, "metadata": dict(old["metadata"])} if keep else copy.deepcopy(old)
            if "status" in body:
                new["status"] = body["status"]
            else:
                new.pop("status", None)
        else:
            new = body
            if rt.status_subresource and rt.key != CRD_KEY:
                if "status" in old:
                    new["status"] = old["status"] if keep else copy.deepcopy(old["status"])
                else:
                    new.pop("status", None)
            nmeta = new["metadata"]
            ometa = old["metadata"]
            for k in (
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ):
                if k in ometa:
                    nmeta[k] = ometa[k]
                else:
                    nmeta.pop(k, None)
            nmeta["name"] = name
            if rt.namespaced:
                nmeta["namespace"] = ns
            else:
                nmeta.pop("namespace", None)
            if ometa.get("deletionTimestamp"):
                added = set(nmeta.get("finalizers") or []) - set(ometa.get("finalizers") or [])
                if added:
                    errs = [
                        schemas.FieldError(
                            "metadata.finalizers",
                            "FieldValueForbidden",
                            f"metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {sorted(added)}",
                        )
                    ]
                    raise ApiError.invalid(rt, name, errs)
            if _content(new) != _content(old):
                nmeta["generation"] = int(ometa.get("generation") or 0) + 1
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        new = self._admit(rt, "UPDATE", subresource or "", new, old, dry_run)
        errs = builtin_rules.validate_update(rt, old, new, subresource or "")
        if errs:
            raise ApiError.invalid(rt, name, errs)
        new = self._check_schema(rt, name, new, old)
        if new == old or dry_run:
            return new if share else copy.deepcopy(new)
        new["metadata"]["resourceVersion"] = str(self._next_rv())
        if rt.key == CRD_KEY:
            new = self._sync_crd(old, new)
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            self._drop(rt, key)
            self._emit(rt, "DELETED", old, new)
            self._after_delete(rt, new, None)
            return new if share else copy.deepcopy(new)
        self._put(rt, key, new)
        self._mark_validated(rt, key)
        self._emit(rt, "MODIFIED", old, new)
        return new if share else copy.deepcopy(new)

    def patch(
        self,
        rt: ResourceType,
        ns: str | None,
        name: str,
        apply: Callable[[dict[str, Any]], Any],
        subresource: str | None = None,
        dry_run: bool = False,
        share: bool = False,
    ) -> dict[str, Any]:
        """Apply ``apply(current) -> patched`` (``current`` is a copy ``apply`` may change) and store the
        result with update semantics. ``share``: ``apply`` gets the stored object itself and returns
        a new one without changing it (the functions of ``queueing.testing.patch`` never change their
        target: what they leave as it was, they share with it); what it returns is the store's (it
        holds nothing the caller keeps), and the stored result comes back without a copy, to read
        only."""
        current = self.get(rt, ns, name, share=share)
        cur_rv = current["metadata"]["resourceVersion"]
        patched = apply(current)
        if not isinstance(patched, dict):
            raise ApiError.bad_request("the patched object must be a JSON object")
        if patched is current:
            patched = dict(current)
        pmeta = patched.get("metadata")
        if not isinstance(pmeta, dict):
            pmeta = patched["metadata"] = {}
        elif pmeta is current["metadata"]:
            pmeta = patched["metadata"] = dict(pmeta)  # update() sets its fields
        # a patch may carry a resourceVersion precondition; otherwise it applies to the current object
        if not pmeta.get("resourceVersion"):
            pmeta["resourceVersion"] = cur_rv
        if pmeta.get("name") and pmeta["name"] != name:
            raise ApiError.bad_request("metadata.name cannot be changed by a patch")
        return self.update(rt, ns, name, patched, subresource=subresource, dry_run=dry_run, share=share)

    def bind(self, ns: str, name: str, node: str) -> dict[str, Any]:
        """``pods/binding``: assign a pod to a node (what kube-scheduler does); sets PodScheduled."""
        rt = self.types["/pods"]
        key = self._key(rt, ns, name)
        old = self.objects[rt.key].get(key)
        if old is None:
            raise ApiError.not_found(rt, name)
        spec = old.get("spec") or {}
        if spec.get("nodeName"):
            raise ApiError.conflict(rt, name, f'pod {name} is already assigned to node "{spec["nodeName"]}"')
        if spec.get("schedulingGates"):
            raise ApiError.conflict(rt, name, f"pod {name} has non-empty .spec.schedulingGates")
        if old["metadata"].get("deletionTimestamp"):
            raise ApiError.conflict(rt, name, f"pod {name} is being deleted, cannot be assigned to a host")
        new = copy.deepcopy(old)
        new.setdefault("spec", {})["nodeName"] = node
        conds = [
            c
            for c in (new.setdefault("status", {}).get("conditions") or [])
            if c.get("type") != "PodScheduled"
        ]
        conds.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                      "lastTransitionTime": _ts(self.clock())})  # fmt: skip
        new["status"]["conditions"] = conds
        new["metadata"]["resourceVersion"] = str(self._next_rv())
        self._put(rt, key, new)
        self._emit(rt, "MODIFIED", old, new)
        return copy.deepcopy(new)

    def delete(
        self,
        rt: ResourceType,
        ns: str | None,
        name: str,
        options: dict[str, Any] | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        self.expire_events()
        options = options or {}
        key = self._key(rt, ns, name)
        old = self.objects[rt.key].get(key)
        if old is None:
            raise ApiError.not_found(rt, name)
        pre = options.get("preconditions") or {}
        if pre.get("uid") and pre["uid"] != old["metadata"].get("uid"):
            raise ApiError.conflict(
                rt,
                name,
                f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {old['metadata'].get('uid')}",
            )
        if pre.get("resourceVersion") and str(pre["resourceVersion"]) != old["metadata"]["resourceVersion"]:
            raise ApiError.conflict(
                rt,
                name,
                f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, ResourceVersion in object meta: {old['metadata']['resourceVersion']}",
            )
        if dry_run:
            return copy.deepcopy(old)
        policy = options.get("propagationPolicy")
        if policy is None and options.get("orphanDependents") is not None:
            policy = "Orphan" if options["orphanDependents"] else "Background"
        if rt.key == NS_KEY:
            for other in list(self.types.values()):
                if other.namespaced:
                    for ons, oname in list(self.objects.get(other.key, {})):
                        if ons == name and (ons, oname) in self.objects[other.key]:
                            self._force_delete(other, ons, oname)
        if old["metadata"].get("finalizers"):
            if old["metadata"].get("deletionTimestamp"):
                return copy.deepcopy(old)
            new = copy.deepcopy(old)
            new["metadata"]["deletionTimestamp"] = _ts(self.clock())
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            new["metadata"]["resourceVersion"] = str(self._next_rv())
            if policy:
                new["metadata"].setdefault("annotations", {})
                new["metadata"]["annotations"].setdefault(
                    "emulator.queueing.dra.io/propagation-policy", policy
                )
            self._put(rt, key, new)
            self._emit(rt, "MODIFIED", old, new)
            return copy.deepcopy(new)
        return self._force_delete(rt, ns, name, policy)

    def _force_delete(
        self, rt: ResourceType, ns: str | None, name: str, policy: str | None = None
    ) -> dict[str, Any]:
        key = self._key(rt, ns, name)
        old = self._drop(rt, key)
        final = copy.deepcopy(old)
        final["metadata"]["resourceVersion"] = str(self._next_rv())
        self._emit(rt, "DELETED", old, final)
        self._after_delete(rt, final, policy)
        return copy.deepcopy(final)

    def _after_delete(self, rt: ResourceType, obj: dict[str, Any], policy: str | None) -> None:
        if rt.key == CRD_KEY:
            with contextlib.suppress(ValueError):
                self.unregister(from_crd(obj).key)
        ann = (obj["metadata"].get("annotations") or {}).get("emulator.queueing.dra.io/propagation-policy")
        policy = policy or ann or ("Orphan" if rt.key == "batch/jobs" else "Background")
        self._collect(obj["metadata"].get("uid"), policy)

    def _dependents(self, uid: str) -> Iterable[tuple[ResourceType, tuple[str, str], dict[str, Any]]]:
        for rkey, key in sorted(self._owned.get(uid, ())):
            rt = self.types.get(rkey)
            obj = self.objects.get(rkey, {}).get(key)
            if rt is not None and obj is not None:
                yield rt, key, obj

    def _collect(self, uid: str | None, policy: str) -> None:
        if not uid:
            return
        for rt, key, obj in list(self._dependents(uid)):
            if key not in self.objects[rt.key]:
                continue
            refs = [r for r in obj["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
            if policy == "Orphan" or refs:
                new = copy.deepcopy(obj)
                if refs:
                    new["metadata"]["ownerReferences"] = refs
                else:
                    new["metadata"].pop("ownerReferences", None)
                new["metadata"]["resourceVersion"] = str(self._next_rv())
                self._put(rt, key, new)
                self._emit(rt, "MODIFIED", obj, new)
            else:
                self.delete(rt, key[0] or None, key[1], {"propagationPolicy": "Background"})

    def delete_collection(
        self,
        rt: ResourceType,
        ns: str | None,
        label_selector: str | None,
        field_selector: str | None,
        options: dict[str, Any] | None = None,
    ) -> builtins.list[dict[str, Any]]:
        items, _, _, _ = self.list(rt, ns, label_selector, field_selector)
        out = []
        for obj in items:
            meta = obj["metadata"]
            try:
                out.append(self.delete(rt, meta.get("namespace"), meta["name"], options))
            except ApiError:
                continue
        return out

    # ------------------------------------------------------------ CRDs
    def _sync_crd(self, old: dict[str, Any] | None, crd: dict[str, Any]) -> dict[str, Any]:
        """Serve the resource a CRD defines and mark the CRD Established (as the API server does)."""
        rt = from_crd(crd)
        if old is not None:
            try:
                old_rt = from_crd(old)
                if old_rt.key != rt.key:
                    self.unregister(old_rt.key)
            except ValueError:
                pass
        self.register(rt)
        names = dict((crd.get("spec") or {}).get("names") or {})
        names.setdefault("singular", rt.singular)
        names.setdefault("listKind", f"{rt.kind}List")
        ts = crd["metadata"]["creationTimestamp"]
        crd["status"] = {
            "acceptedNames": names,
            "storedVersions": [rt.version],
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                 "message": "no conflicts found", "lastTransitionTime": ts},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                 "message": "the initial names have been accepted", "lastTransitionTime": ts},
            ],
        }  # fmt: skip
        return crd

    # ------------------------------------------------------------ watch
    def watch(
        self,
        rt: ResourceType,
        ns: str | None,
        resource_version: str | None,
        label_selector: str | None,
        field_selector: str | None,
        bookmarks: bool,
        shared: bool = False,
    ) -> Watcher:
        """A registered watcher whose queue already holds the replayed events; raises 410 when too old.
        ``shared``: its events refer to the stored objects (see ``Watcher.shared``)."""
        self.expire_events()
        try:
            w = Watcher(
                rt,
                ns,
                parse_label_selector(label_selector),
                parse_field_selector(field_selector),
                bookmarks,
                shared=shared,
            )
        except SelectorError as e:
            raise ApiError.bad_request(str(e)) from e
        if resource_version in (None, "", "0"):
            for key in sorted(self.objects[rt.key]):
                obj = self.objects[rt.key][key]
                if w._matches(obj):
                    w._put("ADDED", obj, None)
        else:
            try:
                since = int(resource_version)
            except ValueError as e:
                raise ApiError.bad_request(f"invalid resourceVersion {resource_version!r}") from e
            if since < self.compacted_rv:
                raise ApiError(410, "Expired", f"too old resource version: {since} ({self.compacted_rv})")
            for ev in self.history:
                if ev.rv > since:
                    w.offer(ev)
        self.watchers.add(w)
        return w

    def unwatch(self, w: Watcher) -> None:
        self.watchers.discard(w)
        w.closed = True
