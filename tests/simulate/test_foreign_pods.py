"""In the simulator as in the controller, a running pod queueing does not manage (a DaemonSet's) takes
its node's resources: one using 30 of a node's 32 CPUs sends a 4-CPU Job to another node."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scenario_builder import cluster, cluster_queue, flavor, job, local_queue, template, write

from queueing.simulate.engine import Simulation
from queueing.simulate.scenario import load_scenario


def scenario(agent_cpu: str | None) -> list[dict[str, Any]]:
    docs = cluster(2)
    for d in docs:
        if d["kind"] == "Node":
            d["status"]["allocatable"]["cpu"] = "32"
    cq = cluster_queue("cq", 16)
    group = cq["spec"]["resourceGroups"][0]
    group["coveredResources"].append("cpu")  # the Job asks for cpu: the queue covers it
    group["flavors"][0]["resources"].append({"name": "cpu", "nominalQuota": 64})
    four = job("ml", "four", gpus=1)
    four["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "4"}
    docs += [flavor(), cq, local_queue("ml", "lq", "cq"), template("ml", 1), four]
    if agent_cpu is not None:
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": "agent-h200-0",
                    "namespace": "kube-system",
                    "ownerReferences": [
                        {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "d"}
                    ],
                },
                "spec": {
                    "nodeName": "h200-0",
                    "containers": [
                        {"name": "agent", "image": "a", "resources": {"requests": {"cpu": agent_cpu}}}
                    ],
                },
                "status": {"phase": "Running"},
            }
        )
    return docs


def admitted_nodes(tmp_path: Path, docs: list[dict[str, Any]]) -> tuple[str, ...] | None:
    sim = Simulation(load_scenario([str(write(tmp_path / "scenario.yaml", docs))]))
    (adm,) = [e for e in sim.run().events if e.event == "Admitted" and e.job == "ml/four"]
    assert sim.cache.placer() is sim.placer  # the run's placer is the cache's
    return adm.nodes


def test_a_daemonset_pod_sends_a_job_to_another_node(tmp_path: Path) -> None:
    assert admitted_nodes(tmp_path, scenario(None)) == ("h200-0",)  # first node without the agent
    assert admitted_nodes(tmp_path, scenario("30")) == ("h200-1",)
    assert admitted_nodes(tmp_path, scenario("28")) == ("h200-0",)  # 4 CPUs left beside it: fits
