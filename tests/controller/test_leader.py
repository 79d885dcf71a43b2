"""Lease-based leader election against the API emulator through the real kubernetes-asyncio client.

Time is a ManualClock the tests move by hand: every elector sleeps on it, so a round is "advance the
clock, then wait until every elector is back asleep" (``settle``), never a wall-clock sleep.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from queueing.api.core import Lease
from queueing.config import Config
from queueing.kube.client import LEASES, KubeClient, api_client_for_url
from queueing.kube.leader import LeaderElectionSettings, LeaderElector, ManualClock
from queueing.testing import Emulator, run_emulator

CRDS = Path(__file__).resolve().parents[2] / "crds"
NS = "default"
NAME = "queueing-controller"


@pytest.fixture
async def emu() -> AsyncIterator[Emulator]:
    async with run_emulator(crds_dir=CRDS, bookmark_interval=None) as e:
        yield e


@pytest.fixture
async def kube(emu: Emulator) -> AsyncIterator[KubeClient]:
    api = api_client_for_url(emu.url, token="admin-token")
    try:
        yield KubeClient(api, timeout=10)
    finally:
        await api.close()


async def eventually(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        await asyncio.sleep(0.001)


def settings(identity: str, lease: float = 15, renew: float = 10, retry: float = 2) -> LeaderElectionSettings:
    return LeaderElectionSettings(
        name=NAME,
        namespace=NS,
        identity=identity,
        lease_duration=lease,
        renew_deadline=renew,
        retry_period=retry,
    )


class Replica:
    """An elector plus a record of its callbacks."""

    def __init__(self, kube: KubeClient, clock: ManualClock, identity: str, **kw: float) -> None:
        self.events: list[tuple[str, float, str]] = []
        self.clock = clock
        self.started = asyncio.Event()
        self.stopped = asyncio.Event()
        self.elector = LeaderElector(
            kube,
            settings(identity, **kw),
            on_started_leading=self._started,
            on_stopped_leading=self._stopped,
            on_new_leader=self._new_leader,
            clock=clock,
        )
        self.task: asyncio.Task[None] | None = None

    async def _started(self) -> None:
        self.events.append(("started", self.clock.monotonic(), ""))
        self.started.set()

    def _stopped(self) -> None:
        self.events.append(("stopped", self.clock.monotonic(), ""))
        self.stopped.set()

    def _new_leader(self, who: str) -> None:
        self.events.append(("leader", self.clock.monotonic(), who))

    def start(self) -> None:
        self.task = asyncio.create_task(self.elector.run())

    def kill(self) -> None:
        assert self.task is not None
        self.task.cancel()

    @property
    def idle(self) -> bool:
        return self.task is None or self.task.done() or self.elector.waiting


async def settle(clock: ManualClock, *replicas: Replica) -> None:
    """Wait until every woken elector has done its work and sleeps again."""
    await eventually(lambda: clock.woken == 0 and all(r.idle for r in replicas), "electors to settle")


async def step(clock: ManualClock, seconds: float, *replicas: Replica) -> None:
    clock.advance(seconds)
    await settle(clock, *replicas)


async def read_lease(kube: KubeClient) -> Lease:
    return Lease.parse(await kube.get(LEASES, NAME, NS))


async def test_first_candidate_creates_the_lease_and_the_other_stands_by(kube: KubeClient) -> None:
    clock = ManualClock()
    a = Replica(kube, clock, "a")
    a.start()
    await settle(clock, a)
    assert a.elector.is_leader
    b = Replica(kube, clock, "b")
    b.start()
    await settle(clock, a, b)
    assert not b.elector.is_leader
    assert b.elector.leader == "a"
    lease = await read_lease(kube)
    assert lease.spec.holder_identity == "a"
    assert lease.spec.lease_duration_seconds == 15
    assert lease.spec.lease_transitions == 0
    assert lease.spec.acquire_time == lease.spec.renew_time == "2026-01-01T00:00:00.000000Z"
    # renewals move renewTime with the clock and keep acquireTime
    await step(clock, 2, a, b)
    lease = await read_lease(kube)
    assert lease.spec.renew_time == "2026-01-01T00:00:02.000000Z"
    assert lease.spec.acquire_time == "2026-01-01T00:00:00.000000Z"
    assert b.events == [("leader", 1000.0, "a")]
    assert [e[0] for e in a.events] == ["leader", "started"]
    for r in (a, b):
        await r.elector.stop()


async def test_two_electors_never_both_lead_over_many_rounds(emu: Emulator, kube: KubeClient) -> None:
    clock = ManualClock()
    a = Replica(kube, clock, "a")
    b = Replica(kube, clock, "b")
    a.start()
    b.start()
    await settle(clock, a, b)
    leaders_seen: set[str] = set()

    async def rounds(n: int, dt: float) -> None:
        for _ in range(n):
            await step(clock, dt, a, b)
            assert not (a.elector.is_leader and b.elector.is_leader), f"both lead at {clock.monotonic()}"
            lease = await read_lease(kube)
            for r in (a, b):
                if r.elector.is_leader:
                    # whoever believes it leads is the holder recorded in the API server
                    assert lease.spec.holder_identity == r.elector.identity
                    leaders_seen.add(r.elector.identity)

    await rounds(60, 0.7)  # steady state: one leader renewing, one standby
    (first,) = leaders_seen
    leader, standby = (a, b) if first == "a" else (b, a)
    # every lease update fails (500) for 15 s: the leader steps down at its renew deadline and nobody
    # leads meanwhile (the standby's takeover attempt fails too)
    emu.faults.fail_next(500, verb="update", resource="leases", count=10**6)
    await rounds(15, 1.0)
    assert leader.stopped.is_set()
    assert not a.elector.is_leader and not b.elector.is_leader
    emu.faults.clear()
    await rounds(5, 1.0)
    assert a.elector.is_leader or b.elector.is_leader
    # the current leader dies: the other takes over after the lease duration
    dead, survivor = (a, b) if a.elector.is_leader else (b, a)
    dead.kill()
    await eventually(lambda: dead.task is not None and dead.task.done(), "the leader to die")
    await rounds(25, 1.0)
    assert survivor.elector.is_leader
    assert leaders_seen == {"a", "b"}
    lease = await read_lease(kube)
    assert lease.spec.holder_identity == survivor.elector.identity
    assert lease.spec.lease_transitions >= 1
    # on the survivor's side: every "started" follows the other's last "stopped" or its death
    (stopped_at,) = [t for kind, t, _ in leader.events if kind == "stopped"]
    assert all(t > stopped_at for kind, t, _ in standby.events if kind == "started")
    await survivor.elector.stop()


async def test_renew_failures_past_the_deadline_step_down(emu: Emulator, kube: KubeClient) -> None:
    clock = ManualClock()
    a = Replica(kube, clock, "a")
    a.start()
    await settle(clock, a)
    assert a.elector.is_leader
    emu.faults.fail_next(500, verb="update", resource="leases", count=10**6)
    t0 = clock.monotonic()  # the last successful renewal started here
    # 500s within the deadline are retried and leadership is kept
    for _ in range(4):
        await step(clock, 2, a)
        assert a.elector.is_leader
    assert not a.stopped.is_set()
    await step(clock, 2, a)  # t0 + 10 = renewDeadline
    assert not a.elector.is_leader
    assert a.stopped.is_set()
    assert [t for kind, t, _ in a.events if kind == "stopped"] == [t0 + 10]
    # it never wrote: the API server still names it, and it keeps campaigning as a standby
    assert (await read_lease(kube)).spec.holder_identity == "a"
    assert emu.faults.injected >= 5
    emu.faults.clear()
    await step(clock, 2, a)
    # its own identity in the Lease: it takes it back without waiting for expiry, same term count
    assert a.elector.is_leader
    assert a.elector.terms == 2
    assert (await read_lease(kube)).spec.lease_transitions == 0
    await a.elector.stop()


async def test_killed_leader_is_taken_over_after_the_lease_duration(kube: KubeClient) -> None:
    clock = ManualClock()
    a = Replica(kube, clock, "a")
    b = Replica(kube, clock, "b")
    a.start()
    await settle(clock, a)
    b.start()
    await settle(clock, a, b)
    assert a.elector.is_leader
    assert b.elector.leader == "a"  # b observed a's record at 1000
    a.kill()  # no release, no callback
    await eventually(lambda: a.task is not None and a.task.done(), "a to die")
    assert not a.stopped.is_set()
    assert (await read_lease(kube)).spec.holder_identity == "a"
    # b may take over once it has seen no change for 15 s (since 1000), not before
    for _ in range(7):
        await step(clock, 2, a, b)  # up to 1014
        assert not b.elector.is_leader
    await step(clock, 2, a, b)  # 1016 >= 1000 + 15
    assert b.elector.is_leader
    lease = await read_lease(kube)
    assert lease.spec.holder_identity == "b"
    assert lease.spec.lease_transitions == 1
    assert lease.spec.acquire_time == "2026-01-01T00:00:16.000000Z"
    assert ("leader", 1016.0, "b") in b.events
    await b.elector.stop()


async def test_graceful_release_hands_over_at_once(kube: KubeClient) -> None:
    clock = ManualClock()
    a = Replica(kube, clock, "a")
    b = Replica(kube, clock, "b")
    a.start()
    await settle(clock, a)
    b.start()
    await settle(clock, a, b)
    await a.elector.stop()
    assert a.stopped.is_set()
    assert not a.elector.is_leader
    lease = await read_lease(kube)
    assert lease.spec.holder_identity is None
    assert lease.spec.lease_duration_seconds == 1
    # b's next attempt, one retry period later, takes it: no lease-duration wait
    await step(clock, 2, b)
    assert b.elector.is_leader
    lease = await read_lease(kube)
    assert lease.spec.holder_identity == "b"
    assert lease.spec.lease_duration_seconds == 15
    assert lease.spec.lease_transitions == 1
    await b.elector.stop()


async def test_stop_waits_for_on_stopped_leading_before_releasing(kube: KubeClient) -> None:
    clock = ManualClock()
    holders_during_callback: list[str | None] = []

    async def finish_current_step() -> None:
        holders_during_callback.append((await read_lease(kube)).spec.holder_identity)

    elector = LeaderElector(kube, settings("a"), on_stopped_leading=finish_current_step, clock=clock)
    task = asyncio.create_task(elector.run())
    await eventually(lambda: elector.waiting, "a to lead")
    assert elector.is_leader
    await elector.stop()
    assert holders_during_callback == ["a"]  # the Lease was still ours while the controller finished
    assert (await read_lease(kube)).spec.holder_identity is None
    await task  # run() has returned


async def test_leading_work_is_cancelled_when_lost_and_finishes_its_step_on_stop(
    emu: Emulator, kube: KubeClient
) -> None:
    clock = ManualClock()
    log: list[str] = []
    step_may_end = asyncio.Event()

    async def work() -> None:  # the controller's leader loop, started by on_started_leading
        try:
            log.append("work started")
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            log.append("work cancelled")
            raise

    async def finish() -> None:
        log.append("stopping")
        await step_may_end.wait()
        log.append("step finished")

    elector = LeaderElector(
        kube, settings("a"), on_started_leading=work, on_stopped_leading=finish, clock=clock
    )
    task = asyncio.create_task(elector.run())
    await eventually(lambda: elector.waiting and log == ["work started"], "a to lead")
    # lost: the work is cancelled before on_stopped_leading
    step_may_end.set()
    emu.faults.fail_next(500, verb="update", resource="leases", count=10**6)
    for _ in range(5):
        clock.advance(2)
        await eventually(lambda: clock.woken == 0 and elector.waiting, "a to settle")
    assert log == ["work started", "work cancelled", "stopping", "step finished"]
    emu.faults.clear()
    # it leads again at its next attempt (the Lease still names it)
    log.clear()
    step_may_end.clear()
    clock.advance(2)
    await eventually(lambda: elector.waiting and log == ["work started"], "a to lead again")
    # graceful: on_stopped_leading runs while the work is still alive, then the work is cancelled
    stopping = asyncio.create_task(elector.stop())
    await eventually(lambda: log == ["work started", "stopping"], "stop to begin")
    assert (await read_lease(kube)).spec.holder_identity == "a"
    step_may_end.set()
    await stopping
    assert log == ["work started", "stopping", "step finished", "work cancelled"]
    assert (await read_lease(kube)).spec.holder_identity is None
    await task


async def test_conflicts_are_retried(emu: Emulator, kube: KubeClient) -> None:
    clock = ManualClock()
    a = Replica(kube, clock, "a")
    a.start()
    await settle(clock, a)
    # a renewal conflicts (someone touched the Lease): a reads it again and renews in the same round
    emu.faults.fail_next(409, verb="update", resource="leases")
    await step(clock, 2, a)
    assert emu.faults.injected == 1
    assert a.elector.is_leader
    assert (await read_lease(kube)).spec.renew_time == "2026-01-01T00:00:02.000000Z"
    # a real concurrent write: someone else bumps the Lease (same holder), a's cached copy is stale
    raw = await kube.get(LEASES, NAME, NS)
    raw["metadata"].setdefault("labels", {})["touched"] = "yes"
    await kube.replace(LEASES, raw, NS)
    await step(clock, 2, a)
    assert a.elector.is_leader
    lease = await read_lease(kube)
    assert lease.spec.renew_time == "2026-01-01T00:00:04.000000Z"
    assert lease.metadata.labels == {"touched": "yes"}  # a's write kept what it did not own
    await a.elector.stop()


async def test_a_leader_that_finds_another_holder_steps_down_at_once(kube: KubeClient) -> None:
    clock = ManualClock()
    a = Replica(kube, clock, "a")
    a.start()
    await settle(clock, a)
    # someone (an operator, a replica with a skewed view) writes itself into the Lease
    raw = await kube.get(LEASES, NAME, NS)
    raw["spec"]["holderIdentity"] = "intruder"
    await kube.replace(LEASES, raw, NS)
    await step(clock, 2, a)  # the renewal conflicts, a reads the Lease: not ours any more
    assert not a.elector.is_leader
    assert a.stopped.is_set()
    assert [t for kind, t, _ in a.events if kind == "stopped"] == [1002.0]  # not at the deadline
    assert a.elector.leader == "intruder"
    assert ("leader", 1002.0, "intruder") in a.events
    # the standby it became does not release someone else's Lease on stop
    await a.elector.stop()
    assert (await read_lease(kube)).spec.holder_identity == "intruder"


async def test_racing_candidates_for_an_expired_lease_one_wins(kube: KubeClient) -> None:
    clock = ManualClock()
    # an expired Lease held by a dead replica
    await kube.create(
        LEASES,
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": NAME, "namespace": NS},
            "spec": {"holderIdentity": "dead", "leaseDurationSeconds": 15, "leaseTransitions": 4},
        },
    )
    electors = [LeaderElector(kube, settings(f"c{i}"), clock=clock) for i in range(4)]
    # every candidate observes the record now ...
    assert not any(await asyncio.gather(*(e.try_acquire_or_renew() for e in electors)))
    clock.advance(15)
    # ... and 15 s later they all try at once: exactly one PUT wins, the others get 409 and see it
    results = await asyncio.gather(*(e.try_acquire_or_renew() for e in electors))
    assert sum(results) == 1
    winner = electors[results.index(True)].identity
    assert {e.leader for e in electors} == {winner}
    lease = await read_lease(kube)
    assert lease.spec.holder_identity == winner
    assert lease.spec.lease_transitions == 5


async def test_a_hanging_renewal_counts_against_the_deadline(emu: Emulator, kube: KubeClient) -> None:
    clock = ManualClock()
    a = Replica(kube, clock, "a")
    a.start()
    await settle(clock, a)
    # the API server stops answering lease updates (the response never comes in test time)
    emu.faults.add_latency(3600, verb="update", resource="leases")
    clock.advance(2)
    await eventually(lambda: clock.sleepers >= 1 and not a.elector.waiting, "a renewal in flight")
    assert a.elector.is_leader
    clock.advance(8)  # 10 s since the last good renewal: the request is abandoned, a steps down
    await a.stopped.wait()
    assert not a.elector.is_leader
    emu.faults.clear()
    a.kill()


def test_settings_from_config_and_validation() -> None:
    cfg = Config(namespace="ops", leader_election={"lease_duration": "30s", "renew_deadline": "20s"})
    s = LeaderElectionSettings.from_config(cfg, identity="pod-0")
    assert (s.name, s.namespace, s.lease_duration, s.renew_deadline, s.retry_period) == (
        "queueing-controller",
        "ops",
        30.0,
        20.0,
        2.0,
    )
    assert LeaderElectionSettings("l", "ns", "x", lease_duration=1.5, renew_deadline=1, retry_period=0.2)
    with pytest.raises(ValueError, match="identity"):
        LeaderElectionSettings("l", "ns", "")
    with pytest.raises(ValueError, match="leaseDuration > renewDeadline"):
        LeaderElectionSettings("l", "ns", "x", lease_duration=5, renew_deadline=10)


async def test_real_clock_handover(kube: KubeClient) -> None:
    """The system clock path, with short durations: events, no sleeps in the test."""
    started: dict[str, asyncio.Event] = {n: asyncio.Event() for n in ("a", "b")}
    fast = {"lease": 10, "renew": 5, "retry": 0.05}  # handover is by release: no expiry waits
    a = LeaderElector(kube, settings("a", **fast), on_started_leading=started["a"].set)
    ta = asyncio.create_task(a.run())
    await asyncio.wait_for(started["a"].wait(), 10)
    b = LeaderElector(kube, settings("b", **fast), on_started_leading=started["b"].set)
    tb = asyncio.create_task(b.run())
    await eventually(lambda: b.leader == "a", "b to see a")
    assert not b.is_leader
    await a.stop()
    await ta
    await asyncio.wait_for(started["b"].wait(), 10)
    assert b.is_leader and not a.is_leader
    await b.stop()
    await tb
