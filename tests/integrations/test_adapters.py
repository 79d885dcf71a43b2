"""The adapters of the kinds served from CRDs (queueing/integrations: RayJob, RayCluster, JobSet) and
the registry the controller iterates: pod sets with templates, counts and minCount, Workload names and
owners, the start and suspend writes, when each is done, and bad input named by object and field."""

from __future__ import annotations

from typing import Any

import pytest

from queueing.api.base import KubeObject
from queueing.integrations import JobSet, PodSetStart, RayCluster, RayJob
from queueing.integrations.registry import INTEGRATIONS, by_kind, suspendable
from queueing.integrations.workloads import workload_name
from queueing.scheduling.jobs import WorkloadError
from queueing.testing.patch import json_patch

UID = "queueing.dra.io/workload-uid"
GATE = "queueing.dra.io/placement"


def pod(claim: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x"}]}
    if claim:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": claim}]
    return {"metadata": {"labels": {"app": "a"}}, "spec": spec}


def cluster_spec(**worker: Any) -> dict[str, Any]:
    group = {"groupName": "GPU", "replicas": 3, "numOfHosts": 2, "template": pod("gpu-4"), **worker}
    return {"headGroupSpec": {"template": pod()}, "workerGroupSpecs": [group]}


def rayjob(**worker: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "tune", "namespace": "ml", "uid": "u-1", "resourceVersion": "7",
                     "labels": {"queueing.dra.io/queue-name": "main"}},
        "spec": {"suspend": True, "entrypoint": "python t.py", "rayClusterSpec": cluster_spec(**worker)},
    }  # fmt: skip


def jobset() -> dict[str, Any]:
    def rj(name: str, replicas: int, parallelism: int, completions: int | None) -> dict[str, Any]:
        job: dict[str, Any] = {"parallelism": parallelism, "template": pod("gpu-1")}
        if completions is not None:
            job["completions"] = completions
        return {"name": name, "replicas": replicas, "template": {"spec": job}}

    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "bench", "namespace": "ml", "uid": "u-2", "labels": {"queueing.dra.io/queue-name": "main"}},
        "spec": {"suspend": True, "replicatedJobs": [rj("driver", 1, 1, None), rj("workers", 2, 4, 2)]},
    }  # fmt: skip


def obj(raw: dict[str, Any]) -> KubeObject:
    return KubeObject.model_validate(raw)


def applied(raw: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """The object after a JSON patch, as the API server would apply it."""
    out: dict[str, Any] = json_patch(raw, ops)  # the emulator's RFC 6902
    return out


def test_rayjob_pod_sets_workload_name_and_owner() -> None:
    src = RayJob(obj(rayjob(minReplicas=1)))
    head, workers = src.pod_sets()
    assert (head.name, head.count, head.min_count) == ("head", 1, None)
    # replicas x numOfHosts; minReplicas x numOfHosts is Kueue's minCount (partial admission)
    assert (workers.name, workers.count, workers.min_count) == ("gpu", 6, 2)
    assert workers.template.spec.resource_claims[0].resource_claim_template_name == "gpu-4"  # type: ignore[index]
    wl = src.workload({}, {})
    assert wl is not None and wl.name == workload_name("RayJob", "ray.io", "tune")
    assert wl.name.startswith("rayjob-tune-") and len(wl.name) == len("rayjob-tune-") + 5
    (owner,) = wl.metadata.owner_references  # type: ignore[misc]
    assert (owner.api_version, owner.kind, owner.name, owner.uid, owner.controller) == (
        "ray.io/v1", "RayJob", "tune", "u-1", True
    )  # fmt: skip
    assert wl.spec.queue_name == "main" and wl.namespace == "ml"
    assert RayJob(obj(rayjob(minReplicas=3))).pod_sets()[1].min_count is None  # all replicas: no partial


def test_workload_names_are_per_kind_lower_case_and_fit_a_name() -> None:
    assert workload_name("RayJob", "ray.io", "x") != workload_name("RayCluster", "ray.io", "x")
    assert workload_name("JobSet", "jobset.x-k8s.io", "x") == workload_name("JobSet", "jobset.x-k8s.io", "x")
    long = workload_name("RayCluster", "ray.io", "n" * 253)
    assert len(long) == 253 and long.startswith("raycluster-nnn") and long == long.lower()


@pytest.mark.parametrize(
    ("worker", "message"),
    [
        ({"groupName": ""}, "RayJob ml/tune: spec.rayClusterSpec.workerGroupSpecs[0].groupName: missing"),
        ({"minReplicas": 4}, "spec.rayClusterSpec.workerGroupSpecs[0].minReplicas: 4 is more than replicas (3)"),
        ({"replicas": -1}, "spec.rayClusterSpec.workerGroupSpecs[0].replicas: must be a non-negative integer"),
        ({"groupName": "head"}, "workerGroupSpecs[0].groupName: 'head' is not unique"),
        ({"template": {"spec": {"containers": "no"}}}, "RayJob ml/tune: spec.rayClusterSpec.workerGroupSpecs[0].template"),
    ],
)  # fmt: skip
def test_a_bad_rayjob_is_named_with_its_field(worker: dict[str, Any], message: str) -> None:
    with pytest.raises(WorkloadError) as e:
        RayJob(obj(rayjob(**worker))).workload({}, {})
    assert message in str(e.value)


def test_rayjob_start_and_suspend_writes() -> None:
    raw = rayjob(minReplicas=1)
    src = RayJob(obj(raw))
    starts = {
        "head": PodSetStart("head", {UID: "w-1"}, node="n1"),
        "gpu": PodSetStart("gpu", {UID: "w-1"}, gate=True, count=4),  # partial: 2 of 3 replicas
    }
    patch = src.start_patch(starts)
    assert patch.patch_type == "json"
    started = applied(raw, patch.body)  # type: ignore[arg-type]
    cluster = started["spec"]["rayClusterSpec"]
    assert started["spec"]["suspend"] is False and started["spec"]["entrypoint"] == "python t.py"
    head = cluster["headGroupSpec"]["template"]
    assert head["metadata"]["labels"] == {"app": "a", UID: "w-1"}
    assert head["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "n1"}
    (group,) = cluster["workerGroupSpecs"]
    assert group["replicas"] == 2 and group["template"]["spec"]["schedulingGates"] == [{"name": GATE}]
    assert started["metadata"]["annotations"] == {"queueing.dra.io/original-replicas": '{"GPU": 3}'}
    # the Workload of a partially admitted RayJob asks for its own replicas again
    again = RayJob(obj(started))
    assert again.pod_sets()[1].count == 6 and not again.is_suspended()
    assert again.finished() == (False, False)

    stopped = applied(started, again.suspend_patch())
    assert stopped["spec"]["suspend"] is True
    (group,) = stopped["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert group["replicas"] == 3 and "schedulingGates" not in group["template"]["spec"]
    assert UID not in stopped["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["metadata"]["labels"]
    assert "queueing.dra.io/original-replicas" not in stopped["metadata"].get("annotations", {})


@pytest.mark.parametrize(
    ("status", "done"),
    [("RUNNING", (False, False)), ("SUCCEEDED", (True, True)), ("FAILED", (True, False)), ("STOPPED", (True, False))],
)  # fmt: skip
def test_rayjob_is_done_when_its_job_status_is_terminal(status: str, done: tuple[bool, bool]) -> None:
    assert RayJob(obj({**rayjob(), "status": {"jobStatus": status}})).finished() == done


def test_raycluster_is_done_when_suspended_again_after_it_started() -> None:
    raw = {**rayjob(), "kind": "RayCluster", "spec": {"suspend": True, **cluster_spec()}}
    src = RayCluster(obj(raw))
    assert [p.name for p in src.pod_sets()] == ["head", "gpu"] and src.finished() == (False, False)
    started = applied(raw, src.start_patch({"head": PodSetStart("head", {UID: "w"})}).body)  # type: ignore[arg-type]
    assert RayCluster(obj(started)).finished() == (False, False)  # running
    by_user = {**started, "spec": {**started["spec"], "suspend": True}}
    assert RayCluster(obj(by_user)).finished() == (True, True)
    by_eviction = applied(started, RayCluster(obj(started)).suspend_patch())
    assert RayCluster(obj(by_eviction)).finished() == (False, False)  # requeued, not done


def test_jobset_pod_sets_start_and_done() -> None:
    raw = jobset()
    src = JobSet(obj(raw))
    driver, workers = src.pod_sets()
    assert (driver.name, driver.count) == ("driver", 1)
    assert (workers.name, workers.count, workers.min_count) == ("workers", 4, None)  # 2 x min(4, 2)
    wl = src.workload({}, {})
    assert wl is not None and wl.name.startswith("jobset-bench-")
    started = applied(raw, src.start_patch({"workers": PodSetStart("workers", {UID: "w"}, gate=True)}).body)  # type: ignore[arg-type]
    tmpl = started["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]
    assert tmpl["metadata"]["labels"][UID] == "w" and tmpl["spec"]["schedulingGates"] == [{"name": GATE}]
    assert (
        UID
        not in (started["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["labels"])
    )
    stopped = applied(started, JobSet(obj(started)).suspend_patch())
    tmpl = stopped["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]
    assert stopped["spec"]["suspend"] is True and UID not in tmpl["metadata"]["labels"]
    for cond, done in (
        ("Completed", (True, True)),
        ("Failed", (True, False)),
        ("StartupPolicyCompleted", (False, False)),
    ):
        status = {"conditions": [{"type": cond, "status": "True"}]}
        assert JobSet(obj({**raw, "status": status})).finished() == done
    with pytest.raises(
        WorkloadError, match=r"JobSet ml/bench: spec.replicatedJobs\[1\].name: 'driver' is not unique"
    ):
        JobSet(obj({**raw, "spec": {"replicatedJobs": [raw["spec"]["replicatedJobs"][0]] * 2}})).pod_sets()


def test_the_registry_lists_each_kind_with_how_it_is_held() -> None:
    kinds = {(i.api_version, i.kind): (i.held_by, i.crd) for i in INTEGRATIONS}
    assert kinds[("batch/v1", "Job")] == ("suspend", False)
    assert kinds[("v1", "Pod")] == ("pod-gate", False)  # pod groups
    for av, kind in (
        ("ray.io/v1", "RayJob"),
        ("ray.io/v1", "RayCluster"),
        ("jobset.x-k8s.io/v1alpha2", "JobSet"),
    ):
        assert kinds[(av, kind)] == ("suspend", True)
        entry = by_kind(av, kind)
        assert entry is not None and entry.crd_name == f"{entry.plural}.{entry.group}"
    assert by_kind("ray.io/v1alpha1", "RayJob") is None
    # an object listed without kind (list items carry none) still names its kind in its Workload
    entry = by_kind("ray.io/v1", "RayJob")
    assert entry is not None and entry in suspendable()
    bare = {k: v for k, v in rayjob().items() if k not in ("kind", "apiVersion")}
    wl = entry.adapt(obj(bare)).workload({}, {})
    assert wl is not None and wl.metadata.owner_references[0].kind == "RayJob"  # type: ignore[index]
