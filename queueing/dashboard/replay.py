"""``queueing simulate --serve HOST:PORT``: the dashboard over a finished simulation, with a time slider.

The run's events are replayed on demand (:class:`~queueing.dashboard.source.ReplaySource`): every
page takes ``?t=SECONDS`` of virtual time. Serves until SIGINT or SIGTERM; prints the address on stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from typing import Any

from queueing.controller.http import parse_bind_address
from queueing.dashboard.server import DashboardServer
from queueing.dashboard.source import ReplaySource

__all__ = ["serve_replay"]


async def _serve(scenario: Any, result: Any, address: str) -> None:
    server = DashboardServer(ReplaySource(scenario, result), title="queueing simulate")
    port = await server.start(address)
    host = address.rpartition(":")[0].strip("[]") or "localhost"
    print(
        f"dashboard: http://{host}:{port}/ (replay of {len(result.events)} events; Ctrl-C stops)",
        file=sys.stderr,
    )
    sys.stderr.flush()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await server.stop()


def address_error(address: str) -> str | None:
    """Why ``address`` cannot be served on (not ``HOST:PORT`` / ``:PORT``), or None."""
    try:
        port = parse_bind_address(address)[1]
    except ValueError as e:
        return str(e)
    return None if 0 <= port < 65536 else f"port {port} is out of range"


def serve_replay(scenario: Any, result: Any, address: str) -> int:
    """Serve until interrupted; 0, or 2 when the address cannot be used (one line on stderr)."""
    try:
        asyncio.run(_serve(scenario, result, address))
    except (OSError, ValueError) as e:
        print(f"error: --serve {address}: {e}", file=sys.stderr)
        return 2
    return 0
