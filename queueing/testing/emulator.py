"""A stateful Kubernetes API server emulator (aiohttp) for tests and the demo.

It speaks enough of the REST protocol for the real kubernetes-asyncio client and real ``kubectl``:
discovery, OpenAPI v3 (with the CRD schemas, for ``kubectl explain``), CRUD with merge / JSON /
strategic-merge patches, status subresources, selectors, optimistic concurrency, finalizers, garbage
collection, watches with bookmarks and 410 Gone, CRD schema validation, MutatingAdmissionPolicies,
Event expiry, server-side Table output, fault injection and request counting. It plays
neither kubelet nor any controller: tests stand in for those.

Usage::

    async with run_emulator(crds_dir="crds") as emu:
        path = emu.kubeconfig_path(tmp_path)        # for kubectl and kubernetes-asyncio
        emu.faults.fail_next(409, verb="update", resource="workloads/status")
        ...
        assert emu.counts.writes() <= 4

Run by hand: ``python -m queueing.testing.emulator --port 8001 --crds crds``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import functools
import json
import logging
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from queueing.testing.aggregation import Aggregation
from queueing.testing.openapi import openapi_v3
from queueing.testing.patch import PatchError, json_patch, merge_patch, strategic_merge_patch
from queueing.testing.protobuf import PROTOBUF, ProtobufError, decode_access_review, decode_object
from queueing.testing.resources import ResourceType
from queueing.testing.store import CRD_KEY, ApiError, Store, StoreEvent, Watcher, dumps, loads
from queueing.testing.tables import table

__all__ = ["Counts", "Emulator", "Faults", "RequestAttributes", "main", "manifest_files", "run_emulator"]

log = logging.getLogger("queueing.testing.emulator")

INITIAL_EVENTS_END = "k8s.io/initial-events-end"  # the annotation of the BOOKMARK that ends a streaming list
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
SERVER_VERSION = {
    "major": "1",
    "minor": "34",
    "gitVersion": "v1.34.0",
    "gitCommit": "emulator",
    "gitTreeState": "clean",
    "buildDate": "2025-08-27T00:00:00Z",
    "goVersion": "go1.24.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}


@dataclass(frozen=True)
class RequestAttributes:
    """What an authorizer sees (the Kubernetes authorization attributes of a request)."""

    user: str
    verb: str  # get list watch create update patch delete deletecollection (or the HTTP verb lower-cased)
    group: str
    version: str
    resource: str
    subresource: str
    namespace: str
    name: str
    path: str
    resource_request: bool

    @property
    def resource_key(self) -> str:
        """``plural`` or ``plural/subresource`` — the key used by ``Counts`` and ``Faults``."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


class Counts(Counter[tuple[str, str]]):
    """Requests served, keyed by ``(verb, resource)``; resource is ``plural`` or ``plural/subresource``."""

    def writes(self, resource: str | None = None) -> int:
        return sum(
            n
            for (verb, res), n in self.items()
            if verb in WRITE_VERBS and (resource is None or res == resource)
        )

    def total(self, verb: str | None = None, resource: str | None = None) -> int:
        return sum(
            n
            for (v, r), n in self.items()
            if (verb is None or v == verb) and (resource is None or r == resource)
        )

    def snapshot(self) -> Counts:
        return Counts(self)

    def since(self, snap: Counts) -> Counts:
        out = Counts(self)
        out.subtract(snap)
        return Counts({k: v for k, v in out.items() if v > 0})


@dataclass
class _FailRule:
    status: int
    verb: str
    resource: str
    remaining: int
    message: str | None


@dataclass
class _LatencyRule:
    seconds: float
    verb: str
    resource: str
    remaining: int | None
    after: bool = False


def _match(pattern: str, value: str) -> bool:
    return pattern in ("*", value)


_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class Faults:
    """Fault injection, driven from the test's side of the emulator."""

    def __init__(self, emulator: Emulator) -> None:
        self._emu = emulator
        self._fail: list[_FailRule] = []
        self._latency: list[_LatencyRule] = []
        self._gone: list[list[Any]] = []  # [resource, remaining]
        self.injected = 0  # how many failures were served

    def fail_next(
        self, status: int, *, verb: str = "*", resource: str = "*", count: int = 1, message: str | None = None
    ) -> None:
        """The next ``count`` requests matching ``verb`` and ``resource`` (``plural`` or
        ``plural/status``; ``*`` matches all) get ``status`` (409 Conflict, 500, 429, 503...)."""
        self._fail.append(_FailRule(status, verb, resource, count, message))

    def add_latency(
        self,
        seconds: float,
        *,
        verb: str = "*",
        resource: str = "*",
        count: int | None = None,
        after: bool = False,
    ) -> None:
        """Delay matching requests by ``seconds`` (the next ``count`` of them, or all when None).
        With ``after=True`` the request is carried out first and only the response is delayed: a
        client that times out meanwhile does not know its write happened."""
        self._latency.append(_LatencyRule(seconds, verb, resource, count, after))

    def gone_on_next_watch(self, count: int = 1, resource: str = "*") -> None:
        """The next ``count`` watch requests get an ERROR event with a 410 Status, whatever their RV."""
        self._gone.append([resource, count])

    def drop_watches(self, abort: bool = False) -> int:
        """End every open watch now (cleanly, or by aborting the connection); returns how many."""
        return self._emu._drop_watches(abort)

    def compact(self) -> None:
        """Forget the event history: a watch from any older resourceVersion gets 410 Gone."""
        self._emu.store.compact()

    def restart(self, rv_jump: int = 1000) -> None:
        """Look like a restarted API server: watches aborted, history compacted, resourceVersion jumps."""
        self._emu._drop_watches(abort=True)
        self._emu.store.rv += rv_jump
        self._emu.store.compact()

    def clear(self) -> None:
        self._fail.clear()
        self._latency.clear()
        self._gone.clear()

    # -- used by the server
    def _take_failure(self, attrs: RequestAttributes) -> _FailRule | None:
        for rule in self._fail:
            if (
                rule.remaining > 0
                and _match(rule.verb, attrs.verb)
                and _match(rule.resource, attrs.resource_key)
            ):
                rule.remaining -= 1
                if rule.remaining == 0:
                    self._fail.remove(rule)
                self.injected += 1
                return rule
        return None

    def _delay(self, attrs: RequestAttributes, after: bool = False) -> float:
        total = 0.0
        for rule in list(self._latency):
            if rule.after != after:
                continue
            if _match(rule.verb, attrs.verb) and _match(rule.resource, attrs.resource_key):
                total += rule.seconds
                if rule.remaining is not None:
                    rule.remaining -= 1
                    if rule.remaining <= 0:
                        self._latency.remove(rule)
        return total

    def _take_gone(self, attrs: RequestAttributes) -> bool:
        for entry in self._gone:
            if _match(entry[0], attrs.resource_key):
                entry[1] -= 1
                if entry[1] <= 0:
                    self._gone.remove(entry)
                self.injected += 1
                return True
        return False


Authorizer = Callable[[RequestAttributes], bool]


@dataclass
class _OpenWatch:
    watcher: Watcher
    request: web.Request


@dataclass
class Emulator:
    """The running server. ``store`` holds the state, ``faults`` injects failures, ``counts`` counts."""

    store: Store = field(default_factory=Store)
    bookmark_interval: float | None = 5.0  # seconds between periodic BOOKMARKs (None: only on demand)
    default_watch_timeout: float = 1800.0
    tokens: dict[str, str] = field(default_factory=lambda: {"admin-token": "admin"})
    authorizer: Authorizer | None = None  # None: everything allowed
    # who a request without a token is: client-go (kubectl) does not send bearer tokens over plain HTTP,
    # so kubectl is "admin" (use --as=<user> to act as someone else)
    anonymous_user: str = "admin"
    url: str = ""
    counts: Counts = field(default_factory=Counts)
    access: Counter[RequestAttributes] = field(
        default_factory=Counter
    )  # every authorized request, for RBAC audits

    def __post_init__(self) -> None:
        self.faults = Faults(self)
        self.aggregation = Aggregation()  # API groups proxied to other servers (kube-aggregator)
        self._watches: dict[Watcher, _OpenWatch] = {}
        self._runner: web.AppRunner | None = None

    # ------------------------------------------------------------ conveniences for tests
    def send_bookmarks(self) -> None:
        """Send a BOOKMARK now on every watch that allows them."""
        self.store.bookmark()

    @property
    def open_watches(self) -> int:
        return len(self._watches)

    def load_crds(self, crds_dir: str | Path) -> list[str]:
        """Create every CustomResourceDefinition found in ``crds_dir/*.yaml``; returns their names."""
        names = []
        crd_rt = self.store.types[CRD_KEY]
        for path in sorted(Path(crds_dir).glob("*.y*ml")):
            for doc in copy.deepcopy(_load_yaml(path.read_text())):
                if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                    try:
                        self.store.create(crd_rt, None, doc)
                    except ApiError as e:
                        raise ValueError(f"{path}: {e.message}") from e
                    names.append(doc["metadata"]["name"])
        return names

    def load_objects(
        self,
        source: str | Path | list[dict[str, Any]],
        namespace: str = "default",
        on_error: Callable[[dict[str, Any], Exception], None] | None = None,
        create_namespaces: bool = False,
    ) -> list[str]:
        """Create objects from YAML files (a file, a directory's ``kustomization.yaml`` resources in
        their order, else every ``*.yaml`` of a directory, recursively: :func:`manifest_files`) or from a
        list of dicts: CRDs and Namespaces first, then the rest in order; namespaced objects
        without a namespace go to ``namespace``. Returns ``kind/name`` of each object created. A failure
        raises (ApiError / ValueError), or is passed to ``on_error`` and skipped. With
        ``create_namespaces``, missing namespaces are created first."""
        docs: list[dict[str, Any]] = []
        if isinstance(source, list):
            docs = copy.deepcopy(source)
        else:
            for f in manifest_files(Path(source)):
                docs.extend(d for d in copy.deepcopy(_load_yaml(f.read_text())) if isinstance(d, dict))
        order = {"CustomResourceDefinition": 0, "Namespace": 1}
        docs.sort(key=lambda d: order.get(d.get("kind", ""), 2))
        created = []
        for doc in docs:
            try:
                rt = self._resource_for(doc)
                ns = (doc.get("metadata") or {}).get("namespace") or namespace if rt.namespaced else None
                ns_rt = self.store.types["/namespaces"]
                if ns and create_namespaces and ("", ns) not in self.store.objects[ns_rt.key]:
                    self.store.create(ns_rt, None, {"metadata": {"name": ns}})
                    created.append(f"Namespace/{ns}")
                obj = self.store.create(rt, ns, doc)
            except (ApiError, ValueError) as e:
                if on_error is None:
                    raise
                on_error(doc, e)
                continue
            created.append(f"{rt.kind}/{obj['metadata']['name']}")
        return created

    def _resource_for(self, doc: dict[str, Any]) -> ResourceType:
        api_version, kind = doc.get("apiVersion", ""), doc.get("kind", "")
        group, _, version = api_version.rpartition("/")
        for rt in self.store.types.values():
            if rt.kind == kind and rt.group == group and version in rt.versions:
                return rt
        raise ValueError(
            f"{kind or '<no kind>'} {api_version or '<no apiVersion>'}: not served by the emulator"
        )

    def writes_by(self, user: str) -> Counts:
        """Requests made by ``user`` (a ``tokens`` value), as ``Counts`` — e.g. the controller's writes only."""
        out = Counts()
        for a, n in self.access.items():
            if a.user == user:
                out[(a.verb, a.resource_key)] += n
        return out

    def kubeconfig(self, token: str = "admin-token", user: str = "admin") -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "emulator", "cluster": {"server": self.url}}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [
                {"name": "emulator", "context": {"cluster": "emulator", "user": user, "namespace": "default"}}
            ],
            "current-context": "emulator",
            "preferences": {},
        }

    def kubeconfig_path(self, directory: str | Path, token: str = "admin-token", user: str = "admin") -> Path:
        """Write a kubeconfig pointing at this server into ``directory``; returns its path."""
        path = Path(directory) / f"kubeconfig-{user}"
        path.write_text(yaml.safe_dump(self.kubeconfig(token, user)))
        return path

    # ------------------------------------------------------------ lifecycle
    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False, shutdown_timeout=1.0, handler_cancellation=True
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        sock_port = self._runner.addresses[0][1]
        self.url = f"http://{host}:{sock_port}"
        self._bookmark_task = asyncio.create_task(self._bookmark_loop())

    async def stop(self) -> None:
        self._bookmark_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._bookmark_task
        self._drop_watches(abort=False)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _bookmark_loop(self) -> None:
        while True:
            await asyncio.sleep(self.bookmark_interval or 3600)
            if self.bookmark_interval:
                self.store.bookmark()

    def _drop_watches(self, abort: bool) -> int:
        n = 0
        for w, ow in list(self._watches.items()):
            n += 1
            w.close()
            if abort and ow.request.transport is not None:
                ow.request.transport.abort()
        return n

    # ------------------------------------------------------------ request parsing
    def _attributes(self, request: web.Request, user: str) -> tuple[RequestAttributes, ResourceType | None]:
        parts = [p for p in request.path.split("/") if p]
        method = request.method
        q = request.query
        base: dict[str, Any] = dict(
            user=user, verb=method.lower(), group="", version="", resource="", subresource="", namespace="",
            name="", path=request.path, resource_request=False,
        )  # fmt: skip
        if parts[:1] == ["api"] and len(parts) >= 3:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 4:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return RequestAttributes(**base), None
        ns = ""
        if (
            rest[0] == "namespaces"
            and len(rest) >= 3
            and self.store.resolve(group, version, rest[2]) is not None
        ):
            rt = self.store.resolve(group, version, rest[2])
            if rt is not None and rt.namespaced:
                ns, rest = rest[1], rest[2:]
        plural = rest[0]
        name = rest[1] if len(rest) > 1 else ""
        sub = "/".join(rest[2:])
        rt = self.store.resolve(group, version, plural)
        watch = q.get("watch") in ("1", "true", "True")
        if method == "GET":
            verb = "watch" if watch else ("get" if name else "list")
        elif method == "POST":
            verb = "create"
        elif method == "PUT":
            verb = "update"
        elif method == "PATCH":
            verb = "patch"
        elif method == "DELETE":
            verb = "delete" if name else "deletecollection"
        else:
            verb = method.lower()
        base.update(
            verb=verb, group=group, version=version, resource=plural, subresource=sub, namespace=ns, name=name,
            resource_request=True,
        )  # fmt: skip
        return RequestAttributes(**base), rt

    # ------------------------------------------------------------ dispatch
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self._handle_inner(request)
        except ApiError as e:
            return _status_response(e)
        except (PatchError, ValueError) as e:
            return _status_response(ApiError.bad_request(str(e)))

    async def _handle_inner(self, request: web.Request) -> web.StreamResponse:
        auth = request.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            user = self.tokens.get(auth[7:].strip())
            if user is None:
                raise ApiError(401, "Unauthorized", "Unauthorized")
        else:
            user = self.anonymous_user
        impersonate = request.headers.get("Impersonate-User")
        if impersonate:  # kubectl --as=...: only the admin may impersonate
            if user != "admin":
                raise ApiError(
                    403, "Forbidden", f'users "{impersonate}" is forbidden: User "{user}" cannot impersonate'
                )
            user = impersonate
        backend = self.aggregation.backend_for(request.path)  # aggregated API groups (aggregation.py)
        if backend is not None:
            return await self.aggregation.proxy(request, backend, user, [], self._denial)
        attrs, rt = self._attributes(request, user)
        if attrs.resource_request:
            self.counts[(attrs.verb, attrs.resource_key)] += 1
        if attrs.group == "authorization.k8s.io" and attrs.resource in (
            "selfsubjectaccessreviews",
            "subjectaccessreviews",
        ):
            if request.content_type == PROTOBUF:
                body = decode_access_review(await request.read())
            else:
                body = await _body(request)
            return self._access_review(attrs, body)
        if self.authorizer is not None and attrs.resource_request and not self.authorizer(attrs):
            res = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
            grp = f' in API group "{attrs.group}"'
            scope = f' in the namespace "{attrs.namespace}"' if attrs.namespace else " at the cluster scope"
            qualified = f"{attrs.resource}.{attrs.group}" if attrs.group else attrs.resource
            subject = f'{qualified} "{attrs.name}"' if attrs.name else qualified
            raise ApiError(
                403,
                "Forbidden",
                f'{subject} is forbidden: User "{user}" cannot {attrs.verb} resource "{res}"{grp}{scope}',
                {"name": attrs.name, "group": attrs.group, "kind": attrs.resource},
            )
        if attrs.resource_request:
            self.access[attrs] += 1
            delay = self.faults._delay(attrs)
            if delay > 0:
                await asyncio.sleep(delay)
            rule = self.faults._take_failure(attrs)
            if rule is not None:
                reason = _REASONS.get(rule.status, "InternalError")
                msg = rule.message or f"injected fault: {reason} ({attrs.verb} {attrs.resource_key})"
                if rule.status == 409:
                    msg = rule.message or (
                        f'Operation cannot be fulfilled on {attrs.resource} "{attrs.name}": the object has been '
                        "modified; please apply your changes to the latest version and try again"
                    )
                raise ApiError(rule.status, reason, msg, {"name": attrs.name, "kind": attrs.resource})
            if rt is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            resp = await self._resource(request, attrs, rt)
            delay = self.faults._delay(attrs, after=True)
            if delay > 0:
                await asyncio.sleep(delay)
            return resp
        return self._non_resource(request)

    def _denial(self, fields: dict[str, Any]) -> str | None:
        """Why the authorizer refuses these attributes (None: allowed)."""
        attrs = RequestAttributes(**fields)
        if self.authorizer is None or self.authorizer(attrs):
            return None
        res = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
        scope = f' in the namespace "{attrs.namespace}"' if attrs.namespace else " at the cluster scope"
        subject = (
            f'{attrs.resource}.{attrs.group} "{attrs.name}"'
            if attrs.name
            else f"{attrs.resource}.{attrs.group}"
        )
        return f'{subject} is forbidden: User "{attrs.user}" cannot {attrs.verb} resource "{res}" in API group "{attrs.group}"{scope}'

    def _access_review(self, attrs: RequestAttributes, body: Any) -> web.Response:
        """``kubectl auth can-i``: answer a (Self)SubjectAccessReview with the configured authorizer."""
        if attrs.verb != "create" or not isinstance(body, dict):
            raise ApiError(405, "MethodNotAllowed", "only create is supported for access reviews")
        spec = body.get("spec") or {}
        ra = spec.get("resourceAttributes")
        if ra is None:
            allowed, reason = True, "non-resource URLs are not authorized by the emulator"
        else:
            user = spec.get("user") or attrs.user if attrs.resource == "subjectaccessreviews" else attrs.user
            probe = RequestAttributes(
                user, ra.get("verb", ""), ra.get("group", ""), ra.get("version", ""), ra.get("resource", ""),
                ra.get("subresource", ""), ra.get("namespace", ""), ra.get("name", ""), "", True,
            )  # fmt: skip
            authorizer = self.authorizer
            allowed = authorizer is None or bool(authorizer(probe))
            reason = "" if allowed else "no RBAC rule allows it"
            if not allowed and isinstance(getattr(authorizer, "denied", None), list):
                authorizer.denied.remove(probe)  # type: ignore[union-attr]  # a question, not a denied request
        body["status"] = {"allowed": allowed, **({"reason": reason} if reason else {})}
        body.setdefault("apiVersion", "authorization.k8s.io/v1")
        return _json(body, 201)

    def _non_resource(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        parts = [p for p in path.split("/") if p]
        if path in ("/healthz", "/livez", "/readyz"):
            return web.Response(text="ok")
        if path == "/version":
            return _json(SERVER_VERSION)
        if path == "/api":
            return _json(
                {
                    "kind": "APIVersions",
                    "versions": ["v1"],
                    "serverAddressByClientCIDRs": [
                        {"clientCIDR": "0.0.0.0/0", "serverAddress": request.host}
                    ],
                }
            )
        if path == "/apis":
            return _json({"kind": "APIGroupList", "apiVersion": "v1", "groups": self._groups()})
        if parts[:1] == ["apis"] and len(parts) == 2:
            for g in self._groups():
                if g["name"] == parts[1]:
                    return _json({"kind": "APIGroup", "apiVersion": "v1", **g})
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if parts[:1] == ["api"] and len(parts) == 2:
            return _json(self._resource_list("", parts[1]))
        if parts[:1] == ["apis"] and len(parts) == 3:
            return _json(self._resource_list(parts[1], parts[2]))
        if path == "/openapi/v3":
            paths = {"api/v1": {"serverRelativeURL": "/openapi/v3/api/v1"}}
            for g in self._groups():
                for v in g["versions"]:
                    paths[f"apis/{v['groupVersion']}"] = {
                        "serverRelativeURL": f"/openapi/v3/apis/{v['groupVersion']}"
                    }
            return _json({"paths": paths})
        if parts[:2] == ["openapi", "v3"]:
            gv = parts[3:] if parts[2:3] == ["apis"] else ["", *parts[3:]]
            if len(gv) != 2:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            kinds = [rt for rt in self.store.types.values() if rt.group == gv[0] and gv[1] in rt.versions]
            return _json(openapi_v3(gv[0], gv[1], kinds, SERVER_VERSION["gitVersion"]))
        raise ApiError(404, "NotFound", "the server could not find the requested resource")

    def _groups(self) -> list[dict[str, Any]]:
        groups: dict[str, list[str]] = {}
        for rt in self.store.types.values():
            if rt.group:
                vs = groups.setdefault(rt.group, [])
                for v in rt.versions:
                    if v not in vs:
                        vs.append(v)
        out = []
        for g, vs in sorted(groups.items()):
            versions = [{"groupVersion": f"{g}/{v}", "version": v} for v in vs]
            out.append({"name": g, "versions": versions, "preferredVersion": versions[0]})
        return out + self.aggregation.groups()

    def _resource_list(self, group: str, version: str) -> dict[str, Any]:
        resources = []
        for rt in sorted(self.store.types.values(), key=lambda r: r.plural):
            if rt.group == group and version in rt.versions:
                resources.extend(rt.discovery())
        if not resources:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        gv = f"{group}/{version}" if group else version
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}

    # ------------------------------------------------------------ resources
    async def _resource(
        self, request: web.Request, attrs: RequestAttributes, rt: ResourceType
    ) -> web.StreamResponse:
        store = self.store
        q = request.query
        ns = attrs.namespace or None
        if rt.namespaced is False and ns:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if rt.key == "/pods" and attrs.subresource == "binding" and attrs.verb == "create":
            body = await _body(request)
            target = (body or {}).get("target") or {}
            if not target.get("name"):
                raise ApiError.bad_request("a Binding needs target.name")
            store.bind(attrs.namespace, attrs.name, target["name"])
            return _json(
                {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, 201
            )
        if attrs.subresource and not (attrs.subresource == "status" and rt.status_subresource):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        dry_run = q.get("dryRun") == "All"
        as_table = "as=Table" in request.headers.get("Accept", "")
        include = q.get("includeObject", "Metadata")
        verb = attrs.verb
        if verb == "watch":
            return await self._watch(request, attrs, rt, as_table, include)
        if verb == "list":
            items, rv, cont, remaining = store.list(
                rt, ns, q.get("labelSelector"), q.get("fieldSelector"),
                int(q["limit"]) if q.get("limit") else None, q.get("continue"), share=True,
            )  # fmt: skip
            meta: dict[str, Any] = {"resourceVersion": rv}
            if cont:
                meta["continue"] = cont
            if remaining is not None:
                meta["remainingItemCount"] = remaining
            items = [store._out(rt, o, attrs.version) for o in items]
            if as_table:
                return _json(table(rt, items, store.clock(), include, meta))
            return _json(
                {
                    "kind": f"{rt.kind}List",
                    "apiVersion": _gv(rt, attrs.version),
                    "metadata": meta,
                    "items": items,
                }
            )
        if verb == "get":
            obj = store._out(rt, store.get(rt, ns, attrs.name, share=True), attrs.version)
            if as_table:
                return _json(
                    table(
                        rt,
                        [obj],
                        store.clock(),
                        include,
                        {"resourceVersion": obj["metadata"]["resourceVersion"]},
                    )
                )
            return _json(obj)
        body = await _body(request)
        store.field_validation = q.get("fieldValidation", "Warn")
        store.warnings = []
        store.user = attrs.user
        try:
            resp = await self._write(request, attrs, rt, body, dry_run)
        finally:
            store.field_validation = "Warn"
            store.user = "admin"
        for w in store.warnings:
            resp.headers.add("Warning", "299 - " + json.dumps(w))
        return resp

    async def _write(
        self, request: web.Request, attrs: RequestAttributes, rt: ResourceType, body: Any, dry_run: bool
    ) -> web.Response:
        store = self.store
        q = request.query
        ns = attrs.namespace or None
        verb = attrs.verb
        if verb == "create":
            if attrs.subresource:
                raise ApiError(405, "MethodNotAllowed", "create is not supported on this subresource")
            return _json(store._out(rt, store.create(rt, ns, body, dry_run, share=True), attrs.version), 201)
        if verb == "update":
            return _json(
                store._out(
                    rt,
                    store.update(rt, ns, attrs.name, body, attrs.subresource or None, dry_run, share=True),
                    attrs.version,
                )
            )
        if verb == "patch":
            ctype = request.content_type
            if ctype == "application/json-patch+json":

                def apply(cur: dict[str, Any]) -> Any:
                    return json_patch(cur, body)
            elif ctype == "application/merge-patch+json":

                def apply(cur: dict[str, Any]) -> Any:
                    return merge_patch(cur, body, take=True)
            elif ctype == "application/strategic-merge-patch+json":
                if rt.crd:
                    raise ApiError(
                        415,
                        "UnsupportedMediaType",
                        "strategic merge patch is not supported for custom resources",
                    )

                def apply(cur: dict[str, Any]) -> Any:
                    return strategic_merge_patch(cur, body)
            elif ctype == "application/apply-patch+yaml":
                # simplified server-side apply: create when missing, else merge (no managedFields/conflicts)
                if not q.get("fieldManager"):
                    raise ApiError(
                        422,
                        "Invalid",
                        'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
                        "is required for apply patch",
                    )
                if not isinstance(body, dict):
                    raise ApiError.bad_request("an apply patch must be an object")
                try:
                    store.get(rt, ns, attrs.name, share=True)
                except ApiError as e:
                    if e.code != 404:
                        raise
                    body.setdefault("metadata", {}).setdefault("name", attrs.name)
                    return _json(
                        store._out(rt, store.create(rt, ns, body, dry_run, share=True), attrs.version), 201
                    )

                def apply(cur: dict[str, Any]) -> Any:
                    return strategic_merge_patch(cur, body)
            else:
                raise ApiError(
                    415,
                    "UnsupportedMediaType",
                    f"the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml (got {ctype})",
                )
            return _json(
                store._out(
                    rt,
                    store.patch(rt, ns, attrs.name, apply, attrs.subresource or None, dry_run, share=True),
                    attrs.version,
                )
            )
        if verb == "delete":
            opts = body if isinstance(body, dict) else {}
            if q.get("propagationPolicy"):
                opts["propagationPolicy"] = q["propagationPolicy"]
            return _json(store._out(rt, store.delete(rt, ns, attrs.name, opts, dry_run), attrs.version))
        if verb == "deletecollection":
            opts = body if isinstance(body, dict) else {}
            items = store.delete_collection(rt, ns, q.get("labelSelector"), q.get("fieldSelector"), opts)
            return _json(
                {
                    "kind": f"{rt.kind}List",
                    "apiVersion": _gv(rt, attrs.version),
                    "metadata": {},
                    "items": items,
                }
            )
        raise ApiError(405, "MethodNotAllowed", f"{request.method} is not supported")

    async def _watch(
        self, request: web.Request, attrs: RequestAttributes, rt: ResourceType, as_table: bool, include: str
    ) -> web.StreamResponse:
        q = request.query
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        try:
            if self.faults._take_gone(attrs):
                raise ApiError(
                    410, "Expired", f"too old resource version: {q.get('resourceVersion', '')} (injected)"
                )
            # a streaming list (kubectl >= 1.35's WatchList): the current state as ADDED events, then a
            # BOOKMARK annotated k8s.io/initial-events-end, then the changes
            initial = q.get("sendInitialEvents") in ("1", "true", "True")
            w = self.store.watch(
                rt, attrs.namespace or None, None if initial else q.get("resourceVersion"),
                q.get("labelSelector"), q.get("fieldSelector"),
                q.get("allowWatchBookmarks") in ("1", "true", "True"), shared=True,
            )  # fmt: skip
            if initial:
                end = {"resourceVersion": str(self.store.rv), "annotations": {INITIAL_EVENTS_END: "true"}}
                w.queue.put_nowait(
                    {
                        "type": "BOOKMARK",
                        "object": {"kind": rt.kind, "apiVersion": rt.group_version, "metadata": end},
                    }
                )
        except ApiError as e:
            if e.code != 410:
                raise
            await resp.prepare(request)
            await resp.write(json.dumps({"type": "ERROR", "object": e.status()}).encode() + b"\n")
            await resp.write_eof()
            return resp
        self._watches[w] = _OpenWatch(w, request)
        loop = asyncio.get_running_loop()
        # like the API server, 0 or no timeoutSeconds means the default (long) timeout
        timeout = float(q.get("timeoutSeconds") or 0) or self.default_watch_timeout
        deadline = loop.time() + timeout
        served = _gv(rt, attrs.version)
        try:
            await resp.prepare(request)
            while True:
                remaining = deadline - loop.time()
                try:
                    if remaining <= 0:  # timed out: send what is already queued, then end
                        item = w.queue.get_nowait()
                    else:
                        item = await asyncio.wait_for(w.queue.get(), remaining)
                except (TimeoutError, asyncio.QueueEmpty):
                    break
                # everything queued by now goes out in one write (the events stay in order)
                chunk: list[bytes] = []
                while item is not None:
                    chunk.append(self._watch_line(rt, attrs.version, served, item, as_table, include))
                    if w.queue.empty():
                        break
                    item = w.queue.get_nowait()
                if chunk:
                    await resp.write(b"".join(chunk))
                if item is None:
                    break
            with contextlib.suppress(ConnectionError, RuntimeError):
                await resp.write_eof()
        except (ConnectionError, RuntimeError):
            pass
        finally:
            self._watches.pop(w, None)
            self.store.unwatch(w)
        return resp

    def _watch_line(
        self,
        rt: ResourceType,
        version: str,
        served: str,
        item: dict[str, Any],
        as_table: bool,
        include: str,
    ) -> bytes:
        """One watch event as the JSON line sent: a stored event's line is encoded once for all watchers."""
        if item["type"] == "BOOKMARK":
            return dumps(item) + b"\n"
        if as_table:
            obj = self.store._out(rt, item["object"], version)
            meta = {"resourceVersion": obj["metadata"]["resourceVersion"]}
            return (
                dumps({"type": item["type"], "object": table(rt, [obj], self.store.clock(), include, meta)})
                + b"\n"
            )
        ev: StoreEvent | None = item.get("event")
        if ev is not None:
            return ev.line(item["type"], served)
        return dumps({"type": item["type"], "object": self.store._out(rt, item["object"], version)}) + b"\n"


def manifest_files(path: Path) -> list[Path]:
    """The YAML files of ``path``: the file itself; for a directory with a ``kustomization.yaml``, its
    ``resources`` in their order (a listed directory in turn); else every ``*.yaml`` below it, sorted.
    Only plain resource lists: a kustomization with anything else to apply is a ValueError."""
    if not path.is_dir():
        return [path]
    kustomization = path / "kustomization.yaml"
    if not kustomization.is_file():
        return sorted(path.rglob("*.y*ml"))
    spec = yaml.safe_load(kustomization.read_text()) or {}
    other = sorted(set(spec) - {"apiVersion", "kind", "resources"})
    if other:
        raise ValueError(f"{kustomization}: only `resources` is read here, not {', '.join(other)}")
    return [f for r in spec.get("resources") or [] for f in manifest_files(path / r)]


@functools.lru_cache(maxsize=64)
def _load_yaml(text: str) -> list[Any]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return list(yaml.load_all(text, Loader=loader))


def _gv(rt: ResourceType, version: str) -> str:
    v = version or rt.version
    return f"{rt.group}/{v}" if rt.group else v


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(body=dumps(obj), status=status, content_type="application/json")


def _status_response(e: ApiError) -> web.Response:
    return _json(e.status(), e.code)


async def _body(request: web.Request) -> Any:
    raw = await request.read()
    if not raw:
        return None
    if request.content_type == PROTOBUF:
        # typed clients (kubectl create namespace|secret|configmap|job, kubectl run) post built-in
        # kinds in protobuf, as a real API server accepts
        try:
            return decode_object(raw)
        except ProtobufError as e:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the emulator cannot read this protobuf body ({e}); send it as application/json",
            ) from e
    try:
        if "yaml" in request.content_type:
            return yaml.safe_load(raw)
        return loads(raw)
    except (ValueError, yaml.YAMLError) as e:
        raise ApiError.bad_request(f"the request body is not valid JSON: {e}") from e


@contextlib.asynccontextmanager
async def run_emulator(
    crds_dir: str | Path | None = None,
    port: int = 0,
    host: str = "127.0.0.1",
    *,
    bookmark_interval: float | None = 5.0,
    history_limit: int = 10000,
    event_ttl: float | None = 3600.0,
    clock: Callable[[], datetime] | None = None,
) -> AsyncIterator[Emulator]:
    """Start an emulator (CRDs from ``crds_dir/*.yaml`` loaded), yield it, and stop it.

    ``history_limit``: watch events kept for replay; ``event_ttl``: seconds an Event lives after its
    last write (None: forever); ``clock``: the store's time source (timestamps, Event expiry)."""
    store = Store(history_limit=history_limit, event_ttl=event_ttl, **({"clock": clock} if clock else {}))
    emu = Emulator(store=store, bookmark_interval=bookmark_interval)
    if crds_dir is not None:
        emu.load_crds(crds_dir)
    await emu.start(host, port)
    try:
        yield emu
    finally:
        await emu.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m queueing.testing.emulator", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--crds", default="crds", help="directory of CRD YAML files to serve (default: crds)")
    parser.add_argument("--kubeconfig", help="write a kubeconfig for this server to this directory")
    parser.add_argument(
        "--load", action="append", default=[], metavar="PATH",
        help="create the objects of this YAML file or directory (a kustomization.yaml's resources in "
        "order, else every *.yaml) at start (repeatable, in order)",
    )  # fmt: skip
    parser.add_argument(
        "--history-limit", type=int, default=10000,
        help="watch events kept for replay; older resourceVersions get 410 Gone (default: 10000)",
    )  # fmt: skip
    parser.add_argument(
        "--event-ttl", type=float, default=3600.0, metavar="SECONDS",
        help="Events are deleted this long after their last write, like kube-apiserver's --event-ttl "
        "(default: 3600; 0 keeps them forever)",
    )  # fmt: skip
    args = parser.parse_args(argv)

    async def serve() -> None:
        crds = args.crds if args.crds and Path(args.crds).is_dir() else None
        async with run_emulator(
            crds, args.port, args.host, history_limit=args.history_limit, event_ttl=args.event_ttl or None
        ) as emu:

            def skipped(doc: dict[str, Any], err: Exception) -> None:
                name = (doc.get("metadata") or {}).get("name")
                print(f"skipped {doc.get('kind')}/{name}: {err}", file=sys.stderr, flush=True)

            for source in args.load:
                n = len(emu.load_objects(source, on_error=skipped, create_namespaces=True))
                print(f"loaded {n} objects from {source}", flush=True)
            print(f"Kubernetes API emulator listening on {emu.url}", flush=True)
            if args.kubeconfig:
                print(f"kubeconfig: {emu.kubeconfig_path(args.kubeconfig)}", flush=True)
            while True:
                await asyncio.sleep(3600)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
