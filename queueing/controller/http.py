"""The controller's HTTP endpoints (aiohttp): ``/metrics`` on ``metrics.bindAddress`` and ``/healthz``,
``/readyz`` on ``health.healthProbeBindAddress`` (one listener when both are the same address).

* ``/metrics`` — Prometheus text format of the controller's own registry.
* ``/healthz`` — liveness: 200 ``ok`` while the event loop answers (and every health check passes).
* ``/readyz`` — readiness: 200 ``ok`` once every readiness check passes (the controller registers
  e.g. "informers synced"), else 503 with one line per failing check: ``name: reason``.

A check is a plain or async callable returning ``None`` when fine or a reason text when not; an
exception counts as failing, named by its type only (its text may name hosts and ports)::

    server = ControllerHTTP(metrics)
    server.add_ready_check("informers", lambda: None if informers_synced() else "caches not synced")
    await server.start(config.metrics.bind_address, config.health.health_probe_bind_address)
    ...
    await server.stop()
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from queueing.controller.metrics import ControllerMetrics

__all__ = ["Check", "ControllerHTTP", "parse_bind_address"]

log = logging.getLogger("queueing.controller.http")

Check = Callable[[], str | Awaitable[str | None] | None]


def parse_bind_address(address: str) -> tuple[str | None, int]:
    """``":8080"`` -> (None, 8080) (every interface); ``"127.0.0.1:0"``; ``"[::1]:8081"``."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"bind address {address!r} is not HOST:PORT or :PORT")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return (host or None), int(port)


class ControllerHTTP:
    def __init__(self, metrics: ControllerMetrics | CollectorRegistry) -> None:
        self.registry = metrics.registry if isinstance(metrics, ControllerMetrics) else metrics
        self._ready: dict[str, Check] = {}
        self._health: dict[str, Check] = {}
        self._runners: list[web.AppRunner] = []
        self.metrics_port: int | None = None
        self.health_port: int | None = None

    # ------------------------------------------------------------------ checks
    def add_ready_check(self, name: str, check: Check) -> None:
        self._ready[name] = check

    def add_health_check(self, name: str, check: Check) -> None:
        self._health[name] = check

    @staticmethod
    async def _failures(checks: dict[str, Check]) -> list[str]:
        out = []
        for name, check in checks.items():
            try:
                result = check()
                if inspect.isawaitable(result):
                    result = await result
            except Exception as e:  # the kind only: an exception's text may name hosts and ports
                result = f"check failed ({type(e).__name__})"
            if result is not None:
                out.append(f"{name}: {result}")
        return out

    # ------------------------------------------------------------------ handlers
    async def _metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _probe(self, checks: dict[str, Check]) -> web.Response:
        failures = await self._failures(checks)
        if failures:
            return web.Response(status=503, text="\n".join(failures) + "\n")
        return web.Response(text="ok\n")

    async def _healthz(self, request: web.Request) -> web.Response:
        return await self._probe(self._health)

    async def _readyz(self, request: web.Request) -> web.Response:
        return await self._probe(self._ready)

    def metrics_app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        return app

    def health_app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        return app

    def combined_app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        return app

    # ------------------------------------------------------------------ serving
    async def start(self, metrics_address: str, health_address: str) -> None:
        """Listen on both addresses (port 0 picks a free port: see ``metrics_port``/``health_port``).

        The same address twice (not port 0) is one listener serving all three paths."""
        if metrics_address == health_address and parse_bind_address(metrics_address)[1] != 0:
            port = await self._serve(self.combined_app(), metrics_address)
            self.metrics_port = self.health_port = port
        else:
            self.metrics_port = await self._serve(self.metrics_app(), metrics_address)
            self.health_port = await self._serve(self.health_app(), health_address)
        log.info(
            "serving /metrics on port %s, /healthz and /readyz on port %s",
            self.metrics_port,
            self.health_port,
        )

    async def _serve(self, app: web.Application, address: str) -> int:
        host, port = parse_bind_address(address)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        self._runners.append(runner)
        site = web.TCPSite(runner, host=host, port=port)
        await site.start()
        bound = runner.addresses[0] if runner.addresses else None
        return int(bound[1]) if bound else port

    async def stop(self) -> None:
        runners, self._runners = self._runners, []
        for runner in runners:
            await runner.cleanup()
