"""Generated scenarios that try to break the keys of the fast paths, memos and caches, run through
the simulator in verify mode (``conftest.py``: ``QUEUEING_VERIFY=1``): every fast path also runs
the general computation and raises ``VerifyError`` on a difference.

They mix what the keys could miss: preemption with priorities (a preemptor's reservation overlaps
its victims' devices while they are evicted), device-plugin nodes (``nvidia.com/gpu`` in
allocatable) next to DRA nodes whose DeviceClass backs the same extended resource, H200s with MIG
slices on shared counters, ResourceClaims shared by the pods of a Job, node cpu limits, and jobs
that share a fit signature or have one each."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scenario_builder import GPU, Q, cluster_queue, flavor, h200, local_queue, priority, write

from queueing.scheduling.config import SchedulingConfig
from queueing.scheduling.dra_placer import DraPlan
from queueing.simulate.engine import Simulation
from queueing.simulate.scenario import load_scenario

MIG = "mig.nvidia.com"
EXT = "nvidia.com/gpu"
PROFILES = ("1g.18gb", "2g.35gb", "3g.71gb")


def classes(extended: bool) -> list[dict[str, Any]]:
    out = [dict(c) for c in h200.CLASSES]
    if extended:
        out[0] = out[0] | {"spec": dict(out[0]["spec"]) | {"extendedResourceName": EXT}}
    return out


def dra_node(name: str, gpus: int, mig: bool, cpu: str) -> list[dict[str, Any]]:
    n = h200.node(name)
    n["status"]["allocatable"]["cpu"] = cpu
    return [n, *h200.node_slices(name, h200.hardware(), gpus=gpus, mig=mig)]


def plugin_node(name: str, gpus: int, cpu: str) -> dict[str, Any]:
    """A node whose GPUs a device plugin serves: ``nvidia.com/gpu`` in allocatable, no slices."""
    n = h200.node(name)
    n["status"]["allocatable"] |= {"cpu": cpu, EXT: str(gpus)}
    return n


def queue(name: str, cohort: str) -> dict[str, Any]:
    cq = cluster_queue(name, 4, cohort=cohort, borrowing=4, within="LowerPriority", reclaim="Any")
    group = cq["spec"]["resourceGroups"][0]
    group["coveredResources"] = [GPU, MIG, EXT, "cpu"]
    group["flavors"][0]["resources"] += [
        {"name": MIG, "nominalQuota": 8},
        {"name": EXT, "nominalQuota": 4, "borrowingLimit": 4},
        {"name": "cpu", "nominalQuota": 64},
    ]
    return cq


def template(ns: str, name: str, cls: str, count: int, profile: str | None = None) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": cls, "count": count}
    if profile:
        exactly["selectors"] = [{"cel": {"expression": f"device.attributes['{GPU}'].profile == '{profile}'"}}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"spec": {"devices": {"requests": [{"name": "r", "exactly": exactly}]}}},
    }


def shared_claim(ns: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": GPU}}]}},
    }


# (kind, pods, count, priority, arrival s, duration s, cpu millis)
JobSpec = tuple[str, int, int, int, int, int, int]
job_st = st.tuples(
    st.sampled_from(["gpu", "gpu", "gpu", "mig", "mig", "ext", "shared", "none"]),
    st.integers(1, 3),
    st.integers(1, 2),
    st.integers(0, 2),
    st.integers(0, 60),
    st.integers(60, 300),
    st.sampled_from([0, 500, 1000, 3000]),
)


def job(ns: str, n: int, spec: JobSpec, unique: bool) -> dict[str, Any]:
    kind, pods, count, prio, arrival, duration, cpu = spec
    container: dict[str, Any] = {"name": "main", "image": "x", "resources": {}}
    pod: dict[str, Any] = {"containers": [container]}
    if unique:
        cpu += n + 1  # one fit signature per Job
    if cpu:
        container["resources"]["requests"] = {"cpu": f"{cpu}m"}
    if kind == "gpu":
        pod["resourceClaims"] = [{"name": "g", "resourceClaimTemplateName": f"gpu-{count}"}]
    elif kind == "mig":
        pod["resourceClaims"] = [{"name": "g", "resourceClaimTemplateName": f"mig-{n % len(PROFILES)}"}]
    elif kind == "ext":
        container["resources"]["limits"] = {EXT: count}
    elif kind == "shared":
        pod["resourceClaims"] = [{"name": "g", "resourceClaimName": f"shared-{n}"}]
    if kind in ("gpu", "mig", "shared"):
        container["resources"]["claims"] = [{"name": "g"}]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"j{n}",
            "namespace": ns,
            "labels": {"queueing.dra.io/queue-name": "lq", "queueing.dra.io/priority-class": f"p{prio}"},
            "annotations": {
                "simulate.queueing.dra.io/arrival": f"{arrival}s",
                "simulate.queueing.dra.io/duration": f"{duration}s",
            },
        },
        "spec": {"parallelism": pods, "template": {"spec": pod}},
    }


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=st.lists(
        st.tuples(
            st.sampled_from(["dra", "dra-mig", "dra-mig", "plugin"]),
            st.integers(1, 2),
            st.sampled_from(["2", "64"]),
        ),
        min_size=1,
        max_size=3,
    ),
    extended=st.booleans(),
    unique=st.booleans(),
    fair=st.booleans(),
    jobs=st.lists(st.tuples(st.sampled_from(["a", "b"]), job_st), min_size=3, max_size=10),
)
def test_generated_scenarios_in_verify_mode(
    nodes: list[tuple[str, int, str]],
    extended: bool,
    unique: bool,
    fair: bool,
    jobs: list[tuple[str, JobSpec]],
) -> None:
    docs: list[dict[str, Any]] = [*classes(extended), flavor(), priority("p0", 0), priority("p1", 10)]
    docs += [priority("p2", 20), {"apiVersion": Q, "kind": "Cohort", "metadata": {"name": "c"}}]
    for i, (kind, gpus, cpu) in enumerate(nodes):
        name = f"n{i}"
        docs += (
            [plugin_node(name, gpus, cpu)]
            if kind == "plugin"
            else dra_node(name, gpus, kind == "dra-mig", cpu)
        )
    for team in ("a", "b"):
        docs += [queue(f"cq-{team}", "c"), local_queue(team, "lq", f"cq-{team}")]
        docs += [template(team, f"gpu-{c}", GPU, c) for c in (1, 2)]
        docs += [template(team, f"mig-{i}", MIG, 1, p) for i, p in enumerate(PROFILES)]
    for n, (team, spec) in enumerate(jobs):
        docs.append(job(team, n, spec, unique))
        if spec[0] == "shared":
            docs.append(shared_claim(team, f"shared-{n}"))
    with tempfile.TemporaryDirectory() as d:
        sc = load_scenario([str(write(Path(d) / "s.yaml", docs))])
    sim = Simulation(sc, SchedulingConfig.from_dict({"fairSharing": {"enable": fair}}))
    assert sim.placer.verify and sim.config.verify  # the shell read QUEUEING_VERIFY
    result = sim.run()  # raises VerifyError on any difference
    # and the decisions are sound: no device in two running plans
    running: dict[str, set[tuple[str, str, str]]] = {}
    for e in result.events:
        if e.event in ("Finished", "Evicted"):
            running.pop(e.job, None)
        elif e.event == "Admitted" and e.admission is not None:
            plan = e.admission.assignment.placement.detail
            assert isinstance(plan, DraPlan)
            devices = {d for pp in plan.pods for d in pp.devices}
            for other, held in running.items():
                assert not (held & devices), f"{e.job} and {other} share devices"
            running[e.job] = devices
