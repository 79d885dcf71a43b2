"""End-to-end benchmark: Kueue's published baseline shape, in real time, through ``queueing run``.

    python bench/e2e.py [--mode kueue|full] [--fraction F] [--database URL] [--timeout SECONDS]
                        [--plan-binding-mode Auto|NodeOnly|Full]

The shape is ``bench/admission.py``'s ``baseline`` (Kueue test/performance/scheduler/configs/baseline:
5 cohorts x 6 ClusterQueues, 15,000 workloads with Kueue's sizes, priorities, arrival intervals and
run times, one GPU per unit on 75 nodes x 8 GPUs). Each workload is its own Job, with its own name,
created at its arrival time in the API emulator (as a user's client would: the emulator runs the
MutatingAdmissionPolicy of deploy/base and RBAC). The controller is the real ``queueing run``, a
separate process, with its ledger on PostgreSQL (a fresh database, dropped afterwards) or the URL
given.

Modes:
- ``kueue``: Kueue's method (its test/performance/scheduler runner): a Job, once admitted (unsuspended),
  is marked Complete after its run time, without pods.
- ``full``: the stand-in cluster of ``queueing/testing/cluster.py`` plays the Job controller (pods),
  the resourceclaim controller (claims from templates), kube-scheduler (binding to the planned node)
  and the kubelet (Running, then Succeeded after the run time).

It reports wall time (first arrival to last finish), device utilisation (GPU-seconds of admitted runs
over GPUs x wall), the quota usage as Kueue's runner computes its "utilisation" (the ClusterQueues'
``status.flavorsUsage`` integrated over time, over nominal quota x the time between the first and last
ClusterQueue event: quota held from admission to release, the figure Kueue's 55.9 % is), mean and p90
time from Job creation to admission per class, API writes per admitted workload, the controller's CPU
seconds and peak RSS, the bench process's CPU seconds (the API emulator and the stand-ins: what the API
side cost), the cycles it ran and the seconds its syncs spent in each step, the admission rate, and the
whole machine's busy CPU and the hypervisor's steal (``/proc/stat``) with the CPU per admission of each
process and of the machine, and the admission rate each could reach at that cost (the machine on its
cores, each interpreter on one). ``--fraction`` scales the number of workloads per queue. Results:
docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import admission

from queueing.api.quantity import parse_quantity
from queueing.testing import Emulator, run_emulator
from queueing.testing.cluster import StandIns, condition_true
from queueing.testing.emulator import WRITE_VERBS
from queueing.testing.rbac import RbacAuthorizer

REPO = Path(__file__).resolve().parents[1]
CONTROLLER_USER = "system:serviceaccount:queueing-system:queueing-controller"
CONTROLLER_TOKEN = "controller-token"
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def workloads(fraction: float) -> list[tuple[float, str, dict[str, Any]]]:
    """(arrival, size, Job) for every workload of the baseline shape, each Job its own object."""
    out: list[tuple[float, str, dict[str, Any]]] = []
    for c in range(5):
        for k in range(6):
            cq = f"cq-{c:03d}-{k}"
            for size, (_, duration, _, interval, count) in admission.SIZES.items():
                for i in range(round(count * fraction)):
                    job = admission.user_job(f"{cq}-{size}-{i}", cq, size, duration)
                    out.append((round(i * interval, 3), size, job))
    out.sort(key=lambda t: (t[0], t[2]["metadata"]["name"]))
    return out


class Recorder:
    """What happened to each Job, from the store's own watch (times relative to the run's start)."""

    def __init__(self, t0: float, units: dict[str, int], size: dict[str, str]) -> None:
        self.t0, self.units, self.size = t0, units, size
        self.created: dict[str, float] = {}
        self.admitted: dict[str, float] = {}  # first admission
        self.running: dict[str, float] = {}  # since the current admission
        self.finished: dict[str, float] = {}
        self.admissions = 0
        self.evictions = 0
        self.gpu_seconds = 0.0

    def on_job(self, job: dict[str, Any]) -> None:
        name = job["metadata"]["name"]
        now = time.perf_counter() - self.t0
        if name in self.finished:
            return
        if condition_true(job, "Complete") or condition_true(job, "Failed"):
            self.finished[name] = now
            if name in self.running:
                self.gpu_seconds += self.units[name] * (now - self.running.pop(name))
            return
        suspended = bool((job.get("spec") or {}).get("suspend"))
        if not suspended and name not in self.running:
            self.running[name] = now
            self.admitted.setdefault(name, now)
            self.admissions += 1
        elif suspended and name in self.running:
            self.gpu_seconds += self.units[name] * (now - self.running.pop(name))
            self.evictions += 1


class QuotaUsage:
    """Quota usage as Kueue's runner measures it (test/performance/scheduler/runner/recorder): each
    ClusterQueue's ``status.flavorsUsage`` (first flavor, first resource) integrated over the time
    between its status events, summed over the ClusterQueues, over their nominal quota times the time
    from the first to the last ClusterQueue event. Quota a Workload holds counts from its admission to
    its release, whether its Job runs yet or not: Kueue's "utilisation" (55.9 % for this shape)."""

    def __init__(self) -> None:
        self.last: dict[str, tuple[float, float]] = {}  # CQ -> (time, usage)
        self.used = 0.0  # usage x seconds
        self.nominal: dict[str, float] = {}
        self.first: float | None = None
        self.last_time = 0.0

    def on_cq(self, cq: dict[str, Any]) -> None:
        now = time.perf_counter()
        name = cq["metadata"]["name"]
        flavors = (cq.get("status") or {}).get("flavorsUsage") or []
        resources = flavors[0].get("resources") or [] if flavors else []
        usage = float(parse_quantity(str(resources[0].get("total", "0"))).value) if resources else 0.0
        groups = (cq.get("spec") or {}).get("resourceGroups") or []
        with contextlib.suppress(IndexError, KeyError, TypeError):
            nominal = groups[0]["flavors"][0]["resources"][0]["nominalQuota"]
            self.nominal[name] = float(parse_quantity(str(nominal)).value)
        prev = self.last.get(name)
        if prev is not None:
            self.used += prev[1] * (now - prev[0])
        self.last[name] = (now, usage)
        self.first = now if self.first is None else self.first
        self.last_time = now

    def percent(self) -> float:
        elapsed = self.last_time - (self.first or self.last_time)
        quota = sum(self.nominal.values())
        return self.used * 100 / (quota * elapsed) if quota and elapsed > 0 else float("nan")


async def watch_store(
    emu: Emulator, resource: str, group: str, on_object: Callable[[dict[str, Any]], None], since: str
) -> None:
    """Hand every ADDED/MODIFIED object of ``resource`` to ``on_object``, from the store's own watch
    (read only: the events refer to the stored objects). ``since``: a resourceVersion, or "0" for the
    objects already there first."""
    rt = emu.store.resource(resource, group)
    w = emu.store.watch(rt, None, since, None, None, False, shared=True)
    try:
        while True:
            ev = await w.queue.get()
            if ev is None:
                return
            if ev.get("type") in ("ADDED", "MODIFIED"):
                on_object(ev["object"])
    finally:
        emu.store.unwatch(w)


def reasons(emu: Emulator) -> dict[str, int]:
    """Workloads by their QuotaReserved condition's reason (or Finished), to show where a run waits."""
    out: dict[str, int] = {}
    for wl in emu.store.list(emu.store.resource("workloads", "queueing.dra.io"), share=True)[0]:
        conds = {c.get("type"): c for c in (wl.get("status") or {}).get("conditions") or []}
        fin, qr = conds.get("Finished"), conds.get("QuotaReserved")
        if fin is not None and fin.get("status") == "True":
            k = "Finished"
        elif qr is None:
            k = "no condition"
        else:
            k = f"QuotaReserved={qr.get('status')}/{qr.get('reason')}"
        out[k] = out.get(k, 0) + 1
    return out


async def pg_database(url: str | None) -> tuple[str, str | None]:
    """The ledger URL, and the name of a database this run created (to drop afterwards)."""
    if url:
        return url, None
    import asyncpg

    name = f"queueing_e2e_{secrets.token_hex(4)}"
    conn = await asyncpg.connect(PG_ADMIN, timeout=5)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}", name


async def drop_database(name: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(PG_ADMIN, timeout=5)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


def proc_stats(pid: int) -> tuple[float, int]:
    """CPU seconds (user + system) and peak RSS in bytes of a running process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    hwm = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            hwm = int(line.split()[1]) * 1024
    return cpu, hwm


def machine_cpu() -> tuple[float, float]:
    """CPU seconds every core of the machine spent busy (user, nice, system, irq, softirq: the
    controller, this process, PostgreSQL and anything else), and those the hypervisor took from it
    (steal: a slow hour of the host), since boot, from /proc/stat."""
    v = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    ticks = os.sysconf("SC_CLK_TCK")
    return (v[0] + v[1] + v[2] + v[5] + v[6]) / ticks, v[7] / ticks


async def scrape(port: int) -> tuple[dict[str, float], dict[str, float]]:
    """Sums of the controller's metric samples by metric name (labels dropped), and the seconds its
    syncs spent in each step (``queueing_sync_step_seconds_total`` by ``step``)."""
    out: dict[str, float] = {}
    steps: dict[str, float] = {}
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/metrics") as r:
        for line in (await r.text()).splitlines():
            if line and not line.startswith("#"):
                name = line.split("{", 1)[0].split(" ", 1)[0]
                with contextlib.suppress(ValueError):
                    value = float(line.rsplit(" ", 1)[1])
                    out[name] = out.get(name, 0.0) + value
                    if name.endswith("sync_step_seconds_total") and 'step="' in line:
                        step = line.split('step="', 1)[1].split('"', 1)[0]
                        steps[step] = steps.get(step, 0.0) + value
    return out, steps


async def wait_ready(port: int, proc: asyncio.subprocess.Process, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < deadline:
            if proc.returncode is not None:
                raise RuntimeError(f"queueing run exited with {proc.returncode} before it was ready")
            with contextlib.suppress(aiohttp.ClientError):
                async with s.get(f"http://127.0.0.1:{port}/readyz") as r:
                    if r.status == 200:
                        return
            await asyncio.sleep(0.2)
    raise RuntimeError("queueing run did not become ready in time")


async def stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 30)
        except TimeoutError:
            proc.kill()
            await proc.wait()


def pct(values: list[float], p: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(p * len(v)))] if v else float("nan")


async def run(args: argparse.Namespace) -> int:
    jobs = workloads(args.fraction)
    units = {j["metadata"]["name"]: int(j["spec"]["parallelism"]) for _, _, j in jobs}
    size = {j["metadata"]["name"]: s for _, s, j in jobs}
    total_gpus = 75 * 8
    url, created_db = await pg_database(args.database)
    tmp = Path(tempfile.mkdtemp(prefix="queueing-e2e-"))
    metrics_port, health_port = free_port(), free_port()
    proc: asyncio.subprocess.Process | None = None
    try:
        async with run_emulator(REPO / "crds", history_limit=1_000_000, event_ttl=None) as emu:
            emu.tokens[CONTROLLER_TOKEN] = CONTROLLER_USER
            emu.load_objects(REPO / "deploy" / "base" / "mutating-admission-policy.yaml")
            emu.load_objects(
                [
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "queueing-system"}},
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}},
                    *admission.cluster(75),
                    *admission.queues(5, 6),
                ]
            )
            rbac = [d for d in yaml.safe_load_all((REPO / "deploy" / "base" / "rbac.yaml").read_text()) if d]
            emu.authorizer = RbacAuthorizer.from_objects(rbac)
            kubeconfig = emu.kubeconfig_path(tmp, token=CONTROLLER_TOKEN, user="controller")
            config = tmp / "config.yaml"
            config.write_text(
                yaml.safe_dump(
                    {
                        "namespace": "queueing-system",
                        "databaseURL": url,
                        "logLevel": args.log_level,
                        "planBindingMode": args.plan_binding_mode,
                        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
                        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
                    }
                )
            )
            proc = await asyncio.create_subprocess_exec(
                args.controller_python, "-m", "queueing", "run", "--config", str(config), "--kubeconfig", str(kubeconfig),
                stdout=asyncio.subprocess.DEVNULL, stderr=(tmp / "controller.log").open("w"),
                cwd=tmp,  # not a checkout: `-m queueing` imports the code installed for that interpreter
            )  # fmt: skip
            await wait_ready(health_port, proc)
            cpu0, _ = proc_stats(proc.pid)
            writes0 = emu.writes_by(CONTROLLER_USER).snapshot()
            jobs_rt = emu.store.resource("jobs", "batch")
            t0, bench_cpu0 = time.perf_counter(), time.process_time()
            busy0, steal0 = machine_cpu()
            rec = Recorder(t0, units, size)
            watcher = asyncio.create_task(watch_store(emu, "jobs", "batch", rec.on_job, str(emu.store.rv)))
            quota = QuotaUsage()
            cq_watcher = asyncio.create_task(
                watch_store(emu, "clusterqueues", "queueing.dra.io", quota.on_cq, "0")
            )
            last_report = t0
            async with StandIns(emu, pods=args.mode == "full"):
                for arrival, _, job in jobs:
                    delay = t0 + arrival - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    emu.store.create(jobs_rt, "bench", job, share=True)  # the store takes the Job over
                    rec.created[job["metadata"]["name"]] = time.perf_counter() - t0
                deadline = t0 + args.timeout
                while len(rec.finished) < len(jobs) and time.perf_counter() < deadline:
                    if proc.returncode is not None:
                        print(f"queueing run exited with {proc.returncode}; see {tmp / 'controller.log'}")
                        break
                    if time.perf_counter() - last_report > 10:
                        last_report = time.perf_counter()
                        print(
                            f"  ... {len(rec.finished)}/{len(jobs)} finished, {len(rec.admitted)} admitted, "
                            f"wall {last_report - t0:.0f}s; Workloads by reason: {reasons(emu)}",
                            flush=True,
                        )
                    await asyncio.sleep(0.1)
                wall = time.perf_counter() - t0
                bench_cpu = time.process_time() - bench_cpu0
                busy1, steal1 = machine_cpu()
            watcher.cancel()
            cq_watcher.cancel()
            cpu1, rss = proc_stats(proc.pid)
            counts = emu.writes_by(CONTROLLER_USER).since(writes0)
            writes = counts.writes()
            metrics, steps = await scrape(metrics_port)
            await stop(proc)  # while the API is still there
    finally:
        if proc is not None:
            await stop(proc)
        if created_db:
            await drop_database(created_db)
    # the busy time of runs still going at the end
    for name, since in rec.running.items():
        rec.gpu_seconds += units[name] * (wall - since)
    cycles = sum(v for k, v in metrics.items() if k.endswith("admission_attempts_total"))
    print(
        f"mode {args.mode}: {len(jobs)} Jobs (fraction {args.fraction:g}) in 30 ClusterQueues, "
        f"75 nodes x 8 GPUs, ledger {'PostgreSQL' if url.startswith('postgresql') else url.split(':', 1)[0]}, "
        f"planBindingMode {args.plan_binding_mode}"
    )
    print(f"wall {wall:.1f}s, {len(rec.finished)}/{len(jobs)} finished; last arrival {jobs[-1][0]:.1f}s")
    print(f"device utilisation {rec.gpu_seconds / (total_gpus * wall) * 100:.1f}% of {total_gpus} GPUs")
    print(
        f"quota usage as Kueue's runner measures it (ClusterQueue flavorsUsage over time / nominal quota): "
        f"{quota.percent():.1f}%"
    )
    print(
        f"{rec.admissions} admissions ({len(rec.admitted)} workloads), {rec.evictions} evictions, "
        f"admission rate {rec.admissions / wall:.1f}/s"
    )
    for s in admission.SIZES:
        waits = [rec.admitted[n] - rec.created[n] for n in rec.admitted if size[n] == s and n in rec.created]
        if waits:
            print(
                f"  {s:6s} time to admission mean {sum(waits) / len(waits):.2f}s, p90 {pct(waits, 0.9):.2f}s (n={len(waits)})"
            )
    print(
        f"API writes by the controller: {writes} ({writes / max(1, rec.admissions):.2f} per admission); "
        f"scheduling cycles {cycles:.0f}"
    )
    per = max(1, rec.admissions)
    print(
        "  sync steps (s of the controller's syncs): "
        + ", ".join(f"{k} {v:.1f}" for k, v in sorted(steps.items(), key=lambda kv: -kv[1]))
    )
    by_request = sorted(((n, f"{v} {r}") for (v, r), n in counts.items() if v in WRITE_VERBS), reverse=True)
    print("  per admission: " + ", ".join(f"{what} {n / per:.2f}" for n, what in by_request))
    print(f"controller: {cpu1 - cpu0:.1f}s CPU during the run, peak RSS {rss / 2**20:.0f} MiB")
    print(f"bench process (API emulator, stand-in cluster, recorder): {bench_cpu:.1f}s CPU during the run")
    # what an admission costs the whole machine, and so the rate its cores could reach at most
    cores, busy = os.cpu_count() or 1, max(busy1 - busy0, 1e-6)
    print(
        f"machine: {busy:.1f}s CPU busy over {cores} cores ({busy / wall:.2f} cores on average), "
        f"{steal1 - steal0:.1f}s taken by the hypervisor; per admission: controller "
        f"{(cpu1 - cpu0) / per * 1000:.1f} ms, bench process {bench_cpu / per * 1000:.1f} ms, whole machine "
        f"{busy / per * 1000:.1f} ms: at most {cores * per / busy:.0f} admissions/s on {cores} cores, "
        f"{per / max(cpu1 - cpu0, 1e-6):.0f}/s through the controller and {per / max(bench_cpu, 1e-6):.0f}/s "
        "through the bench process (each one interpreter: one core at most)"
    )
    print(
        f"machine: reference loop {admission.reference_loop():.3f}s (fixed pure-Python work; compares days)"
    )
    print(f"controller log: {tmp / 'controller.log'}")
    return 0 if len(rec.finished) == len(jobs) else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=("kueue", "full"), default="kueue")
    ap.add_argument("--fraction", type=float, default=1.0, help="scale the workloads per queue")
    ap.add_argument("--database", help="ledger URL (default: a fresh PostgreSQL database on 127.0.0.1)")
    ap.add_argument(
        "--controller-python",
        default=sys.executable,
        help="the interpreter that runs `queueing run` (e.g. another checkout's venv, to compare two "
        "versions of the controller on the same day)",
    )
    ap.add_argument(
        "--plan-binding-mode",
        choices=("Auto", "NodeOnly", "Full"),
        default="Auto",
        help="the controller's planBindingMode (in Kueue's method no pod ever confirms a binding made node "
        "only, so Auto and NodeOnly hold released devices on such nodes until nodeOnlyConfirmTimeout)",
    )
    ap.add_argument("--log-level", default="warning", help="the controller's log level (its log is kept)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="give up after this many seconds")
    return asyncio.run(run(ap.parse_args()))


if __name__ == "__main__":
    raise SystemExit(main())
