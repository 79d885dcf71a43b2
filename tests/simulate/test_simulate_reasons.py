"""Reasons as data, through the simulator: every pending reason names only the objects of the
workload it is written to (its own pods ``<name>-<podset>-<index>``, its own claims by the name in
its pod spec), however the cycle and the allocator share work between workloads of one shape."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
from scenario_builder import GPU, Q, cluster, flavor, job, local_queue, template, write

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scheduling"))
from sched_helpers import job as sched_job

from queueing.scheduling.backlog import Backlog
from queueing.scheduling.config import SchedulingConfig
from queueing.scheduling.cycle import PendingReason, PendingReasons
from queueing.simulate.engine import SimResult, Simulation, _Reasons
from queueing.simulate.scenario import load_scenario

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "simulate"
VERIFY = SchedulingConfig(verify=True)


def simulate(tmp_path: Path, docs: list[dict[str, Any]], config: SchedulingConfig | None) -> SimResult:
    return Simulation(load_scenario([str(write(tmp_path / "scenario.yaml", docs))]), config).run()


def reasons(result: SimResult, key: str) -> list[str]:
    return [e.reason for e in result.events if e.event == "Inadmissible" and e.job == key]


def foreign_names(result: SimResult, jobs: set[str]) -> list[tuple[str, str]]:
    """(workload, reason) for every reason that names a pod or claim of another workload: objects
    of workload ``ns/name`` are named ``ns/name-...``."""
    out = []
    for e in result.events:
        if e.event != "Inadmissible":
            continue
        for other in jobs - {e.job}:
            if re.search(re.escape(other) + r"-", e.reason):
                out.append((e.job, e.reason))
    return out


def memory_cq(name: str = "cq") -> dict[str, Any]:
    """GPUs and memory under quota (memory plenty: only the nodes are short of it)."""
    res = [{"name": GPU, "nominalQuota": 32}, {"name": "memory", "nominalQuota": "64Ti"}]
    return {
        "apiVersion": Q,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {"coveredResources": [GPU, "memory"], "flavors": [{"name": "h200", "resources": res}]}
            ],
        },
    }


def with_memory(doc: dict[str, Any], memory: str) -> dict[str, Any]:
    container = doc["spec"]["template"]["spec"]["containers"][0]
    container.setdefault("resources", {})["requests"] = {"memory": memory}
    return doc


@pytest.mark.parametrize("config", [None, VERIFY], ids=["plain", "verify"])
def test_workloads_of_one_shape_are_told_their_own_pods_and_claims(
    tmp_path: Path, config: SchedulingConfig | None
) -> None:
    # three Jobs of one shape, none fits (3Ti of memory per pod, nodes have 2Ti): the cycle decides
    # for the first and gives the rest of the run its reason; each must read its own pod names
    docs = [
        *cluster(2),
        flavor(),
        memory_cq(),
        local_queue("ml", "lq", "cq"),
        template("ml", 1),
        *(with_memory(job("ml", f"w{i}", pods=2, gpus=1), "3Ti") for i in range(3)),
    ]
    r = simulate(tmp_path, docs, config)
    told = [reasons(r, f"ml/w{i}") for i in range(3)]
    assert [len(t) for t in told] == [1, 1, 1]
    for i, (why,) in enumerate(told):
        assert f"pod ml/w{i}-main-0 (pod 1 of 2) fits on none of 2 nodes" in why, why
    assert not foreign_names(r, {f"ml/w{i}" for i in range(3)})
    for (why,) in told:
        assert "memory: needs 3Ti, 2Ti free" in why, why  # a quantity as kubectl prints it


def bad_selector_template(ns: str) -> dict[str, Any]:
    """A claim template whose selector fails at run time on every GPU (no attribute ``nosuch``)."""
    sel = {"cel": {"expression": f'device.attributes["{GPU}"].nosuch == 1'}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "gpus-1", "namespace": ns},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "gpus", "exactly": {"deviceClassName": GPU, "count": 1, "selectors": [sel]}}
                    ]
                }
            }
        },
    }


@pytest.mark.parametrize("config", [None, VERIFY], ids=["plain", "verify"])
def test_a_cel_runtime_error_names_the_claim_of_the_workload_told(
    tmp_path: Path, config: SchedulingConfig | None
) -> None:
    # alpha and beta differ in shape (1 and 2 pods), so each is placed on its own, but their claims
    # are of one shape: the candidate lists (with the CEL error) built for alpha serve beta
    docs = [
        *cluster(1),
        flavor(),
        memory_cq(),
        local_queue("default", "lq", "cq"),
        bad_selector_template("default"),
        job("default", "alpha", pods=1),
        job("default", "beta", pods=2),
    ]
    r = simulate(tmp_path, docs, config)
    assert not foreign_names(r, {"default/alpha", "default/beta"})
    for name in ("alpha", "beta"):
        (why,) = reasons(r, f"default/{name}")
        assert (
            f"claim gpus of pod default/{name}-main-0 (from ResourceClaimTemplate default/gpus-1): "
            "spec.devices.requests[0].exactly.selectors[0].cel.expression: CEL runtime error" in why
        ), why


def test_demo_reasons_name_only_their_own_workloads_objects() -> None:
    """``make demo``'s scenario (``examples/simulate``): no reason names another workload's pods or
    claims; the MIG notebooks (one shape, neither fits) are told their own pod."""
    sc = load_scenario([str(EXAMPLES)])
    r = Simulation(sc, SchedulingConfig(verify=True)).run()
    jobs = {e.job for e in r.events}
    assert len(jobs) > 10
    assert not foreign_names(r, jobs)
    notebook2 = reasons(r, "team-b/notebook-2")
    assert any("pod team-b/notebook-2-main-0 " in w for w in notebook2), notebook2
    # the best node of a MIG pod is a node with MIG devices (there are such nodes)
    assert not any(re.search(r"\b0 in the class on this node", w) for w in notebook2), notebook2


def test_verify_checks_the_simulators_skipping_of_unchanged_reasons() -> None:
    """The simulator reports a reason only when it changed, skipping the part of a group that is
    last cycle's group with an equal reason; verify mode compares every workload's reason by value."""
    ws = [sched_job(f"w{i}", 1) for i in range(4)]
    present = Backlog(ws)
    why = PendingReason("cq", "Pending", "couldn't place the gang: ...")

    def cycle(reason: PendingReason) -> PendingReasons:
        pr = PendingReasons()
        pr.set_all(ws, reason)
        return pr

    for verify in (False, True):
        r = _Reasons(verify)
        assert [k for k, _ in r.changes(cycle(why), present)] == [w.key for w in ws]
        assert r.changes(cycle(why), present) == []  # the same group, an equal reason: skipped
        other = PendingReason("cq", "Pending", "insufficient quota")
        assert [k for k, _ in r.changes(cycle(other), present)] == [w.key for w in ws]
        # a remembered reason that no longer agrees with the group (what a wrong skip would leave)
        r.last["default/w2"] = why
        if verify:
            with pytest.raises(RuntimeError, match="verify: pending reasons: "):
                r.changes(cycle(other), present)
        else:
            assert r.changes(cycle(other), present) == []  # skipped: the group agrees by identity
