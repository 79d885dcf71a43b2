"""The workload source adapters behind the GenericJob protocol (queueing/integrations): batch/v1 Job
and pod group give their pod sets with templates and counts, how they are suspended, whether they
finished, and which pods are theirs."""

from __future__ import annotations

from typing import Any

from queueing.api.core import Job, Pod
from queueing.integrations import BatchJob, GenericJob, PodGroup
from tests.controller.conftest import job


def pod(name: str, phase: str = "Pending", *, group: str = "g", total: int = 2, gated: bool = True) -> Pod:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x"}]}
    if gated:
        spec["schedulingGates"] = [{"name": "queueing.dra.io/admission"}]
    return Pod.model_validate(
        {
            "metadata": {
                "name": name,
                "namespace": "default",
                "uid": f"uid-{name}",
                "labels": {"queueing.dra.io/pod-group": group, "queueing.dra.io/queue-name": "lq"},
                "annotations": {"queueing.dra.io/pod-group-total-count": str(total)},
            },
            "spec": spec,
            "status": {"phase": phase},
        }
    )


def test_a_batch_job_through_the_protocol() -> None:
    raw = job("train", parallelism=3)
    raw["metadata"]["uid"] = "job-uid"
    raw["metadata"]["annotations"] = {"queueing.dra.io/original-parallelism": "4"}
    raw["spec"]["suspend"] = False
    src: GenericJob = BatchJob(Job.model_validate(raw))
    assert src.key == "default/train" and not src.is_suspended()
    [ps] = src.pod_sets()
    assert (
        ps.name == "main" and ps.count == 3 and ps.template.spec.containers[0].name == "main"
    )  # completions 3
    assert src.suspend_patch() == {
        "spec": {"suspend": True, "parallelism": 4},
        "metadata": {"annotations": {"queueing.dra.io/original-parallelism": None}},
    }
    assert src.finished() == (False, False)
    done = {**raw, "status": {"conditions": [{"type": "Failed", "status": "True"}]}}
    assert BatchJob(Job.model_validate(done)).finished() == (True, False)
    mine = Pod.model_validate(
        {
            "metadata": {"name": "train-0", "labels": {"batch.kubernetes.io/controller-uid": "job-uid"}},
            "spec": {},
        }
    )
    other = Pod.model_validate({"metadata": {"name": "x", "labels": {"controller-uid": "else"}}, "spec": {}})
    assert src.owns([mine, other]) == [mine]
    unqueued = {**raw, "metadata": {**raw["metadata"], "labels": {}}}
    assert BatchJob(Job.model_validate(unqueued)).workload({}, {}) is None


def test_a_pod_group_through_the_protocol() -> None:
    one = PodGroup("default", "g", [pod("a")])
    assert not one.complete() and one.pod_sets() == [] and one.finished() == (False, False)
    group: GenericJob = PodGroup("default", "g", [pod("a"), pod("b")])
    assert group.key == "default/g" and group.is_suspended() and group.suspend_patch() is None
    [ps] = group.pod_sets()
    assert ps.count == 2
    wl = group.workload({}, {})
    assert wl is not None and wl.name == "pod-group-g" and wl.spec.queue_name == "lq"
    ended = PodGroup("default", "g", [pod("a", "Succeeded", gated=False), pod("b", "Failed", gated=False)])
    assert ended.finished() == (True, False) and not ended.is_suspended()
    stranger = pod("c", group="h")
    assert group.owns([pod("a"), stranger]) == [pod("a")]
