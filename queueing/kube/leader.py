"""Leader election with a coordination.k8s.io/v1 Lease, the way client-go's ``leaderelection`` does it.

One ``LeaderElector`` per replica, all naming the same Lease::

    elector = LeaderElector(kube, LeaderElectionSettings.from_config(config, identity=pod_name),
                            on_started_leading=..., on_stopped_leading=..., on_new_leader=...)
    task = asyncio.create_task(elector.run())   # acquire, lead, renew; re-join as a standby after a loss
    ...
    await elector.stop()                        # graceful: on_stopped_leading, then release the Lease

The protocol (client-go's ``tryAcquireOrRenew``):

* **Acquire** when the Lease does not exist (create it), has no holder (released), or has not changed
  for ``leaseDurationSeconds`` as measured by *this* replica's monotonic clock since it last saw the
  record change (``observed_time``). Wall-clock ``renewTime`` is written for people and other tools but
  never compared across machines, so clock skew does not matter (only clock *rate* does).
* Every write is a PUT carrying the ``resourceVersion`` read, so two candidates racing for an expired
  Lease cannot both win: the loser gets 409 Conflict, reads again and sees the winner as the holder.
* A takeover (holder changes) increments ``leaseTransitions`` and sets ``acquireTime``; a renewal
  keeps both.
* The leader renews every ``retry_period``; if no renewal has succeeded for ``renew_deadline`` (counted
  from the *start* of the last successful attempt) it steps down, before any standby can consider the
  Lease expired (``renew_deadline < lease_duration``). ``is_leader`` turns False at that moment even if
  the loop has not run yet, so code that checks it before acting never acts on a stale belief.
* ``stop()`` releases the Lease as client-go's ``ReleaseOnCancel``: ``holderIdentity`` cleared,
  ``leaseDurationSeconds: 1``; a standby takes it at its next attempt. A cancelled ``run()`` task
  (a crash) does not release: standbys take over once the Lease expires.

Time comes from a :class:`Clock` (``monotonic()``, ``now()``, ``sleep()``); tests pass a
:class:`ManualClock` and move time themselves.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import inspect
import itertools
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from kubernetes_asyncio.client.exceptions import ApiException

from queueing.api.core import Lease
from queueing.kube.client import LEASES, KubeClient

if TYPE_CHECKING:
    from queueing.config import Config

__all__ = [
    "Clock",
    "LeaderElectionSettings",
    "LeaderElector",
    "ManualClock",
    "SystemClock",
    "format_micro_time",
]

log = logging.getLogger("queueing.kube.leader")

Callback = Callable[..., Awaitable[None] | None]


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never jumps (measures staleness and deadlines)."""

    def now(self) -> datetime:
        """Wall-clock time (written into the Lease for people; never compared)."""

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def monotonic(self) -> float:
        return asyncio.get_running_loop().time()

    def now(self) -> datetime:
        return datetime.now(UTC)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class ManualClock:
    """A clock that moves only when told: ``advance(seconds)`` wakes the sleepers that are due.

    ``woken`` counts sleepers released by ``advance`` that have not resumed yet; together with
    :attr:`LeaderElector.waiting` a test can tell when every elector has finished reacting.
    """

    def __init__(self, start: datetime | None = None, monotonic: float = 1000.0) -> None:
        self._mono = monotonic
        self._mono0 = monotonic
        self._wall0 = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()
        self.woken = 0

    def monotonic(self) -> float:
        return self._mono

    def now(self) -> datetime:
        return self._wall0 + timedelta(seconds=self._mono - self._mono0)

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._mono + seconds, next(self._seq), fut))
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.woken -= 1  # released by advance(), cancelled before it resumed
            raise
        self.woken -= 1

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("time does not go backwards")
        self._mono += seconds
        while self._sleepers and self._sleepers[0][0] <= self._mono:
            _, _, fut = heapq.heappop(self._sleepers)
            if not fut.done():
                fut.set_result(None)
                self.woken += 1

    @property
    def sleepers(self) -> int:
        return sum(1 for _, _, f in self._sleepers if not f.done())


def format_micro_time(t: datetime) -> str:
    """Kubernetes ``MicroTime``: ``2026-01-01T00:00:00.000000Z``."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class LeaderElectionSettings:
    """What one elector needs; :meth:`from_config` takes it from the controller's configuration."""

    name: str
    namespace: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not self.identity:
            raise ValueError("leader election: identity must not be empty")
        if not (self.lease_duration > self.renew_deadline > self.retry_period > 0):
            raise ValueError(
                "leader election: need leaseDuration > renewDeadline > retryPeriod > 0, got "
                f"{self.lease_duration}, {self.renew_deadline}, {self.retry_period}"
            )

    @classmethod
    def from_config(cls, config: Config, identity: str) -> LeaderElectionSettings:
        le = config.leader_election
        return cls(
            name=le.resource_name,
            namespace=config.lease_namespace,
            identity=identity,
            lease_duration=le.lease_duration,
            renew_deadline=le.renew_deadline,
            retry_period=le.retry_period,
        )

    @property
    def lease_duration_seconds(self) -> int:
        """The whole seconds written into the Lease (at least 1)."""
        return max(1, math.ceil(self.lease_duration))


class LeaderElector:
    """Campaigns for one Lease; see the module docstring for the protocol.

    Callbacks may be plain functions or coroutine functions:

    * ``on_started_leading()`` runs as its own task once the Lease is ours (it may run long; it is
      cancelled if leadership is lost before it returns);
    * ``on_stopped_leading()`` is awaited when leadership ends: after a lost renewal (the
      ``on_started_leading`` task is cancelled first), or on ``stop()`` — then before that task is
      cancelled and before the Lease is released, so the controller can finish its current step;
    * ``on_new_leader(identity)`` is awaited whenever the observed holder changes (including to us).
    """

    def __init__(
        self,
        kube: KubeClient,
        settings: LeaderElectionSettings,
        *,
        on_started_leading: Callback | None = None,
        on_stopped_leading: Callback | None = None,
        on_new_leader: Callback | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.clock: Clock = clock or SystemClock()
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._on_new_leader = on_new_leader
        self._observed: Lease | None = None
        self._observed_spec: dict[str, Any] | None = None
        self._observed_time = 0.0  # monotonic time the record last changed (as seen by us)
        self._leading = False
        self._last_renew = -math.inf  # monotonic start of the last successful acquire/renew
        self._reported_leader: str | None = None
        self._stopping = asyncio.Event()
        self._started_task: asyncio.Task[Any] | None = None
        self._run_task: asyncio.Task[Any] | None = None
        self._interrupting = False
        self.waiting = False  # True while sleeping between attempts (tests use it)
        self.attempts = 0  # acquire/renew attempts made
        self.terms = 0  # how many times this elector became leader

    # ------------------------------------------------------------------ state
    @property
    def identity(self) -> str:
        return self.settings.identity

    @property
    def is_leader(self) -> bool:
        """We hold the Lease and our last successful renewal is younger than ``renew_deadline``."""
        return self._leading and self.clock.monotonic() - self._last_renew < self.settings.renew_deadline

    @property
    def leader(self) -> str | None:
        """The holder as last observed (None when released or never seen)."""
        if self._observed is None:
            return None
        return self._observed.spec.holder_identity or None

    @property
    def observed_lease(self) -> Lease | None:
        return self._observed

    # ------------------------------------------------------------------ one attempt
    async def try_acquire_or_renew(self) -> bool:
        """One round of client-go's ``tryAcquireOrRenew``: True when the Lease is ours after it."""
        self.attempts += 1
        for attempt in range(2):  # a 409 means someone wrote in between: read again at once, once
            try:
                return await self._attempt(use_cache=attempt == 0)
            except ApiException as e:
                if e.status != 409:
                    log.warning("lease %s: %s %s", self._key(), e.status, e.reason)
                    return False
                log.debug("lease %s: conflict, reading it again", self._key())
        return False

    async def _attempt(self, use_cache: bool) -> bool:
        s = self.settings
        now = self.clock.now()
        if use_cache and self._leading and self._observed is not None and self.is_leader:
            # fast path (client-go >= 1.30): renew from the cached object; a 409 falls back to a GET
            updated = await self.kube.replace(LEASES, self._record(self._observed, now), s.namespace)
            await self._observe(Lease.parse(updated))
            return True
        try:
            raw = await self.kube.get(LEASES, s.name, s.namespace)
        except ApiException as e:
            if e.status != 404:
                raise
            body = {
                "apiVersion": Lease.API_VERSION,
                "kind": Lease.KIND,
                "metadata": {"name": s.name, "namespace": s.namespace},
                "spec": self._spec(now, acquire_time=format_micro_time(now), transitions=0),
            }
            try:
                created = await self.kube.create(LEASES, body, s.namespace)
            except ApiException as ce:
                if ce.status == 409:  # AlreadyExists: another candidate created it first
                    return False
                raise
            await self._observe(Lease.parse(created))
            return True
        lease = Lease.parse(raw)
        await self._observe(lease)
        holder = lease.spec.holder_identity or ""
        if holder and holder != s.identity and not self._expired(lease):
            return False
        updated = await self.kube.replace(LEASES, self._record(lease, now), s.namespace)
        await self._observe(Lease.parse(updated))
        return True

    def _expired(self, lease: Lease) -> bool:
        duration = lease.spec.lease_duration_seconds or 0
        return self._observed_time + duration <= self.clock.monotonic()

    def _spec(self, now: datetime, *, acquire_time: str | None, transitions: int) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "holderIdentity": self.settings.identity,
            "leaseDurationSeconds": self.settings.lease_duration_seconds,
            "renewTime": format_micro_time(now),
            "leaseTransitions": transitions,
        }
        if acquire_time is not None:
            spec["acquireTime"] = acquire_time
        return spec

    def _record(self, lease: Lease, now: datetime) -> dict[str, Any]:
        """The PUT body making us the holder (renewal keeps acquireTime and transitions)."""
        old = lease.spec
        transitions = old.lease_transitions or 0
        if old.holder_identity == self.settings.identity:
            spec = self._spec(now, acquire_time=old.acquire_time, transitions=transitions)
        else:
            spec = self._spec(now, acquire_time=format_micro_time(now), transitions=transitions + 1)
        body = lease.to_dict()
        body["spec"] = {**(body.get("spec") or {}), **spec}
        return body

    async def _observe(self, lease: Lease) -> None:
        spec = lease.spec.to_dict()
        if spec != self._observed_spec:
            self._observed_spec = spec
            self._observed_time = self.clock.monotonic()
        self._observed = lease
        holder = lease.spec.holder_identity or None
        if holder != self._reported_leader:
            self._reported_leader = holder
            if holder is not None and self._on_new_leader is not None:
                await self._call(self._on_new_leader, holder)

    def _key(self) -> str:
        return f"{self.settings.namespace}/{self.settings.name}"

    # ------------------------------------------------------------------ the loop
    async def run(self) -> None:
        """Campaign until :meth:`stop`: acquire, lead while renewals succeed, then campaign again.

        Cancelling the task running this is a crash: no callback, no release (the Lease expires).
        """
        self._stopping.clear()
        self._run_task = asyncio.current_task()
        try:
            while not self._stopping.is_set():
                if not await self._acquire():
                    break
                await self._lead()
        except asyncio.CancelledError:
            if self._leading:
                self._leading = False
                self._cancel_started()
            raise
        finally:
            self.waiting = False
            self._run_task = None

    async def stop(self, release: bool = True) -> None:
        """Graceful end: wait for an attempt in flight, ``on_stopped_leading`` (awaited), release."""
        self._stopping.set()
        task = self._run_task
        if task is not None and task is not asyncio.current_task() and not task.done():
            if self.waiting:
                self._interrupting = True
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._leading:
            await self._step_down("shutting down", graceful=True)
            if release:
                await self.release()

    async def release(self) -> bool:
        """Give the Lease up now (client-go ReleaseOnCancel): clear the holder, duration 1s.

        A 409 (our cached copy is stale) reads the Lease again and retries once if it is still ours.
        """
        for _ in range(2):
            lease = self._observed
            if lease is None or lease.spec.holder_identity != self.settings.identity:
                return False
            now = format_micro_time(self.clock.now())
            body = lease.to_dict()
            spec = {k: v for k, v in (body.get("spec") or {}).items() if k != "holderIdentity"}
            spec.update(leaseDurationSeconds=1, renewTime=now, acquireTime=now)
            body["spec"] = spec
            try:
                updated = await self.kube.replace(LEASES, body, self.settings.namespace)
            except ApiException as e:
                if e.status == 409:
                    try:
                        raw = await self.kube.get(LEASES, self.settings.name, self.settings.namespace)
                    except ApiException:
                        return False
                    await self._observe(Lease.parse(raw))
                    continue
                log.warning("lease %s: release failed: %s %s", self._key(), e.status, e.reason)
                return False
            await self._observe(Lease.parse(updated))
            log.info("lease %s: released by %s", self._key(), self.identity)
            return True
        return False

    async def _acquire(self) -> bool:
        """Attempt every ``retry_period`` until the Lease is ours (True) or we are stopped (False)."""
        while not self._stopping.is_set():
            start = self.clock.monotonic()
            if await self._bounded(self.try_acquire_or_renew(), self.settings.renew_deadline):
                self._last_renew = start
                return True
            if not await self._pause(self.settings.retry_period):
                return False
        return False

    async def _lead(self) -> None:
        s = self.settings
        self._leading = True
        self.terms += 1
        log.info("lease %s: %s became leader", self._key(), self.identity)
        if self._on_started is not None:
            self._started_task = asyncio.create_task(self._call(self._on_started))
        while self._leading:
            if not await self._pause(s.retry_period):
                return  # stop(): it steps down and releases
            ok = False
            while not self._stopping.is_set():
                remaining = self._last_renew + s.renew_deadline - self.clock.monotonic()
                if remaining <= 0:
                    break
                start = self.clock.monotonic()
                ok = await self._bounded(self.try_acquire_or_renew(), remaining)
                if ok:
                    self._last_renew = start
                    break
                if self.leader not in (None, s.identity) and self._observed is not None:
                    break  # someone else holds it (it expired for them): no point retrying
                remaining = self._last_renew + s.renew_deadline - self.clock.monotonic()
                if not await self._pause(min(s.retry_period, max(remaining, 0.0))):
                    return
            if self._stopping.is_set():
                return
            if not ok:
                await self._step_down("failed to renew within the renew deadline")

    async def _step_down(self, why: str, graceful: bool = False) -> None:
        """Leadership ends. Lost: cancel ``on_started_leading`` at once, then ``on_stopped_leading``.
        Graceful (``stop()``): ``on_stopped_leading`` first, so the controller can finish its step,
        then whatever ``on_started_leading`` still runs is cancelled."""
        if not self._leading:
            return
        self._leading = False
        if graceful:
            log.info("lease %s: %s stops leading: %s", self._key(), self.identity, why)
        else:
            log.warning("lease %s: %s stopped leading: %s", self._key(), self.identity, why)
            await self._cancel_started_and_wait()
        if self._on_stopped is not None:
            await self._call(self._on_stopped)
        await self._cancel_started_and_wait()

    def _cancel_started(self) -> None:
        if self._started_task is not None and not self._started_task.done():
            self._started_task.cancel()

    async def _cancel_started_and_wait(self) -> None:
        task, self._started_task = self._started_task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _pause(self, seconds: float) -> bool:
        """Sleep on the clock unless stopped first; False when stopped.

        The sleep is awaited inline (not in a helper task), so when a :class:`ManualClock` wakes it
        the loop resumes in the same step; ``stop()`` interrupts it by cancelling the run task while
        ``waiting`` is set, which is caught here.
        """
        if self._stopping.is_set():
            return False
        if seconds <= 0:
            return True
        self.waiting = True
        try:
            await self.clock.sleep(seconds)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self._interrupting and task is not None:
                self._interrupting = False
                task.uncancel()
                return False
            raise
        finally:
            self.waiting = False
        return not self._stopping.is_set()

    async def _bounded(self, attempt: Awaitable[bool], seconds: float) -> bool:
        """The attempt's result, or False if it takes longer than ``seconds`` on our clock."""
        task = asyncio.ensure_future(attempt)
        timer = asyncio.ensure_future(self.clock.sleep(seconds))
        try:
            await asyncio.wait({task, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (timer, task):
                if not t.done():
                    t.cancel()
            await asyncio.gather(timer, task, return_exceptions=True)
        if task.cancelled():
            log.warning("lease %s: request timed out", self._key())
            return False
        exc = task.exception()
        if exc is not None:  # connection errors and the like: a failed attempt
            log.warning("lease %s: %s", self._key(), exc)
            return False
        return task.result()

    async def _call(self, fn: Callback, *args: Any) -> None:
        try:
            result = fn(*args)
            if inspect.isawaitable(result):
                await result
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("lease %s: leader election callback %r failed", self._key(), fn)
