"""The dashboard's HTTP server (aiohttp): four pages, their JSON, the static files. Read-only.

    server = DashboardServer(ControllerSource(controller))
    port = await server.start(":8083")     # or "127.0.0.1:0": a free port
    ...
    await server.stop()

Pages: ``/queues``, ``/workloads``, ``/devices``, ``/history`` (``/`` redirects to ``/queues``): an
HTML shell each, filled by ``static/app.js`` from ``/api/queues``, ``/api/workloads``,
``/api/devices``, ``/api/history`` and ``/api/device?id=DRIVER/POOL/DEVICE`` (one device's details).
The pages poll once a second with ``?since=VERSION``: the answer is ``{"version": V, "unchanged":
true}`` while nothing changed. The state is taken from the source at most once per
``min_interval`` (1 s), and at most every 4 times as long as the last build took (a large cluster's
views are built in the controller's own event loop: the dashboard takes at most a fifth of it), and
only when its revision changed. A replay (``queueing simulate --serve``)
adds ``?t=SECONDS`` (virtual time) to every call and ``/api/timeline`` for the slider.

Only GET routes exist (no write actions); nothing secret is shown (the database URL is not).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from importlib import resources
from typing import Any

from aiohttp import web

from queueing.controller.http import parse_bind_address
from queueing.dashboard.model import (
    DashboardInput,
    DeviceLayout,
    device_detail,
    devices_view,
    queues_view,
    workloads_view,
)
from queueing.dashboard.source import DashboardSource
from queueing.gcpolicy import paused

__all__ = ["PAGES", "DashboardServer"]

log = logging.getLogger("queueing.dashboard")

PAGES = {"queues": "Queues", "workloads": "Workloads", "devices": "Device map", "history": "History"}
STATIC = {"app.js": "text/javascript", "style.css": "text/css"}
HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
HISTORY_INTERVAL = 5.0  # the ledger's reports are SQL: at most every 5 s
REFRESH = 10.0  # a view is rebuilt at least this often while read (belt and braces for the revision)


@dataclass
class _Built:
    revision: Any
    at: float  # monotonic
    version: int
    digest: str
    body: bytes


def _json(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":"), default=str).encode()


class DashboardServer:
    def __init__(
        self, source: DashboardSource, *, min_interval: float = 1.0, title: str = "queueing"
    ) -> None:
        self.source = source
        self.min_interval = min_interval
        self.title = title
        self.port: int | None = None
        self._runner: web.AppRunner | None = None
        self._snap: tuple[Any, float, float | None, DashboardInput] | None = None
        self._built: dict[tuple[str, float | None], _Built] = {}
        self._versions = 0
        self._colours: dict[str, int] = {}
        self._cost = 0.0  # seconds the last view took to build
        self._static = {
            name: resources.files(__package__).joinpath("static", name).read_bytes() for name in STATIC
        }

    @property
    def interval(self) -> float:
        """The least time between two builds: ``min_interval``, or 4x the last build's time."""
        return max(self.min_interval, 4 * self._cost)

    # ------------------------------------------------------------------ state
    def _snapshot(self, at: float | None) -> tuple[Any, DashboardInput]:
        rev = self.source.revision()
        now = time.monotonic()
        s = self._snap
        if s is not None and s[2] == at and (s[0] == rev or now - s[1] < self.interval):
            return s[0], s[3]
        inp = self.source.snapshot(at)
        self._snap = (rev, now, at, inp)
        return rev, inp

    def _part(self, part: str, at: float | None, build: Any, *, force: bool = False) -> _Built:
        """The view ``part`` (JSON), rebuilt when the source's revision changed (at most once per
        ``min_interval``) or it is older than ``REFRESH``. ``build()`` gives (revision of the state it
        read, data): a view built from an older state is rebuilt on the next call."""
        key = (part, at)
        old = self._built.get(key)
        now = time.monotonic()
        if not force and old is not None:
            fresh = old.revision == self.source.revision() and now - old.at < REFRESH
            if fresh or now - old.at < self.interval:
                return old
        t0 = time.perf_counter()
        with paused():
            rev, data = build()
            body = _json(data)
        self._cost = time.perf_counter() - t0
        digest = hashlib.sha1(body).hexdigest()
        if old is not None and old.digest == digest:
            old.revision, old.at = rev, now
            return old
        self._versions += 1
        b = _Built(rev, now, self._versions, digest, body)
        if len(self._built) > 64:  # a replay's slider visits many times
            self._built.clear()
        self._built[key] = b
        return b

    def colour(self, name: str) -> int:
        """The colour index of a workload or queue: given in the order names are first shown and kept
        for the server's lifetime, so colours stay put across updates and the first ones are far
        apart (the page turns index i into the hue i x 137.5°)."""
        return self._colours.setdefault(name, len(self._colours))

    def _paint(self, part: str, data: dict[str, Any]) -> dict[str, Any]:
        if part == "queues":
            for q in data["clusterQueues"]:
                q["colour"] = self.colour(q["name"])
        elif part == "workloads":
            for w in data["admitted"]:
                w["colour"] = self.colour(w["key"])
        elif part == "devices":
            for h in data["holders"]:
                h["colour"] = self.colour(h["key"])
                h["queueColour"] = self.colour(h["clusterQueue"]) if h["clusterQueue"] else None
        return data

    @staticmethod
    def _at(request: web.Request) -> float | None:
        t = request.query.get("t")
        if t in (None, ""):
            return None
        try:
            return float(t)
        except ValueError:
            raise web.HTTPBadRequest(text=f"t={t!r} is not a number of seconds") from None

    def _answer(self, request: web.Request, b: _Built) -> web.Response:
        since = request.query.get("since")
        if since is not None and since == str(b.version):
            body = _json({"version": b.version, "unchanged": True})
        else:
            body = b'{"version":' + str(b.version).encode() + b',"data":' + b.body + b"}"
        return web.Response(body=body, content_type="application/json", headers=HEADERS)

    # ------------------------------------------------------------------ handlers
    async def _api(self, request: web.Request) -> web.Response:
        part = request.match_info["part"]
        at = self._at(request)
        if part == "history":
            old = self._built.get(("history", at))
            if old is None or time.monotonic() - old.at >= HISTORY_INTERVAL:
                data = await self.source.history(at)
                old = self._part("history", at, lambda: (None, data), force=True)
            return self._answer(request, old)
        views = {"queues": queues_view, "workloads": workloads_view, "devices": devices_view}
        view = views.get(part)
        if view is None:
            raise web.HTTPNotFound(text=f"no such view: {part}")

        def build() -> tuple[Any, Any]:
            rev, inp = self._snapshot(at)
            return rev, self._paint(part, view(inp))

        return self._answer(request, self._part(part, at, build))

    async def _device(self, request: web.Request) -> web.Response:
        ident = request.query.get("id", "")
        parts = ident.split("/")
        if len(parts) < 3:
            raise web.HTTPBadRequest(text=f"id={ident!r} is not DRIVER/POOL/DEVICE")
        key = (parts[0], "/".join(parts[1:-1]), parts[-1])
        _, inp = self._snapshot(self._at(request))
        detail = device_detail(inp, key, DeviceLayout.for_slices(inp.slices))
        if detail is None:
            raise web.HTTPNotFound(text=f"no device {ident} in any ResourceSlice")
        return web.Response(body=_json(detail), content_type="application/json", headers=HEADERS)

    async def _timeline(self, request: web.Request) -> web.Response:
        tl = self.source.timeline()
        times = getattr(self.source, "times", None)
        body = {"range": list(tl) if tl else None, "times": times() if tl and callable(times) else []}
        return web.Response(body=_json(body), content_type="application/json", headers=HEADERS)

    async def _page(self, request: web.Request) -> web.Response:
        page = request.match_info.get("page") or "queues"
        if page not in PAGES:
            raise web.HTTPNotFound(text=f"no such page: {page}")
        return web.Response(text=self.render_page(page), content_type="text/html", headers=HEADERS)

    async def _root(self, request: web.Request) -> web.Response:
        raise web.HTTPFound("/queues" + (f"?{request.query_string}" if request.query_string else ""))

    async def _file(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in STATIC:
            raise web.HTTPNotFound()
        return web.Response(body=self._static[name], content_type=STATIC[name], headers=HEADERS)

    def render_page(self, page: str) -> str:
        """The server-rendered shell of a page: navigation, the replay slider, the page's container."""
        nav = "".join(
            f'<a href="/{p}" class="{"on" if p == page else ""}" data-nav="{p}">{label}</a>'
            for p, label in PAGES.items()
        )
        replay = self.source.timeline() is not None
        slider = (
            '<div id="replay"><label>virtual time <input id="slider" type="range" min="0" max="0" step="any">'
            '</label> <output id="t">0</output> s <button id="prev" type="button">◀</button>'
            '<button id="next" type="button">▶</button></div>'
            if replay
            else ""
        )
        mode = "replay" if replay else "live"
        return (
            "<!doctype html><html lang=en><head><meta charset=utf-8>"
            f"<title>{PAGES[page]} · {self.title}</title>"
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            '<link rel="stylesheet" href="/static/style.css"></head>'
            f'<body data-page="{page}" data-mode="{mode}">'
            f'<header><span class="brand">{self.title}</span><nav>{nav}</nav>{slider}'
            '<span id="status" class="status">loading…</span></header>'
            '<main id="main"></main><aside id="detail" hidden></aside>'
            '<script src="/static/app.js"></script></body></html>'
        )

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/", self._root)
        app.router.add_get("/api/device", self._device)
        app.router.add_get("/api/timeline", self._timeline)
        app.router.add_get("/api/{part}", self._api)
        app.router.add_get("/static/{name}", self._file)
        app.router.add_get("/{page}", self._page)
        return app

    # ------------------------------------------------------------------ serving
    async def start(self, address: str) -> int:
        """Listen on ``address`` (``HOST:PORT``, ``:PORT``; port 0 picks a free port); the port."""
        host, port = parse_bind_address(address)
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host=host, port=port)
        await site.start()
        bound = self._runner.addresses[0] if self._runner.addresses else None
        self.port = int(bound[1]) if bound else port
        log.info("serving the dashboard on port %s", self.port)
        return self.port

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
