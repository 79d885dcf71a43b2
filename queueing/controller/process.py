"""One controller replica: the :class:`Controller`, leader election, metrics and probes, periodic jobs.

``queueing run`` builds one of these; tests build several against one emulator::

    proc = ControllerProcess(kube, ledger, config, identity="replica-a")
    await proc.start()          # ledger run, HTTP, informers (warm), periodic jobs, campaign
    ...
    await proc.stop()           # graceful: the current step finishes, the Lease is released

Only the holder of the Lease admits and evicts: on acquiring it the replica records a leader term in
the ledger (``Ledger.begin_leader_term``), rebuilds its record from the ledger and the Workloads and
starts the sync loop; on losing it (or on shutdown) it stops the loop — after the step in progress —
and ends the term. A standby keeps its informers warm and its ``/readyz`` green once they synced.
``/readyz`` also reports a PostgreSQL ledger that does not answer (``ledger: database unreachable
(OSError)``: the kind of error, never its text) and a wedge (``scheduling: no scheduling cycle completed
for 130s while 4 workload(s) wait``, see ``controller/health.py``); ``/healthz`` reports neither (a
restart would not bring the database back: the loop retries meanwhile), only a dead sync loop.
``Controller.may_act`` is the elector's ``is_leader`` (the last renewal is younger than the renew
deadline), so a leader that cannot renew stops writing before another replica can take over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from queueing.config import Config
from queueing.controller.controller import Controller
from queueing.controller.health import StallWatch
from queueing.controller.http import ControllerHTTP
from queueing.controller.metrics import ControllerMetrics
from queueing.controller.periodic import INADMISSIBLE_RECHECK, PeriodicJobs
from queueing.controller.visibility import VisibilityServer
from queueing.dashboard import ControllerSource, DashboardServer  # dashboard
from queueing.kube.client import KubeClient
from queueing.kube.leader import Clock, LeaderElectionSettings, LeaderElector
from queueing.ledger.engine import is_postgres
from queueing.ledger.errors import is_outage, short_reason
from queueing.ledger.repository import Ledger

__all__ = ["ControllerProcess", "default_identity"]

log = logging.getLogger("queueing.controller.process")

T = TypeVar("T")

LEDGER_PROBE_TIMEOUT = 1.5  # seconds; under the readiness probe's timeoutSeconds (2) in deploy/


def default_identity() -> str:
    """client-go's convention: the host name (the pod name in a cluster) plus a unique suffix."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


class ControllerProcess:
    def __init__(
        self,
        kube: KubeClient,
        ledger: Ledger,
        config: Config,
        *,
        identity: str | None = None,
        clock: Callable[[], float] = time.time,
        elector_clock: Clock | None = None,
        serve_http: bool = True,
        periodic: bool = True,
        **controller_kwargs: Any,
    ) -> None:
        self.kube, self.ledger, self.config = kube, ledger, config
        self.identity = identity or default_identity()
        self.clock = clock
        self.metrics = ControllerMetrics()
        self.controller = Controller(
            kube, ledger, config, clock=clock, metrics=self.metrics, **controller_kwargs
        )
        self.http = ControllerHTTP(self.metrics) if serve_http else None
        self.stall = StallWatch(
            self.controller,
            self.metrics,
            config.health.scheduling_stall_timeout,
            leading=lambda: self._leading,  # elected, even while its loop cannot start yet
        )
        if self.http is not None:
            self.http.add_ready_check("informers", self._informers_check)
            self.http.add_ready_check("scheduling", self.stall.ready_check)
            self.http.add_health_check("sync-loop", self.stall.health_check)
            # SQLite is a file in this process (and its BEGIN IMMEDIATE would contend with writers)
            if is_postgres(ledger.engine):
                self.http.add_ready_check("ledger", self._ledger_check)
            self.http.add_health_check("leader-election", lambda: "failed" if self._failed else None)
        # the visibility API (visibility.queueing.dra.io), when configured: served by every replica
        self.visibility = (
            VisibilityServer(self.controller) if serve_http and config.visibility.bind_address else None
        )
        # dashboard: the read-only web UI on dashboard.bindAddress (off unless set)
        self.dashboard: DashboardServer | None = None
        if serve_http and config.dashboard.bind_address:
            self.dashboard = DashboardServer(ControllerSource(self.controller, ledger))
        self.jobs = PeriodicJobs(config, metrics=self.metrics) if periodic else None
        self.lease = f"{config.lease_namespace}/{config.leader_election.resource_name}"
        # leader_election_master_status{name=...}: the Lease's name, as controller-runtime labels it
        self._lease_label = config.leader_election.resource_name
        self.elector: LeaderElector | None = None
        if config.leader_election.leader_elect:
            self.elector = LeaderElector(
                kube,
                LeaderElectionSettings.from_config(config, self.identity),
                on_started_leading=self._started_leading,
                on_stopped_leading=self._stopped_leading,
                clock=elector_clock,
            )
            elector = self.elector
            self.controller.may_act = lambda: elector.is_leader
        self.run_id: str | None = None
        self.term: int | None = None
        self.terms: list[int] = []
        self._elector_task: asyncio.Task[None] | None = None
        self._failed = False
        self._leading = False

    def _informers_check(self) -> str | None:
        if self.controller.informers_synced:
            return None
        waiting = [i.resource.plural for i in self.controller.informers if not i.has_synced]
        return "not synced: " + ", ".join(waiting)

    async def _ledger_check(self) -> str | None:
        try:
            async with asyncio.timeout(LEDGER_PROBE_TIMEOUT), self.ledger.engine.connect() as c:
                await c.exec_driver_sql("SELECT 1")
        except Exception as e:  # the kind of error only: its text names hosts and ports
            return f"database unreachable ({short_reason(e)})"
        return None

    # ------------------------------------------------------------------ lifecycle
    async def start(self, timeout: float = 60.0) -> None:
        self.run_id = await self.ledger.start_run(
            identity=self.identity, at=self.clock(), details={"lease": self.lease}
        )
        if self.http is not None:
            await self.http.start(
                self.config.metrics.bind_address, self.config.health.health_probe_bind_address
            )
        v = self.config.visibility
        if self.visibility is not None and v.bind_address:
            await self.visibility.start(v.bind_address, v.cert_file, v.key_file)
        if self.dashboard is not None and self.config.dashboard.bind_address:  # dashboard
            await self.dashboard.start(self.config.dashboard.bind_address)
        self.controller.slices.add_handler(self._on_slices)
        await self.controller.start(timeout, lead=False)
        self.stall.start()
        if self.jobs is not None:
            c = self.controller
            self.jobs.add_usage_sampling(c.sample_usage)
            self.jobs.add_resync(c.resync)
            self.jobs.add_compaction(self.ledger)
            self.jobs.add_inadmissible_recheck(c.recheck_inadmissible)
            run_id = self.run_id
            self.jobs.add_heartbeat(lambda: self.ledger.heartbeat(run_id, at=self.clock()))
            self.jobs.start()
        self.metrics.set_leader(self._lease_label, False)
        if self.elector is None:
            await self._started_leading()
        else:
            self._elector_task = asyncio.create_task(self._campaign(), name=f"elector-{self.identity}")

    async def _campaign(self) -> None:
        assert self.elector is not None
        try:
            await self.elector.run()
        except asyncio.CancelledError:
            raise
        except Exception:
            self._failed = True
            log.exception("leader election failed")

    def _on_slices(self, old: Any, new: Any) -> None:
        if self.jobs is not None and self._leading:
            self.jobs.trigger(INADMISSIBLE_RECHECK)  # event-driven re-check

    async def _started_leading(self) -> None:
        assert self.run_id is not None
        run_id = self.run_id
        # isolation: the term and the recovery need the ledger; while it is away they are retried (one
        # line logged), so the Lease's holder does not sit idle (this task is cancelled if it loses it)
        self.term = await self._while_ledger_away(
            "start its leader term",
            lambda: self.ledger.begin_leader_term(run_id, lease=self.lease, at=self.clock()),
        )
        self.terms.append(self.term)
        log.info("%s leads %s (term %d)", self.identity, self.lease, self.term)
        self._leading = True
        await self._while_ledger_away("recover from the ledger", self.controller.begin_leading)
        self.metrics.set_leader(self._lease_label, True)
        if self.jobs is not None:
            self.jobs.set_leader(True)

    async def _while_ledger_away(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        """``await call()``, retried with backoff (up to 2 s) while the ledger is unreachable."""
        delay, since = 0.2, None
        while True:
            try:
                result = await call()
            except Exception as e:
                if not is_outage(e):
                    raise
                if since is None:
                    since = time.monotonic()
                    log.warning("ledger unreachable (%s): cannot %s yet; retrying", short_reason(e), what)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            if since is not None:
                log.warning("ledger reachable again after %.1fs: %s done", time.monotonic() - since, what)
            return result

    async def _stopped_leading(self) -> None:
        was = self._leading
        self._leading = False
        if self.jobs is not None:
            self.jobs.set_leader(False)
        self.metrics.set_leader(self._lease_label, False)
        await self.controller.end_leading(graceful=True)
        if was and self.run_id is not None:
            await self.ledger.end_leader_term(self.run_id, lease=self.lease, at=self.clock())
            log.info("%s stopped leading %s", self.identity, self.lease)

    @property
    def leading(self) -> bool:
        return self._leading and self.controller.leading

    async def stop(self) -> None:
        """Graceful (SIGTERM): the current step finishes, the term ends, the Lease is released."""
        if self.elector is not None:
            await self.elector.stop(release=True)
            if self._elector_task is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await self._elector_task
                self._elector_task = None
        else:
            await self._stopped_leading()
        await self._close()

    async def kill(self) -> None:
        """A crash (tests): everything stops at once; the Lease is not released and expires."""
        if self._elector_task is not None:
            self._elector_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._elector_task
            self._elector_task = None
        self._leading = False
        await self.controller.end_leading(graceful=False)
        await self._close(stop_run=False)

    async def _close(self, stop_run: bool = True) -> None:
        await self.stall.stop()
        if self.jobs is not None:
            await self.jobs.shutdown(timeout=10.0)
        await self.controller.stop()
        if self.http is not None:
            await self.http.stop()
        if self.visibility is not None:
            await self.visibility.stop()
        if self.dashboard is not None:  # dashboard
            await self.dashboard.stop()
        if stop_run and self.run_id is not None:
            await self.ledger.stop_run(self.run_id, at=self.clock())
