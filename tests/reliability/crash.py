"""Crash-consistency harness: the controller against the API emulator and a ledger, killed at fault
points chosen by a seeded RNG, restarted, and checked after convergence.

One seed is one run: a random mix of Jobs (1, 2 or 4 GPUs, one or two pods, low/mid/high priority)
arrives on a 2-node x 4-GPU cluster with a quota of 8 GPUs, so admissions, plan binding, preemption
(eviction) and finishes all happen. The controller's fault points (queueing/faults.py) are armed: at
the K-th hit chosen by the RNG the point raises :class:`SimulatedCrash` inside the controller's task,
and the harness kills that controller at once (its task is dropped, no graceful step, no cleanup; the
informers and the client are thrown away), then starts a fresh one against the same ledger.

Checked at every poll (safety): at most one active ledger admission per workload, ledger usage within
the quota and equal to the sum of active charges, no device in two allocated ResourceClaims nor in two
active ledger admissions, no Job with more live pods than its parallelism.
Checked at every quiet point (agreement): the ledger's active admissions == the Workloads with
QuotaReserved == the Jobs running (unsuspended, all admitted pods Running on their planned nodes);
every other unfinished Job is suspended with no live pod.
At the end (liveness): every Job completed, every Workload Finished, no active admission, zero usage,
and a workload's admissions never overlap in time.

    python -m tests.reliability.crash --seeds 50 [--first 0] [--kills 1]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import random
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import text

from queueing import faults
from queueing.config import Config
from queueing.controller.controller import Controller
from queueing.kube.client import JOBS, KubeClient, api_client_for_url
from queueing.ledger.migrate import upgrade_async
from queueing.ledger.repository import Ledger
from queueing.testing import Emulator, run_emulator
from queueing.testing.cluster import JOB_NAME_LABEL, StandIns, suspend_queued_jobs
from tests.controller.conftest import CRDS, ManualTime, cluster_objects
from tests.controller.test_eviction import prio_job, priority_classes

TOKEN = "crash-harness"
NOMINAL = 8
SETTLE_TIMEOUT = 30.0


def crash_config() -> Config:
    return Config(
        wait_for_pods_ready={
            "enable": False,
            "requeuing_strategy": {"backoff_base_seconds": 1, "backoff_max_seconds": 4},
        }
    )


@dataclass
class RunResult:
    seed: int
    crashes: list[str] = field(default_factory=list)  # fault points where the controller was killed
    jobs: int = 0
    admissions: int = 0
    evictions: int = 0
    seconds: float = 0.0


class InvariantError(AssertionError):
    pass


def _live(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def _true(obj: dict[str, Any] | None, type_: str) -> bool:
    return any(
        c.get("type") == type_ and c.get("status") == "True"
        for c in ((obj or {}).get("status") or {}).get("conditions") or []
    )


class CrashRun:
    def __init__(self, seed: int, kills: int = 1, db_dir: Path | None = None) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.kills = kills
        self.db_dir = db_dir
        self.clock = ManualTime()
        self.result = RunResult(seed)
        self.controller: Controller | None = None
        self._api: Any = None
        self._hits = 0
        self._point_hits: Counter[str] = Counter()
        self._crash_at = self._next_crash_at()
        self._crashed = asyncio.Event()

    def _next_crash_at(self) -> tuple[str | None, int] | None:
        """Half the kills at the N-th fault point reached (any), half at the N-th hit of one named
        point (so the rarer eviction and finish steps are hit too)."""
        if len(self.result.crashes) >= self.kills:
            return None
        if self.rng.random() < 0.5:
            return None, self._hits + self.rng.randint(1, 40)
        point = self.rng.choice(faults.POINTS)
        return point, self._point_hits[point] + self.rng.randint(1, 2)

    # ------------------------------------------------------------------ fault hook
    def _hook(self, point: str) -> None:
        self._hits += 1
        self._point_hits[point] += 1
        at = self._crash_at
        if at is not None and (
            (at[0] is None and self._hits >= at[1]) or (at[0] == point and self._point_hits[point] >= at[1])
        ):
            self.result.crashes.append(point)
            self._crash_at = None  # re-armed after the restart
            self._crashed.set()
            raise faults.SimulatedCrash(point)

    # ------------------------------------------------------------------ controller lifecycle
    async def _start(self) -> None:
        while True:
            self._api = api_client_for_url(self.emu.url, token=TOKEN)
            self.controller = Controller(
                KubeClient(self._api, timeout=5.0),
                self.ledger,
                crash_config(),
                clock=self.clock,
                eviction_timeout=1e9,
                retry_backoff=0.05,
            )
            try:
                await self.controller.start()
                return
            except faults.SimulatedCrash:  # a fault point during recovery: killed while starting
                await self._kill()

    async def _kill(self) -> None:
        """SIGKILL, in process: the task is dropped where it is; nothing graceful runs."""
        c, self.controller = self.controller, None
        if c is not None:
            c.leading = False
            task, c._task = c._task, None
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, faults.SimulatedCrash):
                    await task
            for h in (c._retry_handle, c._queue_status_handle, *c._timer_handles.values()):
                if h is not None:
                    h.cancel()
            for i in c.informers:
                await i.stop()
        if self._api is not None:
            await self._api.close()
            self._api = None

    async def _supervise(self) -> None:
        while True:
            await self._crashed.wait()
            self._crashed.clear()
            await self._kill()
            self._crash_at = self._next_crash_at()
            await self._start()

    # ------------------------------------------------------------------ observations
    def _items(self, plural: str, group: str = "") -> list[dict[str, Any]]:
        return self.emu.store.list(self.emu.store.resource(plural, group), None, None)[0]

    async def _ledger_rows(self) -> list[Any]:
        async with self.ledger.engine.connect() as c:
            return list(
                (
                    await c.execute(
                        text(
                            "SELECT a.workload_uid, a.admitted_at_ms, a.released_at_ms, a.release_reason "
                            "FROM admissions a ORDER BY a.workload_uid, a.attempt"
                        )
                    )
                ).all()
            )

    async def safety(self) -> list[str]:
        """What must hold at every moment, crash or not."""
        out: list[str] = []
        rows = await self._ledger_rows()
        active = Counter(r[0] for r in rows if r[2] is None)
        out += [f"workload {u} has {n} active admissions" for u, n in active.items() if n > 1]
        state = await self.ledger.load_state()
        total: Counter[tuple[str, str, str]] = Counter()
        seen_dev: dict[str, str] = {}
        for uid, a in state.admissions.items():
            for ch in a.charges:
                total[(a.cluster_queue, ch.flavor, ch.resource)] += ch.amount.as_int()
            for d in a.devices:
                if d in seen_dev:
                    out.append(f"device {d} in the active admissions of {seen_dev[d]} and {uid}")
                seen_dev[d] = uid
        for k, q in state.usage.items():
            if q.as_int() > NOMINAL:
                out.append(f"ledger usage {k} = {q} over the quota {NOMINAL}")
            if q.as_int() != total.get(k, 0):
                out.append(f"ledger usage {k} = {q} but active charges sum to {total.get(k, 0)}")
        owner: dict[tuple[str, str, str], str] = {}
        for c in self._items("resourceclaims", "resource.k8s.io"):
            alloc = (c.get("status") or {}).get("allocation") or {}
            for r in (alloc.get("devices") or {}).get("results") or []:
                d = (r["driver"], r["pool"], r["device"])
                if d in owner:
                    out.append(f"device {d} allocated to claims {owner[d]} and {c['metadata']['name']}")
                owner[d] = c["metadata"]["name"]
        pods = [p for p in self._items("pods") if _live(p)]
        per_job = Counter((p["metadata"].get("labels") or {}).get(JOB_NAME_LABEL) for p in pods)
        for j in self._items("jobs", "batch"):
            n = per_job.get(j["metadata"]["name"], 0)
            if n > (j["spec"].get("parallelism") or 1):
                out.append(f"Job {j['metadata']['name']} has {n} live pods")
        return out

    async def agreement(self) -> list[str]:
        """What holds once the controller converged (no step in flight)."""
        out: list[str] = []
        state = await self.ledger.load_state()
        wls = {w["metadata"]["uid"]: w for w in self._items("workloads", "queueing.dra.io")}
        reserved = {u for u, w in wls.items() if _true(w, "QuotaReserved") and not _true(w, "Finished")}
        ledger_active = set(state.admissions)
        if ledger_active != reserved:
            out.append(
                f"ledger active {sorted(wls.get(u, {}).get('metadata', {}).get('name', u) for u in ledger_active)}"
                f" != QuotaReserved {sorted(wls[u]['metadata']['name'] for u in reserved)}"
            )
        by_job = {
            o["uid"]: w
            for w in wls.values()
            for o in w["metadata"].get("ownerReferences") or []
            if o["kind"] == "Job"
        }
        pods = self._items("pods")
        for j in self._items("jobs", "batch"):
            name, uid = j["metadata"]["name"], j["metadata"]["uid"]
            if _true(j, "Complete"):
                continue
            wl = by_job.get(uid)
            mine = [
                p
                for p in pods
                if (p["metadata"].get("labels") or {}).get(JOB_NAME_LABEL) == name and _live(p)
            ]
            if wl is None:
                out.append(f"Job {name} has no Workload")
                continue
            if wl["metadata"]["uid"] in reserved:
                if j["spec"].get("suspend"):
                    out.append(f"Job {name} admitted but suspended")
                    continue
                adm = wl["status"]["admission"]["podSetAssignments"][0]
                nodes = {p["nodeName"] for p in adm.get("placements") or []}
                want = adm.get("count") or len(adm.get("placements") or [])
                running = [p for p in mine if (p.get("status") or {}).get("phase") == "Running"]
                if len(running) != want or len(mine) != want:
                    out.append(
                        f"Job {name} admitted for {want} pods: {len(running)} running, {len(mine)} live"
                    )
                for p in running:
                    if p["spec"].get("nodeName") not in nodes:
                        out.append(
                            f"pod {p['metadata']['name']} on {p['spec'].get('nodeName')}, plan {nodes}"
                        )
            else:
                if not j["spec"].get("suspend"):
                    out.append(f"Job {name} runs without an admission")
                if mine:
                    out.append(f"Job {name} queued with {len(mine)} live pods")
        return out

    async def settle(self, what: str) -> None:
        """Move the clock (backoffs end), wake the controller; return once the safety checks pass
        and the agreement holds on two polls in a row."""
        deadline = time.monotonic() + SETTLE_TIMEOUT
        quiet = 0
        last: list[str] = []
        while True:
            bad = await self.safety()
            if bad:
                raise InvariantError(f"seed {self.seed}: safety violated ({what}): {bad}")
            last = await self.agreement()
            # a restarted controller that has not completed a sync yet has decided nothing: not quiet
            up = self.controller is not None and self.controller.synced.is_set()
            quiet = quiet + 1 if not last and up else 0
            if quiet >= 3:
                return
            if time.monotonic() > deadline:
                raise InvariantError(f"seed {self.seed}: no convergence ({what}): {last}")
            self.clock.advance(2.0)
            if self.controller is not None:
                self.controller.wake()
            await asyncio.sleep(0.03)

    # ------------------------------------------------------------------ the run
    async def run(self) -> RunResult:
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(dir=self.db_dir) as tmp:
            self.ledger = Ledger.from_url(f"sqlite+aiosqlite:///{Path(tmp) / 'ledger.db'}")
            await upgrade_async(self.ledger.engine)
            try:
                async with run_emulator(crds_dir=CRDS, bookmark_interval=None) as emu:
                    self.emu: Emulator = emu
                    emu.tokens[TOKEN] = "system:serviceaccount:queueing-system:queueing-controller"
                    emu.store.admission_hooks.append(suspend_queued_jobs)
                    emu.load_objects(cluster_objects(nominal=NOMINAL))
                    priority_classes(emu)
                    try:
                        async with StandIns(emu) as cluster:
                            await self._scenario(cluster)
                            if cluster.errors:
                                raise InvariantError(f"seed {self.seed}: stand-ins: {cluster.errors}")
                    finally:
                        faults.disarm()
                        await self._kill()
            finally:
                await self.ledger.close()
        self.result.seconds = time.monotonic() - t0
        return self.result

    async def _scenario(self, cluster: StandIns) -> None:
        rng = self.rng
        admin_api = api_client_for_url(self.emu.url, token="admin-token")
        admin = KubeClient(admin_api)
        sup: asyncio.Task[None] | None = None
        try:
            await self._start()
            faults.arm(self._hook)
            sup = asyncio.create_task(self._supervise())
            n = rng.randint(5, 8)
            names = []
            for i in range(n):
                name = f"j{i}"
                names.append(name)
                # low priority first, higher later: the later ones preempt (eviction path)
                body = prio_job(
                    name,
                    rng.choice(["low", "low", "mid"] if i < n // 2 else ["mid", "high", "high"]),
                    template=rng.choice(["gpu-1", "gpu-2", "gpu-4"]),
                    parallelism=rng.choice([1, 1, 2]),
                )
                await admin.create(JOBS, body)
                if rng.random() < 0.5:
                    await self.settle(f"after creating {name}")
                if rng.random() < 0.3:
                    self._finish_one(cluster)
            self.result.jobs = n
            for _ in range(4 * n):
                await self.settle("finishing")
                if all(_true(j, "Complete") for j in self._items("jobs", "batch")):
                    break
                if not self._finish_one(cluster):
                    raise InvariantError(f"seed {self.seed}: nothing runs but Jobs are not complete")
            await self.settle("the end")
            await self._final(names)
        finally:
            if sup is not None:
                sup.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sup
            await admin_api.close()

    def _finish_one(self, cluster: StandIns) -> bool:
        running = sorted(
            {
                (p["metadata"].get("labels") or {}).get(JOB_NAME_LABEL, "")
                for p in self._items("pods")
                if (p.get("status") or {}).get("phase") == "Running"
            }
        )
        if not running:
            return False
        return cluster.finish_pods("default", self.rng.choice(running)) > 0

    async def _final(self, names: list[str]) -> None:
        problems: list[str] = []
        wls = {w["metadata"]["name"]: w for w in self._items("workloads", "queueing.dra.io")}
        for n in names:
            if not _true(wls.get(f"job-{n}"), "Finished"):
                problems.append(f"Workload job-{n} not Finished")
        state = await self.ledger.load_state()
        if state.admissions:
            problems.append(f"active admissions left: {sorted(state.admissions)}")
        if any(not q.is_zero() for q in state.usage.values()):
            problems.append(f"usage left: {state.usage}")
        rows = await self._ledger_rows()
        by_uid: dict[str, list[Any]] = {}
        for r in rows:
            by_uid.setdefault(r[0], []).append(r)
        for uid, rs in by_uid.items():
            for a, b in itertools.pairwise(rs):
                if a[2] is None or b[1] < a[2]:
                    problems.append(f"workload {uid}: admissions overlap {a} / {b}")
        self.result.admissions = len(rows)
        self.result.evictions = sum(1 for r in rows if r[3] and r[3] not in ("Succeeded", "Failed"))
        if problems:
            raise InvariantError(f"seed {self.seed}: {problems}")


async def run_seed(seed: int, kills: int = 1) -> RunResult:
    try:
        return await CrashRun(seed, kills).run()
    except BaseException:
        print(f"\ncrash harness: FAILED with seed {seed} (rerun: python -m tests.reliability.crash "
              f"--first {seed} --seeds 1 --kills {kills})", file=sys.stderr)  # fmt: skip
        raise


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=50)
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--kills", type=int, default=1, help="kills per seed")
    args = ap.parse_args(argv)
    points: Counter[str] = Counter()
    failed: list[int] = []
    t0 = time.monotonic()
    for seed in range(args.first, args.first + args.seeds):
        try:
            r = asyncio.run(run_seed(seed, args.kills))
        except InvariantError as e:
            print(f"seed {seed}: FAIL {e}")
            failed.append(seed)
            continue
        points.update(r.crashes)
        print(
            f"seed {seed}: ok, {r.jobs} jobs, {r.admissions} admissions ({r.evictions} released early), "
            f"killed at {r.crashes}, {r.seconds:.1f}s"
        )
    kills = sum(points.values())
    print(f"\n{args.seeds} seeds, {kills} kills, {len(failed)} failed {failed}, {time.monotonic() - t0:.0f}s")
    for p in faults.POINTS:
        print(f"  {p:32} {points.get(p, 0)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
