"""A wedged controller is visible: ``/readyz`` fails and ``queueing_scheduling_stalled`` is 1 when the
leader completed no sync (and so no scheduling cycle) for ``health.schedulingStallTimeout`` while work is
pending; ``/healthz`` fails when the leader's sync loop has died.

The loop only runs when something changed, so an idle controller with an inadmissible workload may not
sync for hours, and that is healthy. To tell idle from wedged the watch *asks*: when work is pending and
no sync completed for half the timeout, it wakes the loop (as any watch event would) and the stall is
counted from that unanswered wake — a healthy loop answers within one sync, a loop that hangs or whose
every sync fails does not::

    watch = StallWatch(controller, metrics, timeout=config.health.scheduling_stall_timeout)
    http.add_ready_check("scheduling", watch.ready_check)
    http.add_health_check("sync-loop", watch.health_check)
    watch.start()  ...  await watch.stop()

The probes' texts say what is wrong without any exception text (no host, port or SQL).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator

from queueing.api.v1beta1 import FINISHED, Workload
from queueing.controller.controller import Controller
from queueing.controller.metrics import ControllerMetrics

__all__ = ["StallWatch"]

log = logging.getLogger("queueing.controller.health")


class StallWatch:
    def __init__(
        self,
        controller: Controller,
        metrics: ControllerMetrics,
        timeout: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        period: float | None = None,
        leading: Callable[[], bool] | None = None,
    ) -> None:
        self.controller = controller
        # whether this replica should be syncing (the elector's view: elected, even while its loop
        # cannot start, e.g. the ledger is away during its recovery); default the loop's own flag
        self.leading = leading or (lambda: controller.leading)
        self.metrics = metrics
        self.timeout = timeout
        self.clock = clock
        self.period = period if period is not None else max(0.05, min(5.0, timeout / 4))
        self._asked: float | None = None  # when the loop was woken and has not completed a sync since
        self._task: asyncio.Task[None] | None = None
        self.stall = 0.0

    def _pending(self) -> Iterator[Workload]:
        c = self.controller
        admitted = c.admitted
        return (
            w
            for w in c.workloads.list()
            if (w.metadata.uid or "") not in admitted
            and not w.status.is_true(FINISHED)
            and not w.metadata.deletion_timestamp
        )

    def pending_work(self) -> int:
        """Workloads that are neither admitted nor finished (what a sync would work on)."""
        return sum(1 for _ in self._pending())

    @property
    def waiting(self) -> int:
        """How many workloads wait now (0 when this replica is not leading): counted when asked (the
        probe's message), while each evaluation only asks whether one does."""
        return self.pending_work() if self.leading() else 0

    def loop_dead(self) -> bool:
        task = getattr(self.controller, "_task", None)
        return bool(self.controller.leading and task is not None and task.done())

    def evaluate(self) -> float:
        """Update the stall (seconds) and the metrics; wake the loop when it has to prove it answers."""
        c = self.controller
        now = self.clock()
        # whether any workload waits: the first one found answers it (a count of 15,000 Workloads
        # every period was 6 % of the controller's CPU under load)
        waiting = self.leading() and next(self._pending(), None) is not None
        last = c.last_sync_completed
        if not waiting:
            self._asked = None
        elif self._asked is not None and last is not None and last >= self._asked:
            self._asked = None  # answered
        if waiting and self._asked is None and (last is None or now - last >= self.timeout / 2):
            self._asked = now
            c.wake()
        self.stall = now - self._asked if self._asked is not None else 0.0
        if self.loop_dead():
            self.stall = max(self.stall, self.timeout)
        stalled = self.stall >= self.timeout
        self.metrics.set_stall(self.stall, stalled)
        return self.stall

    def ready_check(self) -> str | None:
        self.evaluate()
        if self.loop_dead():
            return "the sync loop stopped"
        if self.stall >= self.timeout:
            return (
                f"no scheduling cycle completed for {self.stall:.0f}s while {self.waiting} workload(s) wait"
            )
        return None

    def health_check(self) -> str | None:
        return "the sync loop stopped" if self.loop_dead() else None

    # ------------------------------------------------------------------ background evaluation
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="stall-watch")

    async def _run(self) -> None:
        while True:
            try:
                self.evaluate()
            except Exception as e:  # never let the watch itself die on a bad object
                log.warning("stall watch: %s", type(e).__name__)
            await asyncio.sleep(self.period)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
