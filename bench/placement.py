"""Placement benchmark: the same seeded arrival stream under ``FirstFit`` and ``LeastFragmentation``
(ResourceFlavor ``placementPolicy``), in one run, through the real DRA placer on H200 nodes.

    python bench/placement.py [--nodes 100] [--jobs 2000] [--load 1.3] [--seed 1]
                              [--trace mixed|alibaba|rack|mig|both|all] [--mig-nodes 12] [--mig-jobs 1500]
                              [--seeds 1] [--milp-nodes 4,8] [--plots DIR] [--quick]

Cluster: ``--nodes`` H200 nodes, 8 cards each, published with dynamic MIG as NVIDIA's DRA driver
does (``tests/fixtures/dra/h200.py``: a counter set per card, one counter per memory slice, whole-GPU
and MIG devices that consume them), read off the real card in ../shared/hardware/h200.

Shapes: whole-GPU gangs of 1, 2, 4, 8 and 16 GPUs (a pod per up to 8 GPUs, each pod's GPUs on its
node: ``g16`` is 2 pods x 8) and single-pod MIG jobs 1g.18gb, 2g.35gb, 3g.71gb, 4g.71gb, 7g.141gb.
Traces: ``mixed`` (both kinds) and ``alibaba``, whose size mix is shaped like the public Alibaba
GPU trace (cluster-trace-gpu-v2020, as the FGD paper describes it: most tasks want one GPU or a
fraction of one, few want 2-8; the fractions here are MIG profiles); ``mig``, the heavy-load MIG
trace: MIG jobs only (the mixed trace's MIG mix) on ``--mig-nodes`` nodes, ``--mig-jobs`` long, so
that MIG jobs queue under both policies for most of the run (the report prints in how many samples
after the warm-up MIG jobs were waiting, and how many on average). Approximate by design: the mix
is the published shape, not the trace. Arrivals are Poisson with a rate that offers ``--load`` times
the cluster's capacity; durations exponential (mean 1 h), from one seed: both policies see the very
same jobs; averages over time start after one mean duration (the warm-up). The queue is one BestEffortFIFO queue: at every arrival and finish the waiting jobs are
tried in arrival order (a shape that failed is not tried again until something finishes).

Per policy it prints: stranded GPUs (free GPU capacity, in cards, that no waiting shape can use: a
free part of a card no waiting MIG profile can be placed on, and no waiting whole-GPU shape can use
because its node lacks the free cards a pod needs; 0 while nothing waits) averaged over time; admitted jobs (all and MIG);
device utilisation (running jobs' GPU units / capacity; a MIG profile counts its memory slices / 8);
mean and p90 wait per shape; placement CPU per decision (``DraPlacer.place``). With ``--milp-nodes``
it also fills small clusters once from a seeded batch larger than they hold, jobs in order (each
policy), and solves the offline optimum of the same batch as a MILP (HiGHS, ``highspy``: which jobs,
on which card and MIG start, under every counter of the card), and prints the gap. ``--plots DIR``
writes PNGs of utilisation and stranded GPUs over time (matplotlib). docs/performance/placement.md
records a run. ``--quick``: a small run for the smoke test.

``--seeds N`` replays seeds ``--seed`` .. ``--seed``+N-1 (each a new arrival stream, both policies)
and then summarises each figure over the seeds: per policy mean ± standard deviation [min .. max],
and the change of LeastFragmentation against FirstFit seed by seed (paired: the same jobs), with
its own spread, so a change can be told from the noise between seeds; the mean waits of 8- and
16-GPU gangs are also pooled over every job of every seed. Waits "with the unplaced" count the
jobs still waiting at the end with the wait they had then (otherwise a policy that leaves its
longest waiters unplaced looks better for it).
"""

from __future__ import annotations

import argparse
import gc
import heapq
import math
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from queueing.api.core import Node, PodSpec, PodTemplateSpec
from queueing.api.resource import DeviceClass, ResourceClaimTemplate, ResourceSlice
from queueing.dra.binding import claim_from_template
from queueing.dra.scoring import FIRST_FIT, LEAST_FRAGMENTATION, POLICIES, Scorer
from queueing.scheduling.dra_placer import ClaimRef, DraPlacer, DraPodSet, DraRequest, DraState
from queueing.scheduling.placer import Placement
from queueing.scheduling.snapshot import FlavorSpec, PodSetInfo, WorkloadInfo

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "fixtures" / "dra"))
sys.path.insert(0, str(REPO / "bench"))
import h200  # noqa: E402  (the fixture that builds H200 slices from the hardware read-out)
from admission import reference_loop  # noqa: E402

HW = h200.hardware()
PROFILE = {p["name"]: p for p in HW["profiles"]}
MIG_PROFILES = ("1g.18gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb")
MEAN_DURATION = 3600.0
WARM_UP = MEAN_DURATION  # averages over time start here


@dataclass(frozen=True)
class Shape:
    name: str
    kind: str  # "gpu" | "mig"
    pods: int
    per_pod: int  # whole GPUs per pod (gpu)
    profile: str = ""  # MIG profile (mig)
    topology: str = ""  # "required" | "preferred": the rack annotation (rack trace)

    @property
    def units(self) -> Fraction:
        if self.kind == "gpu":
            return Fraction(self.pods * self.per_pod)
        return Fraction(PROFILE[self.profile]["memorySlices"], h200.SLICES)


GPU_SHAPES = {
    "g1": Shape("g1", "gpu", 1, 1),
    "g2": Shape("g2", "gpu", 1, 2),
    "g4": Shape("g4", "gpu", 1, 4),
    "g8": Shape("g8", "gpu", 1, 8),
    "g16": Shape("g16", "gpu", 2, 8),
}
MIG_SHAPES = {p: Shape(p, "mig", 1, 0, p) for p in MIG_PROFILES}
# rack trace: whole-node gangs (pods of 8 GPUs) that ask for one rack (required) or as few as possible
RACK_SHAPES = {
    f"{m[0]}{n}x8": Shape(f"{m[0]}{n}x8", "gpu", n, 8, topology=m)
    for m in ("required", "preferred")
    for n in (2, 4, 8)
}
SHAPES = GPU_SHAPES | MIG_SHAPES | RACK_SHAPES
RACK_LABEL = "example.com/rack"
HOSTNAME = "kubernetes.io/hostname"
# fractions of jobs per shape
MIXES: dict[str, dict[str, float]] = {
    "mixed": {
        "g1": 0.18,
        "g2": 0.10,
        "g4": 0.08,
        "g8": 0.07,
        "g16": 0.02,
        "1g.18gb": 0.20,
        "2g.35gb": 0.12,
        "3g.71gb": 0.10,
        "4g.71gb": 0.08,
        "7g.141gb": 0.05,
    },
    # MIG jobs only (the mixed trace's MIG mix): the heavy-load MIG trace (``--mig-nodes``, long
    # enough that MIG jobs queue for hours under both policies: the report says how long they waited)
    "mig": {
        "1g.18gb": 0.20,
        "2g.35gb": 0.12,
        "3g.71gb": 0.10,
        "4g.71gb": 0.08,
        "7g.141gb": 0.05,
    },
    # shaped like the Alibaba GPU trace's sizes: fractional and single-GPU tasks dominate
    "alibaba": {
        "1g.18gb": 0.22,
        "2g.35gb": 0.10,
        "3g.71gb": 0.05,
        "4g.71gb": 0.03,
        "g1": 0.45,
        "g2": 0.06,
        "g4": 0.04,
        "g8": 0.04,
        "g16": 0.01,
    },
    # 4 racks x 16 nodes; gangs of whole nodes with a rack annotation among smaller jobs
    "rack": {
        "g1": 0.25,
        "g2": 0.12,
        "g4": 0.12,
        "g8": 0.08,
        "p2x8": 0.12,
        "p4x8": 0.10,
        "p8x8": 0.05,
        "r2x8": 0.08,
        "r4x8": 0.06,
        "r8x8": 0.02,
    },
}


def template(shape: Shape) -> ResourceClaimTemplate:
    if shape.kind == "gpu":
        body: dict[str, Any] = {"deviceClassName": "gpu.nvidia.com", "count": shape.per_pod}
    else:
        expr = f"device.attributes['gpu.nvidia.com'].profile == '{shape.profile}'"
        body = {"deviceClassName": "mig.nvidia.com", "count": 1, "selectors": [{"cel": {"expression": expr}}]}
    return ResourceClaimTemplate.model_validate(
        {
            "metadata": {"name": shape.name.replace(".", "-"), "namespace": "default"},
            "spec": {"spec": {"devices": {"requests": [{"name": "g", "exactly": body}]}}},
        }
    )


def cluster(n: int, racks: int = 0) -> tuple[list[Node], list[ResourceSlice], list[DeviceClass]]:
    """``n`` H200 nodes with dynamic MIG; with ``racks``: without MIG, labelled with their rack."""
    per = n // racks if racks else n
    nodes = [
        Node.model_validate(h200.node(f"h200-{i:03d}", {RACK_LABEL: f"rack-{i // per}"} if racks else None))
        for i in range(n)
    ]
    slices = [
        ResourceSlice.model_validate(s)
        for i in range(n)
        for s in h200.node_slices(f"h200-{i:03d}", HW, mig=not racks)
    ]
    classes = [DeviceClass.model_validate(c) for c in h200.CLASSES]
    return nodes, slices, classes


@dataclass
class Job:
    key: int
    shape: Shape
    arrival: float
    duration: float
    start: float | None = None


def arrivals(trace: str, jobs: int, capacity: int, load: float, seed: int) -> list[Job]:
    """The seeded arrival stream (the same for both policies)."""
    rng = random.Random(f"{trace}-{seed}")
    mix = MIXES[trace]
    names = sorted(mix)
    weights = [mix[n] for n in names]
    mean_units = sum(float(SHAPES[n].units) * mix[n] for n in names) / sum(weights)
    rate = load * capacity / (mean_units * MEAN_DURATION)
    t = 0.0
    out = []
    for k in range(jobs):
        t += rng.expovariate(rate)
        shape = SHAPES[rng.choices(names, weights)[0]]
        out.append(Job(k, shape, t, rng.expovariate(1 / MEAN_DURATION)))
    return out


def workload(job: Job, requests: dict[str, DraRequest]) -> WorkloadInfo:
    return WorkloadInfo(
        namespace="default",
        name=f"job-{job.key}",
        queue_name="lq",
        pod_sets=(PodSetInfo("main", job.shape.pods),),
        placement_request=requests[job.shape.name],
        creation_time=job.arrival,
    )


def requests_of(avoid: Sequence[str] = ()) -> dict[str, DraRequest]:
    """Each shape's request; ``avoid``: node names its pods must not use (required node affinity
    ``kubernetes.io/hostname NotIn``: how ``--reserve`` keeps reserved nodes clear)."""
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x"}], "resourceClaims": [{"name": "g"}]}
    if avoid:
        term = {"matchExpressions": [{"key": HOSTNAME, "operator": "NotIn", "values": sorted(avoid)}]}
        spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
        }
    out = {}
    for s in SHAPES.values():
        t = template(s)
        body = dict(spec)
        body["resourceClaims"] = [{"name": "g", "resourceClaimTemplateName": t.name}]
        sp = PodSpec.model_validate(body)
        meta = (
            {"annotations": {f"queueing.dra.io/podset-{s.topology}-topology": RACK_LABEL}}
            if s.topology
            else None
        )
        out[s.name] = DraRequest(
            (DraPodSet("main", PodTemplateSpec(metadata=meta, spec=sp), (ClaimRef("g", None, t.name),)),)
        )
    return out


# ------------------------------------------------------------------ fragmentation measures
def card_state(scorer: Scorer, usage: Any, i: int) -> list[tuple[Fraction, frozenset[str], bool]]:
    """Per card of node i: (free share, MIG profiles placeable on it, whole card free)."""
    out = []
    for free, devs in scorer.cards(i, usage):
        profiles = frozenset(
            str(d.attributes["gpu.nvidia.com/profile"][1])
            for d in devs
            if "gpu.nvidia.com/profile" in d.attributes
        )
        whole = any(d.attributes.get("gpu.nvidia.com/type") == ("string", "gpu") for d in devs)
        out.append((free, profiles, whole))
    return out


def stranded(
    scorer: Scorer, usage: Any, n_nodes: int, waiting: set[Shape], reserved: frozenset[int] = frozenset()
) -> float:
    """Free GPU capacity (in cards) that no waiting shape can use; on ``reserved`` nodes (``--reserve``)
    all of it: only the gang they are held for may use them, and it does not fit there yet."""
    mig = {s.profile for s in waiting if s.kind == "mig"}
    per_pod = [s.per_pod for s in waiting if s.kind == "gpu"]
    need = min(per_pod) if per_pod else None
    total = Fraction(0)
    for i in range(n_nodes):
        cards = card_state(scorer, usage, i)
        if i in reserved:
            total += sum((free for free, _, _ in cards), Fraction(0))
            continue
        whole_free = sum(1 for _, _, w in cards if w)
        for free, profiles, whole in cards:
            if not free:
                continue
            if whole and need is not None and whole_free >= need:
                continue
            if profiles & mig:
                continue
            total += free
        # (a card's free part that some waiting shape could use is not stranded)
    return float(total)


# ------------------------------------------------------------------ the replay
@dataclass
class Run:
    policy: str
    admitted: int = 0
    admitted_mig: int = 0
    admitted_mig_units: Fraction = Fraction(0)  # their GPU units (memory slices / 8)
    decisions: int = 0
    cpu: float = 0.0
    warm_cpu: float = 0.0  # the warm-up before the replay (``warm``), not counted in ``cpu``
    waits: dict[str, list[float]] = field(default_factory=dict)
    # rack trace: required gangs placed over more than one rack; preferred gangs placed, and placed
    # on the fewest racks that could hold them at that moment
    required_spans: int = 0
    required: int = 0
    preferred: int = 0
    preferred_minimal: int = 0
    samples: list[tuple[float, float, float]] = field(default_factory=list)  # (t, utilisation, stranded)
    # jobs still waiting at the horizon: how long they had waited then (a policy that leaves its
    # longest waiters unplaced must not look better for it: ``mean_wait(..., censored=True)``)
    unplaced: dict[str, list[float]] = field(default_factory=dict)
    waiting_mig: list[tuple[float, int]] = field(default_factory=list)  # (t, MIG jobs waiting)


def warm(placer: DraPlacer, templates: Sequence[ResourceClaimTemplate], nodes: Sequence[Node]) -> int:
    """Evaluate every shape's device selectors on every device of every node before the replay: the
    state of a controller that has been running (its cluster cache keeps the allocator's candidate
    lists between cycles, and evaluates a device's selectors once per slice generation). Without it
    the first decisions of a replay pay for CEL evaluations the controller makes once per process,
    and more of them under a policy that visits more nodes early (LeastFragmentation orders all
    nodes; first fit stops at the first that fits); the per-decision CPU then measures warm-up, not
    decisions. Changes no decision (a cache). Returns the candidate lists built."""
    alloc = placer.cluster.allocator
    return alloc.warm(alloc.prepare([claim_from_template(t, t.name) for t in templates]), nodes)


def racks_needed(placer: DraPlacer, scorer: Scorer, pods: int) -> int:
    """The fewest racks whose whole free nodes hold ``pods`` pods of 8 GPUs (the placer's state as
    the last ``place`` synced it)."""
    usage = placer.cluster.usage
    per_rack: dict[str, int] = {}
    for i, node in enumerate(placer.cluster.nodes):
        free = sum(1 for f, _ in scorer.cards(i, usage) if f == 1)
        if free >= 8:
            rack = node.labels[RACK_LABEL]
            per_rack[rack] = per_rack.get(rack, 0) + 1
    have = 0
    for k, n in enumerate(sorted(per_rack.values(), reverse=True), 1):
        have += n
        if have >= pods:
            return k
    return 0


def replay(
    policy: str,
    jobs: Sequence[Job],
    n_nodes: int,
    horizon: float,
    sample_every: float,
    verify: bool = False,
    racks: int = 0,
    reserve: bool = False,
) -> Run:
    """One policy over ``jobs``. ``reserve``: whole-node reservation, an admission rule (the queue's,
    not the placement's): while a gang of whole-node pods (8 GPUs each) waits, the oldest such gang
    holds as many nodes as it has pods, those nearest to draining (most whole free cards, then fewest
    pods), and jobs that arrived after it may not use them (required node affinity); the gang itself
    places as usual, and the hold moves to the nodes nearest to draining at every event."""
    # the previous replay's objects are mostly in reference cycles (about 2 million at 100 nodes):
    # collected here, outside the measured decisions, instead of by a full collection that Python
    # starts in whichever decision of this replay allocates past its threshold (about 2 s of one
    # decision, 0.5-1.5 ms per decision of the figure, depending on where it lands)
    gc.collect()
    nodes, slices, classes = cluster(n_nodes, racks)
    reqs = requests_of()
    avoiding: dict[tuple[str, ...], dict[str, DraRequest]] = {(): reqs}
    reserved: frozenset[int] = frozenset()
    names: tuple[str, ...] = ()
    templates = [template(s) for s in SHAPES.values()]
    placer = DraPlacer(nodes, slices, classes, templates=templates, verify=verify)
    c0 = time.process_time()
    warm(placer, templates, nodes)
    warm_cpu = time.process_time() - c0
    levels = ((RACK_LABEL, False), ("kubernetes.io/hostname", False)) if racks else ()
    fl = FlavorSpec(
        "h200", placement_policy=policy, topology_name="dc" if racks else None, topology_levels=levels
    )
    flavors = {"main": [fl]}
    node_rack = {n.name: n.labels.get(RACK_LABEL) for n in nodes}
    scorer = Scorer(placer.cluster)
    state: DraState = placer.initial_state([])
    capacity = n_nodes * 8
    run = Run(policy, warm_cpu=warm_cpu)
    events: list[tuple[float, int, int]] = []  # (time, 0 finish / 1 arrival, job)
    for j in jobs:
        heapq.heappush(events, (j.arrival, 1, j.key))
    by_key = {j.key: Job(j.key, j.shape, j.arrival, j.duration) for j in jobs}
    pending: list[Job] = []
    running_units = Fraction(0)
    next_sample = 0.0
    failed: set[str] = set()
    while events:
        t, kind, key = heapq.heappop(events)
        if t > horizon:
            break
        while next_sample <= t:
            placer.sync(state)
            waiting = {j.shape for j in pending}
            # nothing waits: nothing is stranded
            strand = stranded(scorer, placer.cluster.usage, n_nodes, waiting, reserved) if waiting else 0.0
            run.samples.append((next_sample, float(running_units) / capacity, strand))
            run.waiting_mig.append((next_sample, sum(1 for j in pending if j.shape.kind == "mig")))
            next_sample += sample_every
        job = by_key[key]
        if kind == 0:
            state = placer.remove(state, f"default/job-{key}")
            running_units -= job.shape.units
            failed.clear()
        else:
            pending.append(job)
        head: Job | None = None
        if reserve:
            head = next((p for p in pending if p.shape.kind == "gpu" and p.shape.per_pod == 8), None)
            reserved = frozenset()
            if head is not None:
                placer.sync(state)
                usage = placer.cluster.usage
                used = placer.cluster.used
                near = sorted(
                    range(n_nodes), key=lambda i: (-scorer.whole_free(i, usage), int(used[i]["pods"]), i)
                )
                reserved = frozenset(near[: head.shape.pods])
            names = tuple(sorted(nodes[i].name for i in reserved))
            if names not in avoiding:
                if len(avoiding) > 10_000:
                    avoiding = {(): reqs}
                avoiding[names] = requests_of(names)
        still: list[Job] = []
        for p in pending:
            if p.shape.name in failed:
                still.append(p)
                continue
            kept_clear = head is not None and p.arrival > head.arrival and p.shape.per_pod != 8
            wl = workload(p, avoiding[names] if kept_clear else reqs)
            c0 = time.process_time()
            got = placer.place(wl, {}, flavors, state)
            run.cpu += time.process_time() - c0
            run.decisions += 1
            if isinstance(got, Placement) and p.shape.topology:
                spans = len({node_rack[n] for n in got.nodes})
                if p.shape.topology == "required":
                    run.required += 1
                    run.required_spans += spans > 1
                else:
                    run.preferred += 1
                    run.preferred_minimal += spans <= racks_needed(placer, scorer, p.shape.pods)
            if isinstance(got, Placement):
                if kept_clear and head is not None and set(got.nodes) & set(names):
                    raise AssertionError(f"job-{p.key} placed on a node reserved for job-{head.key}")
                state = placer.add(state, wl.key, got)
                p.start = t
                running_units += p.shape.units
                run.admitted += 1
                if p.shape.kind == "mig":
                    run.admitted_mig += 1
                    run.admitted_mig_units += p.shape.units
                run.waits.setdefault(p.shape.name, []).append(t - p.arrival)
                heapq.heappush(events, (t + p.duration, 0, p.key))
            else:
                failed.add(p.shape.name)
                still.append(p)
        pending = still
    for p in pending:
        if p.arrival <= horizon:
            run.unplaced.setdefault(p.shape.name, []).append(horizon - p.arrival)
    return run


def p90(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, math.ceil(0.9 * len(s)) - 1)] if s else 0.0


def avg(r: Run, k: int) -> float:
    """Time average of sample field k (1 utilisation, 2 stranded) after the warm-up (one mean
    duration: the cluster fills up first)."""
    xs = [s[k] for s in r.samples if s[0] >= WARM_UP]
    return sum(xs) / max(1, len(xs))


def mean_wait(r: Run, shape: str, censored: bool = False) -> float | None:
    """Mean wait of ``shape``'s admitted jobs (min); ``censored``: also the jobs still waiting at the
    end, counted with the wait they had then (a lower bound of their wait)."""
    w = r.waits.get(shape, []) + (r.unplaced.get(shape, []) if censored else [])
    return sum(w) / len(w) / 60 if w else None


def report(trace: str, runs: dict[str, Run]) -> None:
    ff = runs[FIRST_FIT]
    for r in runs.values():
        util, strand = avg(r, 1), avg(r, 2)
        cpu = 1000 * r.cpu / max(1, r.decisions)
        print(
            f"[{trace}] {r.policy:18s} stranded {strand:7.2f} GPUs   admitted {r.admitted} (MIG {r.admitted_mig})   "
            f"utilisation {100 * util:5.1f}%   placement CPU {cpu:.2f} ms/decision ({r.decisions} decisions; "
            f"warm-up before the replay {r.warm_cpu:.2f} s, not counted)"
        )
        for name in sorted(r.waits, key=lambda n: (SHAPES[n].kind, float(SHAPES[n].units))):
            w = r.waits[name]
            left = len(r.unplaced.get(name, []))
            print(
                f"    {name:9s} n={len(w):5d}  mean wait {sum(w) / len(w) / 60:8.1f} min  p90 {p90(w) / 60:8.1f} min"
                + (f"  ({left} still waiting at the end)" if left else "")
            )
    for r in runs.values():
        if r.admitted_mig:
            late = [n for t, n in r.waiting_mig if t >= WARM_UP]
            print(
                f"[{trace}] {r.policy:18s} MIG jobs waiting in {100 * sum(1 for n in late if n) / max(1, len(late)):.0f}% "
                f"of the samples after the warm-up, {sum(late) / max(1, len(late)):.1f} on average; "
                f"memory slices per admitted MIG job {8 * float(r.admitted_mig_units) / r.admitted_mig:.2f}"
            )

    def change(new: float | None, old: float | None) -> str:
        return f"{100 * (new - old) / old:+.1f}%" if old and new is not None else "n/a"

    for r in runs.values():
        if r.required or r.preferred:
            print(
                f"[{trace}] {r.policy:18s} required-rack gangs {r.required}, over two racks {r.required_spans}; "
                f"preferred-rack gangs {r.preferred}, on the fewest racks {r.preferred_minimal} "
                f"({100 * r.preferred_minimal / max(1, r.preferred):.1f}%)"
            )
    for label, lf in runs.items():
        if label == FIRST_FIT:
            continue
        print(
            f"[{trace}] {label} vs FirstFit: stranded {change(avg(lf, 2), avg(ff, 2))}, "
            f"MIG admitted {change(lf.admitted_mig, ff.admitted_mig)}, "
            f"g8 mean wait {change(mean_wait(lf, 'g8'), mean_wait(ff, 'g8'))} "
            f"(with the unplaced {change(mean_wait(lf, 'g8', True), mean_wait(ff, 'g8', True))}), "
            f"utilisation {change(avg(lf, 1), avg(ff, 1))}, "
            f"placement CPU x{(lf.cpu / max(1, lf.decisions)) / max(1e-12, ff.cpu / max(1, ff.decisions)):.2f}"
        )


# ------------------------------------------------------------------ several seeds
# the figures compared across seeds: (label, function of a run; None when the run has no such figure)
FIGURES: tuple[tuple[str, Any], ...] = (
    ("stranded GPUs", lambda r: avg(r, 2)),
    ("admitted jobs", lambda r: float(r.admitted)),
    ("admitted MIG jobs", lambda r: float(r.admitted_mig)),
    (
        "memory slices per admitted MIG job",
        lambda r: 8 * float(r.admitted_mig_units) / r.admitted_mig if r.admitted_mig else None,
    ),
    ("utilisation %", lambda r: 100 * avg(r, 1)),
    ("g8 mean wait (min)", lambda r: mean_wait(r, "g8")),
    ("g8 mean wait, with the unplaced (min)", lambda r: mean_wait(r, "g8", censored=True)),
    ("g16 mean wait, with the unplaced (min)", lambda r: mean_wait(r, "g16", censored=True)),
    ("g1 mean wait, with the unplaced (min)", lambda r: mean_wait(r, "g1", censored=True)),
    ("placement CPU (ms/decision)", lambda r: 1000 * r.cpu / max(1, r.decisions)),
)


def spread(xs: Sequence[float]) -> str:
    """mean ± sample standard deviation [min .. max]"""
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return f"{m:8.2f} ± {sd:6.2f} [{min(xs):.2f} .. {max(xs):.2f}]"


def summary(trace: str, per_seed: Sequence[dict[str, Run]], first_seed: int) -> None:
    """Each figure over the seeds, per policy, and the change (LeastFragmentation vs FirstFit) seed
    by seed: both policies replay the same jobs, so the paired change is what the policy did;
    the spread between seeds says how far one seed's change can be trusted."""
    n = len(per_seed)
    labels = list(per_seed[0])
    print(f"[{trace}] summary over {n} seeds ({first_seed} .. {first_seed + n - 1}): mean ± sd [min .. max]")
    for label, fig in FIGURES:
        vals = {p: [fig(runs[p]) for runs in per_seed] for p in labels}
        if any(v is None for xs in vals.values() for v in xs):
            continue
        changes = {
            p: [100 * (x - ff) / ff for ff, x in zip(vals[FIRST_FIT], vals[p], strict=True) if ff]
            for p in labels
            if p != FIRST_FIT
        }
        print(
            f"[{trace}]   {label:40s} "
            + "   ".join(f"{p} {spread(vals[p])}" for p in labels)
            + "".join(
                f"   change % {'' if p == LEAST_FRAGMENTATION else p + ' '}{spread(c)}"
                for p, c in changes.items()
                if c
            )
        )
    # waits pooled over the seeds (every job of every seed: steadier than a mean of ratios)
    for shape in ("g8", "g16"):
        pooled = {}
        for p in labels:
            w = [
                x for runs in per_seed for x in runs[p].waits.get(shape, []) + runs[p].unplaced.get(shape, [])
            ]
            pooled[p] = (sum(w) / len(w) / 60 if w else 0.0, len(w))
        ff = pooled[FIRST_FIT][0]
        print(
            f"[{trace}]   {shape} mean wait pooled over the seeds, with the unplaced: "
            + ", ".join(f"{p} {m:.2f} min (n={k})" for p, (m, k) in pooled.items())
            + "".join(
                f", change {'' if p == LEAST_FRAGMENTATION else p + ' '}{100 * (m - ff) / ff:+.1f}%"
                for p, (m, _) in pooled.items()
                if ff and p != FIRST_FIT
            )
        )


def plot(trace: str, runs: dict[str, Run], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for r in runs.values():
        ts = [t / 3600 for t, _, _ in r.samples]
        a.plot(ts, [100 * u for _, u, _ in r.samples], label=r.policy)
        b.plot(ts, [s for _, _, s in r.samples], label=r.policy)
    a.set_ylabel("utilisation %")
    b.set_ylabel("stranded GPUs")
    b.set_xlabel("hours")
    a.legend()
    a.set_title(f"bench/placement.py, trace {trace}")
    out.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out / f"placement-{trace}.png", dpi=90)
    plt.close(fig)
    print(f"wrote {out / f'placement-{trace}.png'}")


# ------------------------------------------------------------------ small instances: the MILP optimum
def static_fill(policy: str, jobs: Sequence[Job], n_nodes: int) -> float:
    """Jobs in order, each placed if it fits (nothing finishes): the GPU units placed / capacity."""
    nodes, slices, classes = cluster(n_nodes)
    placer = DraPlacer(nodes, slices, classes, templates=[template(s) for s in SHAPES.values()])
    reqs = requests_of()
    flavors = {"main": [FlavorSpec("h200", placement_policy=policy)]}
    state = placer.initial_state([])
    placed = Fraction(0)
    for j in jobs:
        got = placer.place(workload(j, reqs), {}, flavors, state)
        if isinstance(got, Placement):
            state = placer.add(state, f"default/job-{j.key}", got)
            placed += j.shape.units
    return float(placed) / (n_nodes * 8)


def milp_fill(jobs: Sequence[Job], n_nodes: int, time_limit: float = 60.0) -> tuple[float, str]:
    """The most GPU units the batch can place on ``n_nodes`` H200 nodes (any subset of the jobs, any
    cards and MIG starts), under every counter of every card, as a MILP solved with HiGHS."""
    import highspy

    h = highspy.Highs()  # type: ignore[no-untyped-call]
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", time_limit)
    h.setOptionValue("mip_rel_gap", 1e-4)
    cards = [(n, c) for n in range(n_nodes) for c in range(8)]
    counters = [
        "memoryMiB",
        "multiprocessors",
        "copyEngines",
        "decoders",
        "encoders",
        "jpegEngines",
        "ofaEngines",
    ]
    totals = {k: HW["totals"][k] for k in counters if k in HW["totals"]}
    totals["memoryMiB"] = HW["usableMemoryMiB"]
    obj: list[float] = []
    cols: list[tuple[str, int, Any]] = []  # (kind, job, where)

    def var(weight: float, kind: str, j: int, where: Any) -> int:
        idx = h.getNumCol()
        h.addVar(0, 1)
        h.changeColIntegrality(idx, highspy.HighsVarType.kInteger)
        obj.append(weight)
        cols.append((kind, j, where))
        return idx

    x = {j.key: var(float(j.shape.units), "x", j.key, None) for j in jobs}
    whole = {cd: var(0.0, "w", -1, cd) for cd in cards}  # card given whole to some pod
    per_card: dict[tuple[int, int], list[tuple[int, dict[str, float], range]]] = {cd: [] for cd in cards}
    rows: list[tuple[list[int], list[float], float, float]] = []
    pod_node: dict[int, list[list[int]]] = {}
    for j in jobs:
        s = j.shape
        if s.kind == "mig":
            p = PROFILE[s.profile]
            use = {k: float(p[k]) for k in counters if k != "memoryMiB"} | {
                "memoryMiB": float(p["memoryMiB"])
            }
            ys = []
            for cd in cards:
                for start in p["placementStarts"]:
                    y = var(0.0, "y", j.key, (cd, start))
                    ys.append(y)
                    per_card[cd].append((y, use, range(start, start + p["memorySlices"])))
            rows.append(([*ys, x[j.key]], [1.0] * len(ys) + [-1.0], 0.0, 0.0))  # placed once iff chosen
        else:
            pods = []
            for _ in range(s.pods):
                zs = [var(0.0, "z", j.key, n) for n in range(n_nodes)]
                rows.append(([*zs, x[j.key]], [1.0] * len(zs) + [-1.0], 0.0, 0.0))
                pods.append(zs)
            pod_node[j.key] = pods
    # whole cards per node cover the whole-GPU pods placed there
    for n in range(n_nodes):
        idx, val = [whole[(n, c)] for c in range(8)], [-1.0] * 8
        for j in jobs:
            for zs in pod_node.get(j.key, []):
                idx.append(zs[n])
                val.append(float(j.shape.per_pod))
        rows.append((idx, val, -highspy.kHighsInf, 0.0))
    for cd in cards:
        items = per_card[cd]
        for m in range(h200.SLICES):  # a memory slice: one MIG instance or the whole card
            idx = [whole[cd]] + [y for y, _, span in items if m in span]
            rows.append((idx, [1.0] * len(idx), -highspy.kHighsInf, 1.0))
        for k, tot in totals.items():  # every counter of the card
            idx = [whole[cd]] + [y for y, _, _ in items]
            val = [float(tot)] + [u.get(k, 0.0) for _, u, _ in items]
            rows.append((idx, val, -highspy.kHighsInf, float(tot)))
    for idx, val, lo, hi in rows:
        h.addRow(lo, hi, len(idx), idx, val)
    h.changeColsCost(len(obj), list(range(len(obj))), [-w for w in obj])  # maximise
    h.run()
    status = h.modelStatusToString(h.getModelStatus())
    info = h.getInfo()
    best = -info.objective_function_value
    return best / (n_nodes * 8), f"{status}, gap {100 * info.mip_gap:.2f}%"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--load", type=float, default=1.3, help="offered load / capacity")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--seeds",
        type=int,
        default=1,
        help="replay seeds --seed .. --seed+N-1 and summarise them (mean, spread)",
    )
    ap.add_argument("--trace", choices=["mixed", "alibaba", "rack", "mig", "both", "all"], default="all")
    ap.add_argument("--mig-nodes", type=int, default=12, help="mig trace: nodes (its jobs: --mig-jobs)")
    ap.add_argument("--mig-jobs", type=int, default=1500)
    ap.add_argument("--racks", type=int, default=4, help="rack trace: racks of 16 nodes")
    ap.add_argument("--milp-nodes", default="4,8", help="small instances for the MILP ('' to skip)")
    ap.add_argument("--plots", type=Path, default=None, help="write PNGs to this directory")
    ap.add_argument("--verify", action="store_true", help="verify mode in the placer and the scorer")
    ap.add_argument("--quick", action="store_true", help="a small run (smoke test)")
    ap.add_argument(
        "--reserve",
        action="store_true",
        help="also replay both policies with whole-node reservation for waiting 8-GPU-pod gangs",
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.nodes, args.jobs, args.milp_nodes = 3, 40, "2"
    ref = reference_loop()
    print(f"machine: reference loop {ref:.3f}s (fixed pure-Python work; compares machines and days)")
    traces = {"both": ["mixed", "alibaba"], "all": ["mixed", "alibaba", "rack", "mig"]}.get(
        args.trace, [args.trace]
    )
    for trace in traces:
        racks = args.racks if trace == "rack" else 0
        n = 16 * racks if racks else args.nodes
        n_jobs = args.jobs
        if trace == "mig" and not args.quick:
            n, n_jobs = args.mig_nodes, args.mig_jobs
        if args.quick and racks:
            racks, n = 2, 4
        per_seed: list[dict[str, Run]] = []
        for seed in range(args.seed, args.seed + args.seeds):
            jobs = arrivals(trace, n_jobs, n * 8, args.load, seed)
            horizon = jobs[-1].arrival  # measured while jobs still arrive
            every = horizon / 200
            where = f"{racks} racks x {n // racks} nodes" if racks else f"{n} H200 nodes"
            print(
                f"[{trace}] {n_jobs} jobs over {horizon / 3600:.1f} h on {where}, load {args.load}, seed {seed}"
            )
            runs: dict[str, Run] = {
                p: replay(p, jobs, n, horizon, every, verify=args.verify, racks=racks) for p in POLICIES
            }
            if args.reserve:
                for p in POLICIES:
                    r = replay(p, jobs, n, horizon, every, verify=args.verify, racks=racks, reserve=True)
                    r.policy = f"{p}+reserve"
                    runs[r.policy] = r
            report(trace, runs)
            per_seed.append(runs)
            if args.plots is not None and seed == args.seed:
                plot(trace, runs, args.plots)
        if len(per_seed) > 1:
            summary(trace, per_seed, args.seed)
    for n in [int(x) for x in args.milp_nodes.split(",") if x]:
        rng_jobs = arrivals("mixed", n * 8 * 3, n * 8, 1.0, args.seed + n)  # about 1.7x what fits
        fills = {p: static_fill(p, rng_jobs, n) for p in POLICIES}
        c0 = time.perf_counter()
        best, how = milp_fill(rng_jobs, n)
        dt = time.perf_counter() - c0
        print(
            f"[milp {n} nodes, {len(rng_jobs)} jobs] optimum {100 * best:.1f}% ({how}, {dt:.1f}s); "
            + ", ".join(
                f"{p} {100 * f:.1f}% (gap {100 * (best - f) / best if best else 0:.1f}%)"
                for p, f in fills.items()
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
