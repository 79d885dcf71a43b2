"""Soak: the controller on the API emulator with a SQLite ledger, thousands of Jobs arriving and
finishing, random priorities (so lower-priority Jobs are evicted by preemption), finished Jobs and
Workloads deleted as a TTL controller would. Reports RSS after the warm-up and at the end, the asyncio
task count, and checks the ledger at the end (no active admission, zero usage, a workload's
admissions never overlap).

    python bench/soak.py                         # 2000 Jobs, the controller in this process
    python bench/soak.py --jobs 10000            # longer
    python bench/soak.py --separate --jobs 2000  # the controller alone in its own process

``--separate`` runs the controller as ``queueing run`` in a child process (real clock, leader election
off, its probes and periodic jobs on) against the emulator served by this process, so the RSS
reported is the controller's alone (``VmRSS`` of the child from ``/proc``, at start, after the
warm-up, half-way and at the last Job), with its thread and open file counts; the asyncio task count
is not visible from outside and is reported only in process.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import signal
import sys
import tempfile
import time
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import text

from queueing.kube.client import JOBS, KubeClient, api_client_for_url
from queueing.ledger.migrate import upgrade_async
from queueing.ledger.repository import Ledger
from queueing.testing import run_emulator
from queueing.testing.cluster import JOB_NAME_LABEL, StandIns, suspend_queued_jobs
from tests.controller.conftest import CONTROLLER_TOKEN, CRDS, Harness, ManualTime, cluster_objects
from tests.controller.test_eviction import prio_job, priority_classes
from tests.controller.test_process import free_port
from tests.reliability.crash import crash_config


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def proc_status(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (peak) in MB, Threads and open fds of process ``pid`` (Linux /proc)."""
    out: dict[str, float] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) / 1024
            elif key == "Threads":
                out[key] = int(value)
    out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    return out


# `queueing run` under tracemalloc; SIGUSR1 dumps a snapshot to DIR/snap-N (then DIR/snap-N.done)
TRACED_RUN = """
import signal, sys, tracemalloc
frames, where = int(sys.argv[1]), sys.argv[2]
tracemalloc.start(frames)
dumped = [0]
def dump(*_):
    dumped[0] += 1
    tracemalloc.take_snapshot().dump(f"{where}/snap-{dumped[0]}")
    open(f"{where}/snap-{dumped[0]}.done", "w").close()
signal.signal(signal.SIGUSR1, dump)
from queueing.cli import main
raise SystemExit(main(sys.argv[3:]))
"""


class ControllerChild:
    """``queueing run`` in a child process against the emulator at ``url``; stderr goes to a file.
    With ``trace`` (frames), it runs under tracemalloc and :meth:`snapshot` fetches a snapshot."""

    def __init__(self, kubeconfig: Path, ledger_url: str, workdir: Path, trace: int = 0) -> None:
        self.health = f"127.0.0.1:{free_port()}"
        config = workdir / "controller.yaml"
        config.write_text(
            "namespace: default\nlogLevel: warning\nplanBindingMode: Full\nevictionTimeout: 24h\n"
            "leaderElection:\n  leaderElect: false\n"
            f"metrics:\n  bindAddress: 127.0.0.1:{free_port()}\n"
            f"health:\n  healthProbeBindAddress: {self.health}\n"
            "waitForPodsReady:\n  enable: false\n"
        )
        self.log = workdir / "controller.log"
        self.env = {**os.environ, "QUEUEING_CONFIG": str(config), "QUEUEING_DATABASE_URL": ledger_url}
        self.args = [sys.executable, "-m", "queueing", "run", "--kubeconfig", str(kubeconfig)]
        self.workdir = workdir
        self.snapshots = 0
        if trace:
            self.args[1:3] = ["-c", TRACED_RUN, str(trace), str(workdir)]
        self.proc: asyncio.subprocess.Process | None = None

    async def snapshot(self, timeout: float = 120.0) -> tracemalloc.Snapshot:
        assert self.proc is not None
        self.snapshots += 1
        path = self.workdir / f"snap-{self.snapshots}"
        self.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + timeout
        while not path.with_suffix(".done").exists():
            if time.monotonic() > deadline:
                raise RuntimeError("the controller wrote no tracemalloc snapshot")
            await asyncio.sleep(0.05)
        return tracemalloc.Snapshot.load(str(path))

    async def start(self, timeout: float = 60.0) -> None:
        import aiohttp

        with open(self.log, "wb") as log:
            self.proc = await asyncio.create_subprocess_exec(
                *self.args, env=self.env, stdout=log, stderr=log, cwd=self.log.parent
            )
        deadline = time.monotonic() + timeout
        async with aiohttp.ClientSession() as s:
            while True:  # ready: informers synced (and the ledger answers)
                try:
                    async with s.get(f"http://{self.health}/readyz") as r:
                        if r.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                if self.proc.returncode is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"queueing run did not become ready:\n{self.log.read_text()[-3000:]}")
                await asyncio.sleep(0.1)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def status(self) -> dict[str, float]:
        return proc_status(self.pid)

    async def stop(self) -> int:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        return await asyncio.wait_for(self.proc.wait(), 60)

    async def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()


def report_growth(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, jobs: int) -> None:
    """Print the traced memory growth between two snapshots by area and by file:line."""
    flt = [tracemalloc.Filter(False, tracemalloc.__file__)]
    stats = after.filter_traces(flt).compare_to(before.filter_traces(flt), "traceback")
    areas: dict[str, int] = {}
    ours: dict[str, int] = {}
    root = str(Path(__file__).resolve().parents[1]) + "/"
    for st in stats:
        # the innermost frame in this project's code (not the venv): who allocated (or copied) it
        own = [fr for fr in st.traceback if fr.filename.startswith(root) and "/.venv/" not in fr.filename]
        f = own[-1].filename if own else st.traceback[0].filename
        if own:
            where = f"{own[-1].filename.removeprefix(root)}:{own[-1].lineno}"
            ours[where] = ours.get(where, 0) + st.size_diff
        m = [
            a
            for a in (
                "queueing/testing/",
                "queueing/controller/",
                "queueing/kube/",
                "queueing/ledger/",
                "tests/",
                "bench/",
                "queueing/",
            )
            if a in f
        ]
        area = m[0] if m else ("site-packages" if "site-packages" in f else "python")
        areas[area] = areas.get(area, 0) + st.size_diff
    print(f"traced growth over {jobs} Jobs by area (allocating frame):")
    for a, d in sorted(areas.items(), key=lambda x: -x[1]):
        print(f"  {a:24} {d / 1024:+9.0f} KiB  ({d / max(jobs, 1):+.0f} B/Job)")
    print("top 25 lines of this project (innermost project frame of each allocation):")
    for where, d in sorted(ours.items(), key=lambda x: -x[1])[:25]:
        print(f"  {d / 1024:+8.0f} KiB  {where}")


@dataclass
class SoakResult:
    jobs: int
    seconds: float
    admissions: int
    evictions: int
    rss_warm_mb: float
    rss_end_mb: float
    tasks_warm: int
    tasks_end: int
    rss_running_mb: float
    tasks_running: int
    problems: list[str]
    # --separate: the controller process at start / after warm-up / half-way / at the last Job
    child: dict[str, dict[str, float]] = field(default_factory=dict)

    def summary(self) -> str:
        if self.child:
            points = ("start", "warm", "middle", "end")
            c = self.child
            return (
                f"{self.jobs} Jobs in {self.seconds:.0f}s ({self.jobs / self.seconds:.1f} Jobs/s); "
                f"{self.admissions} admissions, {self.evictions} released early (preemption); "
                "controller process RSS "
                + " -> ".join(f"{c[p]['VmRSS']:.1f}" for p in points if p in c)
                + f" MB (start, after warm-up, half-way, last Job; peak {c['end']['VmHWM']:.1f} MB); "
                "threads " + " -> ".join(f"{c[p]['Threads']:.0f}" for p in points if p in c)
                + "; open fds " + " -> ".join(f"{c[p]['fds']:.0f}" for p in points if p in c)
                + f"; test process RSS {self.rss_warm_mb:.0f} -> {self.rss_running_mb:.0f} MB; "
                f"ledger {'consistent' if not self.problems else self.problems}"
            )  # fmt: skip
        return (
            f"{self.jobs} Jobs in {self.seconds:.0f}s ({self.jobs / self.seconds:.1f} Jobs/s); "
            f"{self.admissions} admissions, {self.evictions} released early (preemption); "
            f"RSS {self.rss_warm_mb:.0f} MB after warm-up -> {self.rss_running_mb:.0f} MB at the last Job "
            f"({self.rss_end_mb:.0f} MB after shutdown); asyncio tasks {self.tasks_warm} after warm-up -> "
            f"{self.tasks_running} at the last Job ({self.tasks_end} after shutdown); "
            f"ledger {'consistent' if not self.problems else self.problems}"
        )


async def soak(
    jobs: int = 2000,
    window: int = 12,
    seed: int = 1,
    warmup: int | None = None,
    separate: bool = False,
    trace_child: int = 0,
) -> SoakResult:
    rng = random.Random(seed)
    snap_warm: tracemalloc.Snapshot | None = None
    warmup = warmup if warmup is not None else max(20, jobs // 10)
    t0 = time.monotonic()
    clock = ManualTime()
    with tempfile.TemporaryDirectory() as tmp:
        ledger = Ledger.from_url(f"sqlite+aiosqlite:///{Path(tmp) / 'ledger.db'}")
        await upgrade_async(ledger.engine)
        async with run_emulator(crds_dir=CRDS, bookmark_interval=None) as emu:
            emu.tokens[CONTROLLER_TOKEN] = "system:serviceaccount:queueing-system:queueing-controller"
            emu.store.admission_hooks.append(suspend_queued_jobs)
            emu.load_objects(cluster_objects())
            priority_classes(emu)
            rt = {
                k: emu.store.resource(*k.split(".", 1))
                for k in ("jobs.batch", "workloads.queueing.dra.io", "pods.")
            }

            def live(kind: str) -> list[dict[str, Any]]:
                return emu.store.list(rt[kind], "default", None)[0]

            harness = Harness(emu, ledger, crash_config(), clock=clock, eviction_timeout=1e9)
            child: ControllerChild | None = None
            child_status: dict[str, dict[str, float]] = {}
            if separate:
                kubeconfig = emu.kubeconfig_path(tmp, token=CONTROLLER_TOKEN, user="controller")
                ledger_url = f"sqlite+aiosqlite:///{Path(tmp) / 'ledger.db'}"
                child = ControllerChild(kubeconfig, ledger_url, Path(tmp), trace=trace_child)
            admin_api = api_client_for_url(emu.url, token="admin-token")
            admin = KubeClient(admin_api)
            rss_warm = tasks_warm = 0.0
            try:
                async with StandIns(emu) as cluster:
                    if child is not None:
                        await child.start()
                        child_status["start"] = child.status()
                    else:
                        await harness.start()
                    created = done = 0
                    progress = time.monotonic()  # the last time a pod was finished
                    while done < jobs:
                        jl = live("jobs.batch")
                        complete = [
                            j
                            for j in jl
                            if any(
                                c.get("type") == "Complete"
                                for c in (j.get("status") or {}).get("conditions") or []
                            )
                        ]
                        for j in complete:  # TTL after finished: the Job, its Workload, its pods go
                            n = j["metadata"]["name"]
                            wl = emu.store.get(rt["workloads.queueing.dra.io"], "default", f"job-{n}")
                            if not any(
                                c.get("type") == "Finished" and c.get("status") == "True"
                                for c in (wl.get("status") or {}).get("conditions") or []
                            ):
                                continue  # the controller has not seen it finish yet
                            for p in emu.store.list(rt["pods."], "default", f"{JOB_NAME_LABEL}={n}")[0]:
                                emu.store.delete(rt["pods."], "default", p["metadata"]["name"])
                            emu.store.delete(rt["workloads.queueing.dra.io"], "default", f"job-{n}")
                            emu.store.delete(rt["jobs.batch"], "default", n)
                            done += 1
                            if child is not None and done == jobs // 2:
                                child_status["middle"] = child.status()
                            if done == warmup:
                                if child is not None:
                                    child_status["warm"] = child.status()
                                    if trace_child:
                                        snap_warm = await child.snapshot()
                                gc.collect()
                                rss_warm, tasks_warm = rss_mb(), len(asyncio.all_tasks())
                                if tracemalloc.is_tracing():
                                    snap_warm = tracemalloc.take_snapshot()
                                    print(
                                        f"warm: emulator history {len(emu.store.history)} events", flush=True
                                    )
                        in_flight = created - done
                        while created < jobs and in_flight < window:
                            body = prio_job(
                                f"s{created}",
                                rng.choice(["low", "low", "mid", "high"]),
                                template=rng.choice(["gpu-1", "gpu-2", "gpu-4"]),
                                parallelism=rng.choice([1, 1, 2]),
                            )
                            await admin.create(JOBS, body)
                            created += 1
                            in_flight += 1
                        running = sorted(
                            {
                                (p["metadata"].get("labels") or {}).get(JOB_NAME_LABEL, "")
                                for p in live("pods.")
                                if (p.get("status") or {}).get("phase") == "Running"
                            }
                        )
                        if running and rng.random() < 0.5:
                            cluster.finish_pods("default", rng.choice(running))
                            progress = time.monotonic()
                        elif time.monotonic() - progress > 180:  # nothing running for 3 minutes
                            raise AssertionError(f"soak stalled at {done} of {jobs} done")
                        clock.advance(1.0)
                        if harness.controller is not None:
                            harness.controller.wake()
                        if child is not None and child.proc is not None and child.proc.returncode is not None:
                            raise AssertionError(f"the controller exited:\n{child.log.read_text()[-3000:]}")
                        await asyncio.sleep(0.01)
                    gc.collect()
                    rss_running, tasks_running = rss_mb(), len(asyncio.all_tasks())
                    if child is not None:
                        child_status["end"] = child.status()
                    if snap_warm is not None and child is not None:
                        snap_end = await child.snapshot()
                        traced = [
                            sum(st.size for st in sn.statistics("filename")) / 2**20
                            for sn in (snap_warm, snap_end)
                        ]
                        print(
                            f"controller process: traced {traced[0]:.1f} -> {traced[1]:.1f} MB, "
                            f"RSS {child_status['warm']['VmRSS']:.1f} -> {child_status['end']['VmRSS']:.1f} MB"
                        )
                        report_growth(snap_warm, snap_end, jobs - warmup)
                    elif snap_warm is not None:
                        print(f"end: emulator history {len(emu.store.history)} events", flush=True)
                        print(
                            f"end: emulator objects {sum(len(v) for v in emu.store.objects.values())}",
                            flush=True,
                        )
                        report_growth(snap_warm, tracemalloc.take_snapshot(), jobs - warmup)
                    await harness.stop()
                    errors = list(cluster.errors)
                    if child is not None:
                        rc = await child.stop()
                        if rc != 0:
                            errors.append(f"queueing run exited {rc}: {child.log.read_text()[-2000:]}")
            finally:
                if child is not None:
                    await child.kill()  # only if still running (a failed run)
            await admin_api.close()
        gc.collect()
        rss_end, tasks_end = rss_mb(), len(asyncio.all_tasks())
        problems = list(errors)
        state = await ledger.load_state()
        if state.admissions:
            problems.append(f"{len(state.admissions)} active admissions left")
        if any(not q.is_zero() for q in state.usage.values()):
            problems.append(f"usage left {dict(state.usage)}")
        async with ledger.engine.connect() as c:
            rows = (
                await c.execute(
                    text(
                        "SELECT workload_uid, admitted_at_ms, released_at_ms, release_reason FROM admissions "
                        "ORDER BY workload_uid, attempt"
                    )
                )
            ).all()
        last: dict[str, Any] = {}
        for r in rows:
            prev = last.get(r[0])
            if prev is not None and (prev[2] is None or r[1] < prev[2]):
                problems.append(f"overlapping admissions for {r[0]}")
            last[r[0]] = r
        if len(last) != jobs:
            problems.append(f"{len(last)} workloads admitted, {jobs} Jobs")
        await ledger.close()
    return SoakResult(
        jobs=jobs,
        seconds=time.monotonic() - t0,
        admissions=len(rows),
        evictions=sum(1 for r in rows if r[3] not in ("Succeeded", "Failed")),
        rss_warm_mb=rss_warm,
        rss_end_mb=rss_end,
        tasks_warm=int(tasks_warm),
        tasks_end=tasks_end,
        rss_running_mb=rss_running,
        tasks_running=tasks_running,
        problems=problems,
        child=child_status,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--window", type=int, default=12, help="Jobs in flight at once")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=None, help="Jobs done before the first measurement")
    ap.add_argument(
        "--separate",
        action="store_true",
        help="run the controller as `queueing run` in a child process and report its RSS alone",
    )
    ap.add_argument(
        "--trace",
        type=int,
        default=0,
        metavar="FRAMES",
        help="tracemalloc with this many frames: print the growth after warm-up by area and line "
        "(with --separate: of the controller process)",
    )
    args = ap.parse_args()
    if args.trace and not args.separate:
        tracemalloc.start(args.trace)
    r = asyncio.run(
        soak(
            args.jobs, args.window, args.seed, args.warmup, args.separate, args.trace if args.separate else 0
        )
    )
    print(r.summary())
    return 1 if r.problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
