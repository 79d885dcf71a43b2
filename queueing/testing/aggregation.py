"""The emulator's aggregation layer: API groups served by another server, proxied as kube-aggregator does.

``emu.aggregation.register("visibility.queueing.dra.io", "v1beta1", "http://127.0.0.1:PORT")`` (what an
``APIService`` with a reachable Service does in a cluster); then every request under
``/apis/visibility.queueing.dra.io/v1beta1/...`` is authenticated and authorized by the emulator
(as kube-apiserver's filter chain does for aggregated groups: RBAC rules name the group, the
resource and the subresource, e.g. ``clusterqueues/pendingworkloads``) and forwarded to that server
with the user in ``X-Remote-User`` / ``X-Remote-Group``, its answer passed back unchanged. A
registered backend that does not answer is ``503 ServiceUnavailable``, as with kube-aggregator.
Discovery (``/apis``) lists the registered groups.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

__all__ = ["Aggregation", "Backend"]

_HOP = {"host", "content-length", "transfer-encoding", "connection", "authorization", "impersonate-user"}


@dataclass
class Backend:
    group: str
    version: str
    url: str
    namespaced: set[str] = field(default_factory=lambda: {"localqueues"})


class Aggregation:
    def __init__(self) -> None:
        self.backends: dict[tuple[str, str], Backend] = {}
        self.proxied = 0  # requests forwarded

    def register(self, group: str, version: str, url: str, namespaced: set[str] | None = None) -> None:
        """Proxy ``/apis/GROUP/VERSION/...`` to ``url``; ``namespaced``: its namespaced resources
        (for the authorization attributes of ``/namespaces/NS/RESOURCE/...`` paths)."""
        self.backends[(group, version)] = Backend(
            group, version, url.rstrip("/"), set(namespaced or {"localqueues"})
        )

    def unregister(self, group: str, version: str) -> None:
        self.backends.pop((group, version), None)

    def groups(self) -> list[dict[str, Any]]:
        """APIGroup entries for discovery."""
        out: dict[str, list[str]] = {}
        for g, v in self.backends:
            out.setdefault(g, []).append(v)
        return [
            {
                "name": g,
                "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
                "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]},
            }
            for g, vs in out.items()
        ]

    def backend_for(self, path: str) -> Backend | None:
        parts = [p for p in path.split("/") if p]
        if parts[:1] != ["apis"] or len(parts) < 2:
            return None
        if len(parts) == 2:  # /apis/GROUP: the group's discovery
            return next((b for (g, _), b in self.backends.items() if g == parts[1]), None)
        return self.backends.get((parts[1], parts[2]))

    def attributes(self, path: str, method: str, user: str, backend: Backend) -> dict[str, Any]:
        """The authorization attributes of a request to ``backend`` (the emulator's RequestAttributes
        fields), as kube-apiserver derives them from the path."""
        parts = [p for p in path.split("/") if p][3:]
        ns = ""
        if len(parts) >= 3 and parts[0] == "namespaces" and parts[2] in backend.namespaced:
            ns, parts = parts[1], parts[2:]
        verb = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
            method, method.lower()
        )
        if parts and len(parts) == 1 and verb == "get":
            verb = "list"
        return dict(
            user=user, verb=verb, group=backend.group, version=backend.version,
            resource=parts[0] if parts else "", subresource="/".join(parts[2:]), namespace=ns,
            name=parts[1] if len(parts) > 1 else "", path=path, resource_request=bool(parts),
        )  # fmt: skip

    async def proxy(
        self,
        request: web.Request,
        backend: Backend,
        user: str,
        groups: list[str],
        authorize: Callable[[dict[str, Any]], str | None],
    ) -> web.StreamResponse:
        """Authorize (``authorize`` returns a denial message or None), then forward."""
        attrs = self.attributes(request.path, request.method, user, backend)
        if attrs["resource_request"]:
            denied = authorize(attrs)
            if denied is not None:
                return _status(403, "Forbidden", denied)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        headers["X-Remote-User"] = user
        for g in groups:
            headers.setdefault("X-Remote-Group", g)
        body = await request.read()
        url = backend.url + request.path_qs
        self.proxied += 1
        try:
            timeout = aiohttp.ClientTimeout(total=30)
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.request(request.method, url, headers=headers, data=body or None, ssl=False) as r,
            ):
                data = await r.read()
                ctype = r.headers.get("Content-Type", "application/json")
                return web.Response(body=data, status=r.status, headers={"Content-Type": ctype})
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            return _status(
                503,
                "ServiceUnavailable",
                f"error trying to reach service: {type(e).__name__}: {e}"
                f" ({backend.version}.{backend.group} at {backend.url})",
            )


def _status(code: int, reason: str, message: str) -> web.Response:
    return web.json_response(
        {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
         "reason": reason, "code": code},
        status=code,
    )  # fmt: skip
