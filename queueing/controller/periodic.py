"""The controller's periodic jobs on an APScheduler 3 ``AsyncIOScheduler``.

The controller hands over the callables; intervals come from the configuration::

    jobs = PeriodicJobs(config, metrics=metrics)
    jobs.add_usage_sampling(sample_and_decay)       # admissionFairSharing.usageSamplingInterval (leader)
    jobs.add_resync(resync)                          # resyncPeriod (every replica: warm caches)
    jobs.add_compaction(ledger)                      # ledger.compactionInterval / ledger.retention (leader)
    jobs.add_inadmissible_recheck(recheck)           # every 60 s, and on demand: jobs.trigger(...)
    jobs.add_heartbeat(lambda: ledger.heartbeat(run_id, at=now()))
    jobs.start()
    elector callbacks: jobs.set_leader(True) / jobs.set_leader(False)
    ...
    await jobs.shutdown()                            # no new runs; waits for the running ones

Jobs marked ``leader_only`` run only between ``set_leader(True)`` and ``set_leader(False)`` (they are
paused otherwise). Every job is a plain or coroutine function taking no arguments; one instance at a
time, missed runs coalesced into one; an exception is logged and counted (``stats``, the metric
``queueing_periodic_job_runs_total{result="error"}``) and the job keeps its schedule. ``trigger(id)``
runs a job as soon as possible (event-driven re-checks); a trigger while it runs makes it run once
more right after, so no event is lost.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.job import Job
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from queueing.config import Config
from queueing.controller.metrics import ControllerMetrics
from queueing.ledger.errors import is_outage, short_reason
from queueing.ledger.jobs import JOB_ID as COMPACTION_JOB_ID
from queueing.ledger.jobs import register_compaction
from queueing.ledger.repository import Ledger

__all__ = [
    "COMPACTION",
    "DEFAULT_HEARTBEAT_INTERVAL",
    "DEFAULT_RECHECK_INTERVAL",
    "DEFAULT_USAGE_SAMPLING_INTERVAL",
    "HEARTBEAT",
    "INADMISSIBLE_RECHECK",
    "RESYNC",
    "USAGE_SAMPLING",
    "JobStats",
    "PeriodicJobs",
]

log = logging.getLogger("queueing.controller.periodic")

USAGE_SAMPLING = "usage-sampling"
RESYNC = "resync"
COMPACTION = COMPACTION_JOB_ID  # "ledger-compaction"
INADMISSIBLE_RECHECK = "inadmissible-recheck"
HEARTBEAT = "heartbeat"

DEFAULT_USAGE_SAMPLING_INTERVAL = 300.0  # Kueue's usageSamplingInterval default (5m)
DEFAULT_RECHECK_INTERVAL = 60.0
DEFAULT_HEARTBEAT_INTERVAL = 30.0

JobFunc = Callable[[], Awaitable[Any] | Any]


@dataclass
class JobStats:
    runs: int = 0  # finished runs, successful or not
    errors: int = 0
    errors_in_a_row: int = 0
    last_error: str | None = None
    last_finished: datetime | None = None
    running: bool = False
    rerun: bool = False  # triggered while running: run again when done
    leader_only: bool = False
    every: float = 0.0
    _changed: asyncio.Event = field(default_factory=asyncio.Event, repr=False)


class PeriodicJobs:
    def __init__(
        self,
        config: Config,
        *,
        metrics: ControllerMetrics | None = None,
        scheduler: AsyncIOScheduler | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.scheduler = scheduler or AsyncIOScheduler(
            timezone=UTC,
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
        )
        self.stats: dict[str, JobStats] = {}
        self._leading = False
        self._running: set[asyncio.Task[Any]] = set()
        self._closing = False

    # ------------------------------------------------------------------ registering
    def add(self, job_id: str, fn: JobFunc, every: float, *, leader_only: bool) -> Job:
        """A job running ``fn`` every ``every`` seconds (first run one interval after start)."""
        if every <= 0:
            raise ValueError(f"periodic job {job_id}: interval must be greater than zero, got {every}")
        self.stats[job_id] = JobStats(leader_only=leader_only, every=every)
        kwargs: dict[str, Any] = {}
        if leader_only and not self._leading:
            kwargs["next_run_time"] = None  # added paused
        return self.scheduler.add_job(
            self._wrap(job_id, fn),
            "interval",
            seconds=every,
            id=job_id,
            name=job_id,
            replace_existing=True,
            max_instances=1,
            coalesce=True,
            misfire_grace_time=None,
            **kwargs,
        )

    def add_usage_sampling(self, fn: JobFunc, every: float | None = None) -> Job:
        """Sample the usage of admitted workloads and decay the history (admission fair sharing)."""
        afs = self.config.admission_fair_sharing
        if every is None:
            every = afs.usage_sampling_interval if afs is not None else DEFAULT_USAGE_SAMPLING_INTERVAL
        return self.add(USAGE_SAMPLING, fn, every, leader_only=True)

    def add_resync(self, fn: JobFunc) -> Job:
        """The full re-sync against the cluster, every ``resyncPeriod``, on every replica."""
        return self.add(RESYNC, fn, self.config.resync_period, leader_only=False)

    def add_compaction(
        self, ledger: Ledger, *, clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    ) -> Job:
        """Ledger compaction (``queueing.ledger.jobs``) with ``ledger.retention``/``compactionInterval``."""
        cfg = self.config.ledger
        job: Job = register_compaction(
            self.scheduler,
            ledger,
            older_than=timedelta(seconds=cfg.retention),
            every=timedelta(seconds=cfg.compaction_interval),
            clock=clock,
        )
        self.stats[COMPACTION] = JobStats(leader_only=True, every=cfg.compaction_interval)
        changes: dict[str, Any] = {"func": self._wrap(COMPACTION, job.func), "misfire_grace_time": None}
        if not self._leading:
            changes["next_run_time"] = None
        job = self.scheduler.modify_job(COMPACTION, **changes)
        return job

    def add_inadmissible_recheck(self, fn: JobFunc, every: float = DEFAULT_RECHECK_INTERVAL) -> Job:
        """Re-check inadmissible workloads (also call :meth:`trigger` when slices or quotas change)."""
        return self.add(INADMISSIBLE_RECHECK, fn, every, leader_only=True)

    def add_heartbeat(self, fn: JobFunc, every: float = DEFAULT_HEARTBEAT_INTERVAL) -> Job:
        """The ledger heartbeat of this controller run (every replica)."""
        return self.add(HEARTBEAT, fn, every, leader_only=False)

    # ------------------------------------------------------------------ running
    def _wrap(self, job_id: str, fn: JobFunc) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            st = self.stats[job_id]
            task = asyncio.current_task()
            if task is not None:
                self._running.add(task)
            st.running = True
            try:
                while True:
                    st.rerun = False
                    ok = True
                    try:
                        result = fn()
                        if inspect.isawaitable(result):
                            await result
                    except Exception as e:
                        ok = False
                        st.errors += 1
                        st.last_error = f"{type(e).__name__}: {e}"
                        if not is_outage(e):
                            log.exception("periodic job %s failed", job_id)
                        elif st.errors_in_a_row == 0:  # a ledger outage: one line, not one a run
                            log.warning("periodic job %s: ledger unreachable (%s)", job_id, short_reason(e))
                    if ok and st.errors_in_a_row:
                        log.info(
                            "periodic job %s succeeded again after %d failures", job_id, st.errors_in_a_row
                        )
                    st.errors_in_a_row = 0 if ok else st.errors_in_a_row + 1
                    st.runs += 1
                    st.last_finished = datetime.now(UTC)
                    if self.metrics is not None:
                        self.metrics.periodic_job_run(job_id, ok)
                    st._changed.set()
                    st._changed = asyncio.Event()
                    if not st.rerun or self._closing:
                        break
            finally:
                st.running = False
                if task is not None:
                    self._running.discard(task)

        run.__name__ = run.__qualname__ = f"periodic_{job_id.replace('-', '_')}"
        return run

    def trigger(self, job_id: str) -> bool:
        """Run the job as soon as possible; False if it is paused (leader-only, not leading)."""
        st = self.stats[job_id]
        if st.leader_only and not self._leading:
            return False
        if st.running:
            st.rerun = True
            return True
        self.scheduler.modify_job(job_id, next_run_time=datetime.now(UTC))
        return True

    async def wait_for_runs(self, job_id: str, runs: int, timeout: float = 10.0) -> JobStats:
        """Wait until ``job_id`` has finished ``runs`` runs in total (tests, startup sequencing)."""
        st = self.stats[job_id]
        async with asyncio.timeout(timeout):
            while st.runs < runs:
                await st._changed.wait()
        return st

    def set_leader(self, leading: bool) -> None:
        """Resume the leader-only jobs (their next run one interval from now) or pause them."""
        if leading == self._leading:
            return
        self._leading = leading
        for job_id, st in self.stats.items():
            if not st.leader_only:
                continue
            if leading:
                self.scheduler.resume_job(job_id)
            else:
                self.scheduler.pause_job(job_id)

    def next_run(self, job_id: str) -> datetime | None:
        job = self.scheduler.get_job(job_id)
        return None if job is None else job.next_run_time

    def start(self) -> None:
        """Start scheduling (needs a running event loop)."""
        self._closing = False
        self.scheduler.start()

    async def shutdown(self, timeout: float = 30.0) -> None:
        """Stop starting runs, wait up to ``timeout`` for the running ones, then stop the scheduler
        (runs still going after the timeout are cancelled)."""
        self._closing = True
        if not self.scheduler.running:
            return
        self.scheduler.pause()
        running = list(self._running)
        if running:
            _done, pending = await asyncio.wait(running, timeout=timeout)
            if pending:
                log.warning("periodic jobs still running after %ss are cancelled", timeout)
        self.scheduler.shutdown(wait=False)
        await asyncio.sleep(0)  # AsyncIOScheduler shuts down on the next loop iteration
