"""``queueing simulate`` with every integrated kind in one cohort (Job, RayJob, RayCluster, JobSet,
StatefulSet, Deployment, LeaderWorkerSet): their Workloads come from the controller's own adapters
(the pod-gated kinds': the pods their controllers create, grouped); gangs are admitted whole, a
high-priority Deployment pod preempts a low-priority RayJob gang across the cohort, serving kinds
without a duration run to the end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from scenario_builder import (
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

from queueing.cli import main
from queueing.simulate.engine import SimEvent, SimResult, Simulation
from queueing.simulate.scenario import ScenarioError, load_scenario


def pod_template(gpus: int, prio: str, duration: str | None = None) -> dict[str, Any]:
    ann = {"simulate.queueing.dra.io/duration": duration} if duration else {}
    return {
        "metadata": {"labels": {"queueing.dra.io/priority-class": prio}, "annotations": ann},
        "spec": {
            "containers": [{"name": "main", "image": "x", "resources": {"claims": [{"name": "gpus"}]}}],
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": f"gpus-{gpus}"}],
        },
    }


def apps(
    kind: str, name: str, replicas: int, gpus: int, prio: str, arrival: str, queue: str
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": "ml",
            "labels": {"queueing.dra.io/queue-name": queue},
            "annotations": {"simulate.queueing.dra.io/arrival": arrival},
        },
        "spec": {"replicas": replicas, "template": pod_template(gpus, prio)},
    }


def lws(
    name: str, replicas: int, size: int, gpus: int, prio: str, arrival: str, duration: str
) -> dict[str, Any]:
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "labels": {"queueing.dra.io/queue-name": "serve"},
            "annotations": {
                "simulate.queueing.dra.io/arrival": arrival,
                "simulate.queueing.dra.io/duration": duration,
            },
        },
        "spec": {
            "replicas": replicas,
            "leaderWorkerTemplate": {"size": size, "workerTemplate": pod_template(gpus, prio)},
        },
    }


def ray_spec(worker_gpus: int, workers: int, prio: str) -> dict[str, Any]:
    head = {"spec": {"containers": [{"name": "head", "image": "ray"}]}}  # no GPU
    worker = pod_template(worker_gpus, prio)
    return {
        "headGroupSpec": {
            "template": {**head, "metadata": {"labels": {"queueing.dra.io/priority-class": prio}}}
        },
        "workerGroupSpecs": [{"groupName": "gpu", "replicas": workers, "template": worker}],
    }


def crd_object(
    kind: str, api_version: str, name: str, spec: dict[str, Any], arrival: str, duration: str | None
) -> dict[str, Any]:
    ann = {"simulate.queueing.dra.io/arrival": arrival}
    if duration:
        ann["simulate.queueing.dra.io/duration"] = duration
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": "ml",
            "labels": {"queueing.dra.io/queue-name": "train"},
            "annotations": ann,
        },
        "spec": spec,
    }


def jobset_spec(gpus: int, replicas: int) -> dict[str, Any]:
    job = {
        "parallelism": 1,
        "completions": 1,
        "template": {
            **pod_template(gpus, "low"),
            "spec": {**pod_template(gpus, "low")["spec"], "restartPolicy": "Never"},
        },
    }
    return {"replicatedJobs": [{"name": "workers", "replicas": replicas, "template": {"spec": job}}]}


def scenario(tmp_path: Path) -> Path:
    """2 H200 nodes (16 GPUs), a cohort of a training and an inference ClusterQueue (8 GPUs each)."""
    docs = [
        *cluster(2),
        flavor(),
        cohort("all"),
        cluster_queue("training", 8, cohort="all", within="LowerPriority", reclaim="Any"),
        cluster_queue("inference", 8, cohort="all", within="LowerPriority", reclaim="Any"),
        local_queue("ml", "train", "training"),
        local_queue("ml", "serve", "inference"),
        priority("low", 10),
        priority("high", 1000),
        *(template("ml", g) for g in (1, 2, 4, 8)),
        # t=0: a RayJob (a CPU head, 2 workers × 8 GPUs) borrows the inference queue's idle GPUs
        crd_object("RayJob", "ray.io/v1", "tune", {"rayClusterSpec": ray_spec(8, 2, "low")}, "0s", "1h"),
        # t=30s: a small Job, a JobSet of 2 one-GPU Jobs and a RayCluster (one 1-GPU worker, no
        # duration: it runs to the end) in the training queue
        job("ml", "eval", gpus=1, queue="train", priority_class="low", arrival="30s", duration="5m"),
        crd_object("JobSet", "jobset.x-k8s.io/v1alpha2", "bench", jobset_spec(1, 2), "30s", "5m"),
        crd_object("RayCluster", "ray.io/v1", "notebook", ray_spec(1, 1, "low"), "30s", None),
        # t=10s: one serving pod (1 GPU) of a high-priority Deployment: the inference queue reclaims
        apps("Deployment", "chat", 1, 1, "high", "10s", "serve"),
        # t=10s: a 2-replica StatefulSet (2 GPUs a pod), one gang; no duration: runs to the end
        apps("StatefulSet", "kv", 2, 2, "high", "10s", "serve"),
        # t=20s: a vLLM LeaderWorkerSet: one group of a leader and a worker × 2 GPUs, 10 minutes
        lws("vllm", 1, 2, 2, "high", "20s", "10m"),
    ]
    return write(tmp_path / "mixed.yaml", docs)


def of(r: SimResult, event: str, job_key: str) -> list[SimEvent]:
    return [e for e in r.events if e.event == event and e.job == job_key]


def test_mixed_kinds_gangs_and_preemption_across_kinds(tmp_path: Path) -> None:
    sc = load_scenario([str(scenario(tmp_path))])
    kinds = {j.key: j.kind for j in sc.jobs}
    assert kinds == {
        "ml/tune": "RayJob",
        "ml/eval": "Job",
        "ml/bench": "JobSet",
        "ml/notebook": "RayCluster",
        "ml/chat-0": "Deployment",
        "ml/kv": "StatefulSet",
        "ml/vllm-0": "LeaderWorkerSet",
    }
    wls = {j.key: j.workload for j in sc.jobs}
    assert [(p.name, p.count) for p in wls["ml/kv"].spec.pod_sets] == [("main", 2)]
    assert [(p.name, p.count) for p in wls["ml/vllm-0"].spec.pod_sets] == [("leader", 1), ("worker", 1)]
    r = Simulation(sc).run()

    # the RayJob gang is admitted whole (head and both workers placed) by borrowing, then preempted
    # whole by the serving Deployment's pod: the inference queue reclaims its quota across the cohort
    (tune,) = of(r, "Admitted", "ml/tune")
    assert tune.time == 0 and tune.nodes is not None and len(tune.nodes) == 3
    (evicted,) = of(r, "Evicted", "ml/tune")
    assert evicted.time == 10 and evicted.preemptor == "ml/chat-0" and evicted.kind == "RayJob"
    (chat,) = of(r, "Admitted", "ml/chat-0")
    assert chat.time == 10 and chat.kind == "Deployment"
    # the StatefulSet and the LeaderWorkerSet group: every pod of the gang placed in one admission
    (kv,) = of(r, "Admitted", "ml/kv")
    assert kv.kind == "StatefulSet" and kv.nodes is not None and len(kv.nodes) == 2
    (vllm,) = of(r, "Admitted", "ml/vllm-0")
    assert vllm.kind == "LeaderWorkerSet" and vllm.nodes is not None and len(vllm.nodes) == 2
    assert vllm.admission is not None
    assert {p.name for p in vllm.admission.workload.pod_sets} == {"leader", "worker"}
    # the training queue's small ones fit next to the serving ones; the JobSet gang is placed whole
    (bench,) = of(r, "Admitted", "ml/bench")
    assert bench.kind == "JobSet" and bench.nodes is not None and len(bench.nodes) == 2
    assert [e.time for e in of(r, "Finished", "ml/bench")] == [bench.time + 300]
    assert of(r, "Admitted", "ml/eval") and of(r, "Admitted", "ml/notebook")
    # the group runs its 10 minutes; the serving kinds without a duration (a RayCluster too) run to
    # the end; the RayJob (16 GPUs) never fits again next to them
    assert [e.time for e in of(r, "Finished", "ml/vllm-0")] == [vllm.time + 600]
    assert not [e for k in ("ml/chat-0", "ml/kv", "ml/notebook") for e in of(r, "Finished", k)]
    assert len(of(r, "Admitted", "ml/tune")) == 1 and of(r, "Inadmissible", "ml/tune")


def test_json_events_name_the_kind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "-f", str(scenario(tmp_path)), "-o", "json"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()][:-1]  # the last: the summary
    seen = {(x["job"], x["kind"]) for x in lines}
    assert {
        ("ml/tune", "RayJob"),
        ("ml/eval", "Job"),
        ("ml/bench", "JobSet"),
        ("ml/notebook", "RayCluster"),
        ("ml/chat-0", "Deployment"),
        ("ml/kv", "StatefulSet"),
        ("ml/vllm-0", "LeaderWorkerSet"),
    } <= seen
    assert all(list(x)[:3] == ["time", "event", "job"] and list(x)[3] == "kind" for x in lines)


def test_a_pod_gated_object_without_a_queue_is_an_error_naming_it(tmp_path: Path) -> None:
    bad = apps("StatefulSet", "kv", 2, 2, "high", "0s", "serve")
    del bad["metadata"]["labels"]
    f = write(
        tmp_path / "bad.yaml",
        [*cluster(1), flavor(), cluster_queue("cq", 8), local_queue("ml", "serve", "cq"), bad],
    )
    with pytest.raises(
        ScenarioError, match=r"StatefulSet ml/kv: metadata.labels\[queueing.dra.io/queue-name\]: missing"
    ):
        load_scenario([str(f)])
