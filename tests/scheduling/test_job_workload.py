"""``workload_for_job`` validates the Workload's parts as wire forms in one pass each (the spec, then
the object): the Workload is the one built model by model -- equal, the same wire form and the same
fields set in every nested model (``to_dict`` writes only those) -- for generated Jobs; a spec the
model rejects, the pod set included, is a ``WorkloadError`` naming the field (before any error of
the object's own, which stays pydantic's)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from queueing.api.base import ObjectMeta, OwnerReference
from queueing.api.core import Job
from queueing.api.v1beta1 import API_VERSION, PodSet, Workload, WorkloadSpec
from queueing.scheduling.jobs import (
    MIN_PARALLELISM_ANNOTATION,
    ORIGINAL_PARALLELISM_ANNOTATION,
    PRIORITY_CLASS_LABEL,
    QUEUE_NAME_LABEL,
    WorkloadError,
    job_counts,
    job_priority,
    owned_workload,
    workload_for_job,
)
from queueing.testing.defaults import default_job, generate_job_selector

WPCS = {"batch": 10}
PCS = {"high": 100}


def job(name: str, labels: dict[str, str], annotations: dict[str, str], **spec: Any) -> Job:
    obj: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "uid": f"uid-{name}",
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "img", "resources": {"requests": {"cpu": "1"}}}],
                }
            },
            **spec,
        },
    }
    return Job.model_validate(generate_job_selector(default_job(obj)))


def model_by_model(j: Job) -> Workload:
    """The Workload of ``j`` built one model at a time, as ``workload_for_job`` did before."""
    count, min_count = job_counts(j)
    prio, pref = job_priority(f"Job {j.key}", j.labels, j.spec.template, WPCS, PCS)
    owner = OwnerReference(
        api_version="batch/v1",
        kind="Job",
        name=j.name,
        uid=j.metadata.uid or "",
        controller=True,
        block_owner_deletion=True,
    )
    ps = PodSet(name="main", template=j.spec.template, count=count, min_count=min_count)
    queue = j.labels[QUEUE_NAME_LABEL]
    return Workload(
        api_version=API_VERSION,
        kind="Workload",
        metadata=ObjectMeta(
            name=f"job-{j.name}",
            namespace=j.namespace,
            labels={QUEUE_NAME_LABEL: queue},
            owner_references=[owner],
        ),
        spec=WorkloadSpec(pod_sets=[ps], queue_name=queue, priority_class_ref=pref, priority=prio),
    )


def fields_set(m: object) -> object:
    """The fields set of a model and of every model in it (``to_dict`` writes those)."""
    if isinstance(m, BaseModel):
        return (
            type(m).__name__,
            sorted(m.model_fields_set),
            [(k, fields_set(getattr(m, k))) for k in type(m).model_fields],
        )
    if isinstance(m, list):
        return [fields_set(x) for x in m]
    return None


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["train", "a-much-longer-job-name-0123456789"]),
    st.sampled_from([None, "batch", "high"]),
    st.one_of(st.none(), st.integers(0, 8)),
    st.one_of(st.none(), st.integers(0, 8)),
    st.one_of(st.none(), st.integers(1, 8)),
    st.one_of(st.none(), st.integers(1, 8)),
)
def test_the_workload_is_the_one_built_model_by_model(
    name: str,
    priority: str | None,
    parallelism: int | None,
    completions: int | None,
    min_parallelism: int | None,
    original: int | None,
) -> None:
    labels = {QUEUE_NAME_LABEL: "lq"} | ({PRIORITY_CLASS_LABEL: priority} if priority else {})
    annotations = {}
    if min_parallelism is not None:
        annotations[MIN_PARALLELISM_ANNOTATION] = str(min_parallelism)
    if original is not None:
        annotations[ORIGINAL_PARALLELISM_ANNOTATION] = str(original)
    spec = {k: v for k, v in (("parallelism", parallelism), ("completions", completions)) if v is not None}
    j = job(name, labels, annotations, **spec)
    try:
        want: Workload | WorkloadError = model_by_model(j)
    except WorkloadError as e:  # minCount beyond the count: the same error either way
        want = e
    if isinstance(want, WorkloadError):
        with pytest.raises(WorkloadError, match=f"^{re.escape(str(want))}$"):
            workload_for_job(j, WPCS, PCS)
        return
    got = workload_for_job(j, WPCS, PCS)
    assert got is not None
    assert got == want
    assert got.to_dict() == want.to_dict()
    assert fields_set(got) == fields_set(want)
    assert got.spec.pod_sets[0].template is j.spec.template  # the Job's template, not a copy


def test_a_queue_name_the_model_rejects_names_the_field() -> None:
    j = job("train", {QUEUE_NAME_LABEL: "Not_A_Name"}, {})
    with pytest.raises(WorkloadError, match=r"^Job team-a/train: Workload spec: queueName: "):
        workload_for_job(j)


def test_a_count_beyond_int32_is_a_workload_error() -> None:
    # the original parallelism of a partial admission comes from an annotation: any digits (no
    # completions to cap it: the API server defaults completions only when parallelism is unset too)
    j = job("train", {QUEUE_NAME_LABEL: "lq"}, {ORIGINAL_PARALLELISM_ANNOTATION: str(2**31)}, parallelism=4)
    with pytest.raises(WorkloadError, match=r"^Job team-a/train: Workload spec: podSets\[0\]\.count: "):
        workload_for_job(j)


def test_an_invalid_name_is_the_workloads_error_and_a_spec_error_comes_first() -> None:
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u", "controller": True}
    ps = {"name": "main", "template": {"spec": {"containers": [{"name": "c"}]}}, "count": 1}
    ok = owned_workload("Job ns/j", "job-j", "ns", "lq", owner, [ps], 0, None)
    assert ok.to_dict()["spec"]["podSets"][0]["count"] == 1
    with pytest.raises(ValidationError, match=r"metadata\.name") as err:  # not the spec's: as it was
        owned_workload("Job ns/j", "Job_J", "ns", "lq", owner, [ps], 0, None)
    assert not isinstance(err.value, WorkloadError)
    with pytest.raises(WorkloadError, match=r"^Job ns/j: Workload spec: queueName: "):
        owned_workload("Job ns/j", "Job_J", "ns", "Bad_Queue", owner, [ps], 0, None)
