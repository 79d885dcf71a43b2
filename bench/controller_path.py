"""Controller path benchmark: one pod's 1-GPU claim, decided through the cluster cache the controller
keeps (``queueing.cache.ClusterCache``), on a cluster that keeps changing.

    python bench/controller_path.py [--nodes 1000 100] [--decisions 200] [--old 5] [--seed 1]

Cluster: ``bench/allocator.py``'s (nodes x 8 H200-like GPUs, one node-local ResourceSlice each, half
of the GPUs taken by allocated ResourceClaims, CEL class selector). The objects go into the cache as
informer events (ADDED), the cache builds its placer once; then ``--decisions`` times: one small
event as a live cluster sends them (a claim of the load deallocated, or allocated again; a pod on a
random node started, finished or deleted), then one decision for a Job of one pod with a 1-GPU claim
from a ResourceClaimTemplate (bench/admission.py's small Job):

* ``place``: ``cache.placer()`` then ``DraPlacer.place`` (the placement the cycle asks for);
* ``cycle``: ``cache.placer()`` then ``run_cycle`` with that Job pending in one ClusterQueue (the
  controller's cycle entry point: quota, flavors, placement, the result);
* ``event``: applying the event to the cache.

p50 and p90 of each, in ms. Then the rebuild a structural event costs (a node's labels, a slice's
devices changed: the next ``placer()`` builds a new placer, taking over the unchanged pools). ``old``: the path before the cache, a new ``DraPlacer`` per decision
(what ``Controller._schedule`` built on every sync), ``--old`` decisions, each checked to decide
exactly as the cache's placer at that moment. Targets: p50 <= 3 ms on
1,000 nodes (upstream's structured allocator on the same input), <= 0.3 ms on 100 nodes.
docs/performance.md records a run. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from admission import queues, reference_loop, user_job
from allocator import CLASSES, build

from queueing.api.base import KubeObject
from queueing.api.core import Job, Pod
from queueing.api.registry import parse_object
from queueing.cache import ClusterCache, light_pod
from queueing.gcpolicy import paused
from queueing.scheduling.backlog import Backlog
from queueing.scheduling.cycle import CycleMemo, run_cycle
from queueing.scheduling.dra_placer import DraPlacer, DraState
from queueing.scheduling.from_api import ApiContext, queue_specs, workload_info
from queueing.scheduling.jobs import workload_for_job
from queueing.scheduling.placer import Placement
from queueing.scheduling.snapshot import ClusterSnapshot, WorkloadInfo


def ms(xs: list[float], q: float) -> float:
    return (
        1000 * statistics.quantiles(xs, n=100, method="inclusive")[round(q * 100) - 1]
        if len(xs) > 1
        else 1000 * xs[0]
    )


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def foreign_pod(i: int, node: str, phase: str) -> Pod:
    raw = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"other-{i}", "namespace": "other", "resourceVersion": str(i)},
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]},
        "status": {"phase": phase},
    }
    return Pod.model_validate(light_pod(raw))


def _decision(p: object) -> object:
    """What a placement decided: nodes and devices per pod (or the failure's message)."""
    if isinstance(p, Placement):
        return p.nodes, [pp.devices for pp in getattr(p.detail, "pods", ())]
    return str(p)


def run(nodes: int, decisions: int, old: int, seed: int) -> None:
    node_objs, slices, used = build(nodes, 8, 0.5, seed)
    qobjs: list[KubeObject] = [parse_object(d) for d in queues(1, 1)]
    templates = [o for o in qobjs if type(o).__name__ == "ResourceClaimTemplate"]
    ctx = ApiContext.from_objects([*qobjs, *CLASSES])
    specs = queue_specs(qobjs, ["bench"])
    wl = workload_for_job(
        Job.model_validate(user_job("small-0", specs.cluster_queues[0].name, "small", 0.2)),
        ctx.workload_priority_classes,
        ctx.priority_classes,
    )
    assert wl is not None
    info: WorkloadInfo = workload_info(wl, ctx)
    snapshot = ClusterSnapshot(
        cluster_queues=specs.cluster_queues,
        cohorts=specs.cohorts,
        local_queues=specs.local_queues,
        flavors=specs.flavors,
        pending=(info,),
        namespaces=specs.namespaces,
    )

    cache = ClusterCache()
    t_build, _ = timed(
        lambda: (cache.add_all([*node_objs, *slices, *CLASSES, *used, *templates]), cache.placer())
    )
    rng = random.Random(seed)
    gone: dict[str, Any] = {}  # claims of the load deallocated for now
    pods: dict[int, Pod] = {}

    def event() -> None:
        if rng.random() < 0.5:
            c = rng.choice(used)
            if c.key in gone:
                cache.apply(None, gone.pop(c.key))
            else:
                cache.apply(c, None)
                gone[c.key] = c
        else:
            i = rng.randrange(64)
            old_pod = pods.get(i)
            node = rng.choice(node_objs).name
            if old_pod is None:
                new: Pod | None = foreign_pod(i, node, "Running")
            elif old_pod.status.phase == "Running":
                new = foreign_pod(i, old_pod.spec.node_name or node, "Succeeded")
            else:
                new = None
            cache.apply(old_pod, new)
            if new is None:
                pods.pop(i, None)
            else:
                pods[i] = new

    place_t: list[float] = []
    cycle_t: list[float] = []
    event_t: list[float] = []
    placed = admitted = 0
    for k in range(decisions):
        dt, _ = timed(event)
        event_t.append(dt)
        if k % 2:
            dt, res = timed(lambda: run_cycle(snapshot, cache.placer(), 0.0))
            cycle_t.append(dt)
            admitted += bool(getattr(res, "admissions", ()))
        else:
            dt, got = timed(lambda: cache.placer().place(info, {"main": 1}, {}, DraState()))
            place_t.append(dt)
            placed += isinstance(got, Placement)
    assert cache.rebuilds == 1

    # structural events: the next decision rebuilds the placer, taking over what did not change
    rebuild_t: list[tuple[str, float]] = []
    n0 = cache.nodes[node_objs[0].key]
    relabelled = n0.model_copy(update={"metadata": n0.metadata.model_copy(update={"labels": {"pool": "x"}})})
    s0 = cache.slices[slices[len(slices) // 2].key]
    fewer = s0.model_copy(update={"spec": s0.spec.model_copy(update={"devices": s0.spec.devices[:-1]})})
    for what, old_obj, new_obj in (("a node's labels", n0, relabelled), ("a slice's devices", s0, fewer)):
        cache.apply(old_obj, new_obj)
        dt, _ = timed(cache.placer)
        rebuild_t.append((what, dt))

    old_t: list[float] = []
    for _ in range(old):
        claims = [c for c in used if c.key not in gone]

        def fresh(claims: list[Any] = claims) -> object:
            placer = DraPlacer(node_objs, slices, CLASSES, claims=claims, templates=templates)  # type: ignore[arg-type]
            return placer.place(info, {"main": 1}, {}, DraState())

        dt, want = timed(fresh)
        old_t.append(dt)
        got = cache.placer().place(info, {"main": 1}, {}, DraState())
        assert _decision(got) == _decision(want), "the cache's placer and a new one decide differently"

    print(
        f"{nodes} nodes x 8 GPUs, 50 % fill: cache built once in {t_build:.2f}s; {decisions} decisions, {placed} placed, "
        f"{admitted} cycles admitted"
    )
    for what, xs in (("place", place_t), ("cycle", cycle_t), ("event", event_t)):
        print(f"  {what:6s} p50 {ms(xs, 0.5):8.3f} ms   p90 {ms(xs, 0.9):8.3f} ms   (n={len(xs)})")
    for what, dt in rebuild_t:
        print(f"  rebuild after a change of {what}: {1000 * dt:.1f} ms")
    if old_t:
        print(f"  old    p50 {ms(old_t, 0.5):8.3f} ms   (a new DraPlacer per decision, n={len(old_t)})")


def large_cycle(pending: int, cycles: int = 5) -> None:
    """One controller cycle on ``bench/admission.py``'s large shape (2,500 nodes × 8 GPUs, 1,000
    ClusterQueues), ``pending`` workloads waiting, each its own Job (one fit signature per Job as the
    API server makes them, since 26ec813 by placement fields only): the cycle reads the kept cache's
    placer and a snapshot built afresh, as the controller does on every sync, with the pending
    workloads in a kept ``Backlog`` (the controller's ``PendingWorkloads.prepare``; until
    2026-12-02 this bench passed them as ``pending``, so every cycle sorted the 12,000 into runs
    anew, which the controller does not). The first cycle also
    evaluates CEL on every device (a controller does that once, when slices arrive); the next ones
    are the steady state, timed ``cycles`` times in each of three ways:

    * ``as called``: a new ``CycleMemo`` per cycle and the garbage collector as it is, with the
      objects built before (scenario, cache, and what the first cycle left in the cache's placer)
      frozen (``gc.freeze``, as ``admission.long_lived`` leaves them);
    * ``memo``: one ``CycleMemo`` kept from cycle to cycle (what the simulator does);
    * ``memo, no gc``: also without automatic collection during the cycle (``queueing.gcpolicy.paused``:
      what ``queueing run`` does since session 6, and the simulator's policy; collected explicitly
      between cycles here, the time of that collection printed apart).

    Wall and CPU seconds per cycle (median of ``cycles``); CPU is what the cycle costs, wall adds
    whatever else ran on the cores."""
    import gc

    import admission

    sc = admission.build("large")
    infos = tuple(j.info for j in sc.jobs[:pending])
    q = sc.queues
    cache = ClusterCache()
    with admission.long_lived():
        t_build, _ = timed(
            lambda: (cache.add_all([*sc.nodes, *sc.slices, *sc.classes, *sc.templates]), cache.placer())
        )

    backlog = Backlog(infos, released=0.0)  # kept between cycles, as the controller keeps it

    def cycle(memo: CycleMemo | None) -> Any:
        snapshot = ClusterSnapshot(
            cluster_queues=q.cluster_queues,
            cohorts=q.cohorts,
            local_queues=q.local_queues,
            flavors=q.flavors,
            backlog=backlog,
            namespaces=q.namespaces,
        )
        return run_cycle(snapshot, cache.placer(), 0.0, memo=memo)

    def measured(memo: CycleMemo | None) -> tuple[float, float, Any]:
        t, c = time.perf_counter(), time.process_time()
        got = cycle(memo)
        return time.perf_counter() - t, time.process_time() - c, got

    with admission.long_lived(
        collect=True
    ):  # what the first cycle fills in (CEL results per device) lives on too
        t_first, res = timed(lambda: cycle(None))  # CEL cold
    decided = _cycle_decisions(res)
    kept = CycleMemo()
    rows: list[tuple[str, list[float], list[float]]] = []
    collect_t: list[float] = []
    for label, memo_of, auto in (
        ("as called", lambda: None, True),
        ("memo", lambda: kept, True),
        ("memo, no gc", lambda: kept, False),
    ):
        walls, cpus = [], []
        for _ in range(cycles):
            if auto:
                w, c, res = measured(memo_of())
            else:
                with paused():
                    w, c, res = measured(memo_of())
                    dt, _ = timed(gc.collect)
                collect_t.append(dt)
            assert _cycle_decisions(res) == decided, f"{label}: the cycle decided differently"
            res = None
            walls.append(w)
            cpus.append(c)
        rows.append((label, walls, cpus))
    sigs = len({i.fit_signature for i in infos})
    print(
        f"large shape, {len(infos)} pending ({sigs} fit signatures), {len(sc.nodes)} nodes: cache built in "
        f"{t_build:.1f}s; first cycle (CEL cold) {t_first:.2f}s; {len(decided[0])} admissions per cycle, "
        f"the same in every cycle"
    )
    for label, walls, cpus in rows:
        print(
            f"  {label:12s} wall {statistics.median(walls):.3f}s (min {min(walls):.3f})   "
            f"CPU {statistics.median(cpus):.3f}s (min {min(cpus):.3f})   n={len(walls)}"
        )
    print(f"  collection after a cycle (no gc): median {statistics.median(collect_t):.3f}s")


def _cycle_decisions(res: Any) -> tuple[list[tuple[str, object]], list[str]]:
    return (
        [(a.key, _decision(a.assignment.placement)) for a in res.admissions],
        sorted(p.preemptor for p in res.preemptions),
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[1000, 100])
    ap.add_argument("--decisions", type=int, default=200)
    ap.add_argument("--old", type=int, default=5, help="decisions on the old path (a new placer each)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--large-cycle",
        type=int,
        metavar="PENDING",
        help="instead: time one controller cycle on the large shape with PENDING workloads waiting",
    )
    ap.add_argument("--cycles", type=int, default=5, help="with --large-cycle: cycles timed per way")
    args = ap.parse_args()
    reference = reference_loop()
    if args.large_cycle:
        large_cycle(args.large_cycle, args.cycles)
    for n in [] if args.large_cycle else args.nodes:
        run(n, args.decisions, args.old, args.seed)
    print(f"machine: reference loop {reference:.3f}s (fixed pure-Python work; compares machines and days)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
