"""Property test: random small scenarios through the simulator and the real DRA placer.

Replaying the events in order, every admitted plan is valid for the allocator (each pod's devices
are published on its node, match the claim's class and count, and the plan charges what it places),
gangs are placed whole, no device is ever in two running plans, and per ClusterQueue usage stays
within nominal + borrowing limit (and the cohort within its pool)."""

from __future__ import annotations

import tempfile
from collections import Counter
from fractions import Fraction
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scenario_builder import (
    GPU,
    cluster,
    cluster_queue,
    cohort,
    flavor,
    job,
    local_queue,
    priority,
    template,
    write,
)

from queueing.scheduling.dra_placer import DraPlan
from queueing.simulate.engine import Simulation
from queueing.simulate.scenario import load_scenario

job_st = st.tuples(
    st.sampled_from(["a", "b"]),  # namespace / team
    st.integers(1, 3),  # pods
    st.sampled_from([1, 2, 4, 8]),  # GPUs per pod
    st.integers(0, 2),  # priority class
    st.integers(0, 300),  # arrival (s)
    st.integers(30, 600),  # duration (s)
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    jobs=st.lists(job_st, min_size=1, max_size=10),
    nominal=st.tuples(st.integers(0, 16), st.integers(0, 16)),
    borrowing=st.tuples(st.sampled_from([None, 0, 4, 16]), st.sampled_from([None, 0, 4, 16])),
)
def test_plans_valid_no_double_booking_quota_holds(
    jobs: list[tuple[str, int, int, int, int, int]],
    nominal: tuple[int, int],
    borrowing: tuple[int | None, int | None],
) -> None:
    docs = [
        *cluster(2),
        flavor(),
        cohort("c"),
        priority("p0", 0),
        priority("p1", 10),
        priority("p2", 20),
    ]
    limits = {}
    for i, team in enumerate(("a", "b")):
        docs.append(
            cluster_queue(
                f"cq-{team}",
                nominal[i],
                cohort="c",
                borrowing=borrowing[i],
                within="LowerPriority",
                reclaim="Any",
            )
        )
        docs.append(local_queue(team, "lq", f"cq-{team}"))
        docs += [template(team, g) for g in (1, 2, 4, 8)]
        limits[f"cq-{team}"] = nominal[i] + (borrowing[i] if borrowing[i] is not None else 10**6)
    for n, (team, pods, gpus, prio, arrival, duration) in enumerate(jobs):
        docs.append(
            job(
                team,
                f"j{n}",
                pods=pods,
                gpus=gpus,
                priority_class=f"p{prio}",
                arrival=f"{arrival}s",
                duration=f"{duration}s",
            )
        )
    with tempfile.TemporaryDirectory() as d:
        sc = load_scenario([str(write(Path(d) / "s.yaml", docs))])
    sim = Simulation(sc)
    result = sim.run()
    inv = sim.placer.cluster.inventory
    running: dict[str, tuple[set[tuple[str, str, str]], Fraction, str]] = {}
    for e in result.events:
        if e.event in ("Finished", "Evicted"):
            running.pop(e.job)
            continue
        if e.event != "Admitted":
            continue
        adm = e.admission
        assert adm is not None
        a = adm.assignment
        plan = a.placement.detail
        assert isinstance(plan, DraPlan)
        spec = {p.name: p for p in adm.workload.pod_sets}
        gpus_per_pod = spec["main"].device_requests[GPU]
        # the gang is placed whole (no minCount in these jobs)
        assert len(plan.pods) == spec["main"].count == len(a.placement.nodes)
        devices: set[tuple[str, str, str]] = set()
        for pp in plan.pods:
            assert len(pp.devices) == gpus_per_pod
            for dev in pp.devices:
                assert inv.devices[dev].node_name == pp.node  # published on the pod's node
                assert plan.device_classes[dev] == GPU
            devices |= set(pp.devices)
        assert len(devices) == gpus_per_pod * len(plan.pods)  # no device twice in one plan
        assert a.placement.device_charges[GPU] == len(devices)
        assert a.usage == {("h200", GPU): Fraction(len(devices))}
        for other, (held, _, _) in running.items():
            assert not (held & devices), f"{e.job} and {other} share devices"
        running[e.job] = (devices, Fraction(len(devices)), adm.cluster_queue)
        used = Counter[str]()
        for _, amount, cq in running.values():
            used[cq] += int(amount)
        for cq, u in used.items():
            assert u <= limits[cq]
        assert sum(used.values()) <= sum(nominal)  # the cohort's pool: its members' nominal quota
