"""Admission benchmark: Kueue's published baseline shape, in virtual time, through ``queueing simulate``'s
engine with the real DRA placer.

    python bench/admission.py [--shape baseline|large] [--no-fair-sharing] [--backoff SECONDS] [--copies] [--hash]

Shape ``baseline`` (Kueue test/performance/scheduler/configs/baseline): 5 cohorts x 6 ClusterQueues,
each nominalQuota 20 GPUs, borrowingLimit 100, ``reclaimWithinCohort: Any``, ``withinClusterQueue:
LowerPriority``; per ClusterQueue 350 small (1 unit, 200 ms, priority 50, one every 100 ms), 100
medium (5 units, 500 ms, priority 100, every 500 ms), 50 large (20 units, 1 s, priority 200, every
1.2 s) = 15,000 workloads. A unit is one GPU: a workload of n units is a gang of n 1-GPU pods (a
ResourceClaimTemplate per pod). Every workload comes from its own Job (own name, uid, labels,
annotations and command), defaulted as the API server does (``queueing.testing.defaults``);
``--copies`` copies one Job's WorkloadInfo per ClusterQueue and size instead, as sessions 1-4 did.
75 nodes x 8 GPUs, each a ResourceSlice device of class ``gpu.nvidia.com`` (CEL selector). Targets: <= 30 s wall, device utilisation >= 55.9 % (Kueue's
measured mean for this shape).

Shape ``large``: 1,000 ClusterQueues (200 cohorts x 5), 50 workloads each (35 small, 10 medium, 5
large, same sizes and rates) = 50,000 workloads on 2,500 nodes x 8 GPUs. Target: <= 3 min wall.

Evicted workloads are requeued after ``--backoff`` seconds (default 0: Kueue requeues preempted
workloads at once; the controller's default backoff of 60 s is for waitForPodsReady). The run prints
wall time, virtual makespan, cycles, admissions, evictions, device utilisation, and per-workload-size
mean wait. docs/performance/admission.md records a run. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from queueing.api.base import KubeObject
from queueing.api.core import Job
from queueing.api.registry import parse_object
from queueing.api.v1beta1 import Workload
from queueing.scheduling.config import SchedulingConfig
from queueing.scheduling.from_api import ApiContext, queue_specs, workload_info
from queueing.scheduling.jobs import workload_for_job
from queueing.scheduling.snapshot import WorkloadInfo
from queueing.simulate.engine import Simulation
from queueing.simulate.scenario import Scenario, SimJob
from queueing.testing.defaults import default_job, generate_job_selector
from queueing.verify import verify_from_env

DRIVER = "gpu.nvidia.com"
SIZES = {  # name: (units, duration s, priority, interval s, count per CQ in baseline)
    "small": (1, 0.2, 50, 0.1, 350),
    "medium": (5, 0.5, 100, 0.5, 100),
    "large": (20, 1.0, 200, 1.2, 50),
}


def cluster(nodes: int) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for i in range(nodes):
        name = f"node-{i:04d}"
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-H200"}},
                "status": {"allocatable": {"cpu": "192", "memory": "2Ti", "pods": "110"}},
            }
        )
        docs.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{name}-{DRIVER}"},
                "spec": {
                    "driver": DRIVER,
                    "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                    "nodeName": name,
                    "devices": [
                        {
                            "name": f"gpu-{g}",
                            "attributes": {"type": {"string": "gpu"}, "index": {"int": g}},
                            "capacity": {"memory": {"value": "143771Mi"}},
                        }
                        for g in range(8)
                    ],
                },
            }
        )
    docs.append(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": DRIVER},
            "spec": {
                "selectors": [
                    {
                        "cel": {
                            "expression": f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'"
                        }
                    }
                ]
            },
        }
    )
    return docs


def queues(cohorts: int, per_cohort: int) -> list[dict[str, Any]]:
    q = "queueing.dra.io/v1beta1"
    docs: list[dict[str, Any]] = [
        {"apiVersion": q, "kind": "ResourceFlavor", "metadata": {"name": "default"}},
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one-gpu", "namespace": "bench"},
            "spec": {
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}}
            },
        },
    ]
    for c in range(cohorts):
        for k in range(per_cohort):
            name = f"cq-{c:03d}-{k}"
            docs.append(
                {
                    "apiVersion": q,
                    "kind": "ClusterQueue",
                    "metadata": {"name": name},
                    "spec": {
                        "cohortName": f"cohort-{c:03d}",
                        "namespaceSelector": {},
                        "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
                        "resourceGroups": [
                            {
                                "coveredResources": [DRIVER],
                                "flavors": [
                                    {
                                        "name": "default",
                                        "resources": [
                                            {"name": DRIVER, "nominalQuota": 20, "borrowingLimit": 100}
                                        ],
                                    }
                                ],
                            }
                        ],
                    },
                }
            )
            docs.append(
                {
                    "apiVersion": q,
                    "kind": "LocalQueue",
                    "metadata": {"name": name, "namespace": "bench"},
                    "spec": {"clusterQueue": name},
                }
            )
    for size, (_, _, prio, _, _) in SIZES.items():
        docs.append(
            {"apiVersion": q, "kind": "WorkloadPriorityClass", "metadata": {"name": size}, "value": prio}
        )
    return docs


def user_job(name: str, cq: str, size: str, duration: float) -> dict[str, Any]:
    """A Job as a user submits it (one per workload, with its own name)."""
    units = SIZES[size][0]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "bench",
            "labels": {"queueing.dra.io/queue-name": cq, "queueing.dra.io/priority-class": size},
        },
        "spec": {
            "parallelism": units,
            "template": {
                "metadata": {
                    "labels": {"app": "bench", "size": size},
                    "annotations": {"simulate.queueing.dra.io/duration": f"{duration:g}s"},
                },
                "spec": {
                    "restartPolicy": "Never",
                    "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.example/bench:1.0",
                            "command": ["sleep", f"{duration:g}"],
                            "resources": {"claims": [{"name": "gpu"}]},
                        }
                    ],
                },
            },
        },
    }


def api_server_job(body: dict[str, Any], uid: str) -> Job:
    """``body`` (changed in place) as the API server stores it: defaulted, with its uid and the labels and selector of
    selector generation (``controller-uid``, ``job-name`` and their ``batch.kubernetes.io/`` forms)."""
    body["metadata"]["uid"] = uid
    return Job.model_validate(generate_job_selector(default_job(body)))


@contextlib.contextmanager
def long_lived(collect: bool = False) -> Iterator[None]:
    """Build objects that live as long as the process with automatic garbage collection off, then
    freeze them (``gc.freeze``): every collection while they pile up would walk all of them again
    (building the baseline's 15,000 Jobs and Workloads took 3-4 times as long with it on: 48 of a
    Job's 60 us validation, 38 of its Workload's 54 us), and later collections skip them. Building
    leaves no cyclic garbage to collect first (a full collection after the baseline's build freed
    nothing and took 0.9 s); ``collect``: collect once before freezing (after work that does)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collect:
            gc.collect()
        gc.freeze()
        if enabled:
            gc.enable()


def build(shape: str, fraction: float = 1.0, copies: bool = False) -> Scenario:
    """The shape's cluster, queues and workloads: each workload from its own Job, defaulted as the
    API server does (``copies``: as sessions 1-4 did, one Job per ClusterQueue and size whose
    WorkloadInfo is copied under each workload's name). Built ``long_lived``."""
    with long_lived():
        return _build(shape, fraction, copies)


def _build(shape: str, fraction: float, copies: bool) -> Scenario:
    if shape == "baseline":
        cohorts, per_cohort, nodes, scale = 5, 6, 75, 1.0
    else:
        cohorts, per_cohort, nodes, scale = 200, 5, 2500, 0.1
    scale *= fraction
    objs: list[KubeObject] = [parse_object(d) for d in (*cluster(nodes), *queues(cohorts, per_cohort))]
    ctx = ApiContext.from_objects(objs, verify=verify_from_env(os.environ))
    sc = Scenario(objects=objs)
    for o in objs:
        kind = type(o).__name__
        if kind == "Node":
            sc.nodes.append(o)  # type: ignore[arg-type]
        elif kind == "ResourceSlice":
            sc.slices.append(o)  # type: ignore[arg-type]
        elif kind == "DeviceClass":
            sc.classes.append(o)  # type: ignore[arg-type]
        elif kind == "ResourceClaimTemplate":
            sc.templates.append(o)  # type: ignore[arg-type]
    sc.queues = queue_specs(objs, ["bench"])
    wpcs, pcs = ctx.workload_priority_classes, ctx.priority_classes
    for cq in sc.queues.cluster_queues:
        for size, (_, duration, _, interval, count) in SIZES.items():
            proto: tuple[Workload, WorkloadInfo] | None = None
            for i in range(round(count * scale)):
                arrival = round(i * interval, 3)
                name = f"{cq.name}-{size}-{i}"
                uid = f"uid-{name}"
                if copies:
                    if proto is None:
                        wl0 = workload_for_job(
                            api_server_job(user_job(f"{cq.name}-{size}", cq.name, size, duration), uid),
                            wpcs,
                            pcs,
                        )
                        assert wl0 is not None
                        proto = (wl0, workload_info(wl0, ctx))
                    wl, info = proto
                else:
                    got = workload_for_job(
                        api_server_job(user_job(name, cq.name, size, duration), uid), wpcs, pcs
                    )
                    assert got is not None
                    wl, info = got, workload_info(got, ctx)
                # the names of sessions 1-4 (the controller would call the Workload job-<name>), so
                # that ``--hash`` compares with theirs
                info = replace(info, name=name, uid=uid, creation_time=arrival)
                sc.jobs.append(SimJob(f"bench/{name}", "Job", wl, info, arrival, duration))
    sc.jobs.sort(key=lambda j: (j.arrival, j.key))
    return sc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=("baseline", "large"), default="baseline")
    ap.add_argument(
        "--no-fair-sharing", action="store_true", help="switch fair sharing off (Kueue's baseline has it off)"
    )
    ap.add_argument("--backoff", type=float, default=0.0, help="requeue backoff base after an eviction (s)")
    ap.add_argument(
        "--fraction",
        type=float,
        default=1.0,
        help="run only this fraction of each queue's workloads (profiling)",
    )
    ap.add_argument(
        "--copies",
        action="store_true",
        help="build the workloads as sessions 1-4 did: one Job per ClusterQueue and size, its "
        "WorkloadInfo copied under each workload's name (one fit signature per ClusterQueue and size)",
    )
    ap.add_argument(
        "--hash",
        action="store_true",
        help="also print a hash of all events and one of every admission's device plan (to check that a "
        "change of speed changes no decision)",
    )
    args = ap.parse_args()
    reference = reference_loop()
    t0, c0 = time.perf_counter(), time.process_time()
    sc = build(args.shape, args.fraction, args.copies)
    t_build, c_build = time.perf_counter() - t0, time.process_time() - c0
    cfg = SchedulingConfig.from_dict(
        {
            "fairSharing": {"enable": not args.no_fair_sharing},
            "waitForPodsReady": {
                "requeuingStrategy": {
                    "backoffBaseSeconds": args.backoff,
                    "backoffMaxSeconds": max(args.backoff, 1),
                }
            },
        }
    )
    last = [time.perf_counter()]

    def progress(done: int, total: int, now: float) -> None:
        t = time.perf_counter()
        if t - last[0] > 10:
            last[0] = t
            print(f"  ... {done}/{total} finished, virtual {now:.1f}s, wall {t - t0:.0f}s", flush=True)

    t1, c1 = time.perf_counter(), time.process_time()
    result = Simulation(sc, cfg, progress=progress).run()
    t_run, c_run = time.perf_counter() - t1, time.process_time() - c1
    s = result.summary
    admissions = sum(q.admissions for q in s.cluster_queues.values())
    evictions = sum(q.evicted for q in s.cluster_queues.values())
    waits: dict[str, list[float]] = {k: [] for k in SIZES}
    arrival = {j.key: j.arrival for j in sc.jobs}
    seen: set[str] = set()
    for e in result.events:
        if e.event == "Admitted" and e.job not in seen:
            seen.add(e.job)
            waits[e.job.rsplit("-", 2)[-2]].append(e.time - arrival[e.job])
    print(
        f"shape {args.shape}: {len(sc.queues.cluster_queues)} ClusterQueues, {len(sc.jobs)} workloads, "
        f"{len(sc.nodes)} nodes x 8 GPUs; fair sharing {'off' if args.no_fair_sharing else 'on'}; backoff {args.backoff:g}s"
    )
    print(
        f"build {t_build:.1f}s wall, {c_build:.1f}s CPU ({'copies of one Job per queue and size' if args.copies else 'one Job per workload'}, "
        f"{len({j.info.fit_signature for j in sc.jobs})} fit signatures); simulation {t_run:.1f}s wall, "
        f"{c_run:.1f}s CPU (total {t_build + t_run:.1f}s wall)"
    )
    print(
        f"virtual makespan {s.time:.1f}s, {s.cycles} cycles, {admissions} admissions, {evictions} evictions, "
        f"{s.finished}/{s.jobs} finished"
    )
    print(f"device utilisation {s.device_utilisation * 100:.1f}% of {s.devices} GPUs")
    for k, w in waits.items():
        if w:
            print(f"  {k:6s} mean wait {sum(w) / len(w):.2f}s (n={len(w)})")
    if args.hash:
        events, plans = decision_hashes(result.events)
        print(f"events {events}, device plans {plans}")
    age = process_age()
    print(
        f"process wall {age:.1f}s from exec to exit (interpreter, imports, reference loop, build, run, report)"
        if age is not None
        else "process wall: unknown (needs /proc)"
    )
    print(f"process CPU {time.process_time():.1f}s (wall above CPU: other processes shared the cores)")
    print(f"machine: reference loop {reference:.3f}s (fixed pure-Python work; compares machines and days)")
    # the scenario and the result stay referenced past this frame: freeing their millions of
    # objects when it returns took 2 s of the large shape's wall time (see ``__main__`` below)
    _KEEP.extend((sc, result))
    return 0


_KEEP: list[object] = []


def reference_loop() -> float:
    """Seconds for a fixed piece of pure-Python work (dict updates, tuple sorting): the speed of this
    machine today. The host behind this 2-core machine differs from day to day by up to 3x; figures
    from different days compare only through this number."""
    t = time.perf_counter()
    d: dict[int, int] = {}
    for i in range(2_000_000):
        k = i % 1013
        d[k] = d.get(k, 0) + i
    sorted((v % 7919, k, str(v)) for k, v in d.items() for _ in range(100))
    return time.perf_counter() - t


def process_age() -> float | None:
    """Seconds since this process was started (Linux: /proc), or None."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")


def decision_hashes(events: list[Any], verify: bool | None = None) -> tuple[str, str]:
    """Hashes of the events and of each admission's plan (per pod: node, devices, claims, node
    resources): equal hashes, the same decisions. A planned claim's text is made once per distinct
    value (``_ClaimTexts``: pydantic's repr of the allocation results was most of the hash's time);
    ``verify`` (None: ``QUEUEING_VERIFY``) also makes every claim's text afresh and compares."""
    if verify is None:
        verify = verify_from_env(os.environ)
    texts = _ClaimTexts(verify)
    ev, dev = hashlib.sha256(), hashlib.sha256()
    for e in events:
        ev.update(repr(e).encode())
        if e.event == "Admitted" and e.admission is not None:
            a = e.admission.assignment
            pods = [
                (pp.pod, pp.node, [p.device.key for p in pp.picks], texts.of(pp.claims), pp.node_resources)
                for pp in a.placement.detail.pods
            ]
            dev.update(repr((e.job, sorted(a.usage.items()), pods)).encode())
    return ev.hexdigest()[:16], dev.hexdigest()[:16]


class _Text:
    """An object whose repr is a given text (stands for the object it was made of)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


class _ClaimTexts:
    """``repr`` of planned claims, made once per distinct value: a claim's repr is a function of its
    fields and of its results' fields (pydantic's repr: the fields in order, then the extra ones;
    pydantic validated each field to its annotated type, so equal values have equal reprs), so
    claims whose values agree share one text. A claim with a result that has extra fields or an
    unhashable value (a list, a dict) is not kept (its repr is made each time)."""

    def __init__(self, verify: bool) -> None:
        self.verify = verify
        self._memo: dict[tuple[object, ...], _Text] = {}
        # id of a claim object -> (the object, held so that its id is not reused; its text): the
        # placer shares one object per claim value (``DraPlacer._planned``)
        self._by_id: dict[int, tuple[object, object]] = {}

    def of(self, claims: tuple[Any, ...]) -> tuple[object, ...]:
        """``claims`` with each claim replaced by an object of the same repr."""
        return tuple(map(self._by_object, claims))

    def _by_object(self, c: Any) -> object:
        got = self._by_id.get(id(c))
        if got is not None and got[0] is c:
            if self.verify and repr(got[1]) != repr(c):
                raise RuntimeError(
                    f"verify: decision hash: the kept text of claim {c.name} differs from its repr"
                )
            return got[1]
        text = self._one(c)
        self._by_id[id(c)] = (c, text)
        return text

    def _one(self, c: Any) -> object:
        results = c.results
        if any(r.__pydantic_extra__ for r in results):
            return c
        key = (
            type(c),
            c.name,
            c.resource_claim_name,
            c.extended,
            *[(type(r), *r.__dict__.values()) for r in results],
        )
        try:
            got = self._memo.get(key)
        except TypeError:  # an unhashable value
            return c
        if got is None:
            got = self._memo[key] = _Text(repr(c))
        elif self.verify and got.text != repr(c):
            raise RuntimeError(
                f"verify: decision hash: the kept text of claim {c.name} differs from its repr"
            )
        return got


if __name__ == "__main__":
    code = main()
    # the run leaves millions of objects behind; freeing them one by one at interpreter exit took 6 s
    # of the full baseline's wall time and serves no one: leave without it
    # (under cProfile, which writes its file at exit, exit normally)
    if sys.getprofile() is not None:
        raise SystemExit(code)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
