"""Workloads for batch/v1 Jobs and for pod groups (pure).

**Job** → one Workload named ``job-<job name>`` in the Job's namespace:

* queue: label ``queueing.dra.io/queue-name`` (the LocalQueue; a Job without it is not ours:
  :func:`workload_for_job` returns ``None``);
* owner: the Job (controller ownerReference with the Job's UID);
* one podSet ``main`` from ``spec.template``, ``count = spec.parallelism`` (default 1; Kubernetes
  caps running pods at ``completions`` when that is smaller), claims from the template's
  ``spec.resourceClaims``;
* ``minCount`` (partial admission) from the annotation ``queueing.dra.io/min-parallelism``: an
  integer from 1 to ``count``; when admitted with fewer pods the controller lowers the Job's
  parallelism to the admitted count and keeps the Job's own in the annotation
  ``queueing.dra.io/original-parallelism``, which ``count`` then comes from (a Workload recreated
  for a partially admitted Job asks for the full parallelism again);
* priority from the label ``queueing.dra.io/priority-class``: a WorkloadPriorityClass of that name,
  else a PriorityClass; else the template's ``priorityClassName`` (a PriorityClass); else 0.

**Pod group** → pods labelled ``queueing.dra.io/pod-group: <group>`` with the annotation
``queueing.dra.io/pod-group-total-count: <n>`` form one Workload ``pod-group-<group>``, admitted when
all ``n`` pods exist; pods with the same template shape form one podSet (named ``main`` when there is
one shape, else ``main``, ``ps-1``, ...), with count = number of such pods.

Errors raise :class:`WorkloadError` naming the object and the field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from pydantic import ValidationError

from queueing.api.base import ObjectMeta, OwnerReference, format_validation_error
from queueing.api.core import Job, Pod, PodTemplateSpec
from queueing.api.v1beta1 import API_VERSION, PodSet, PriorityClassRef, Workload, WorkloadSpec
from queueing.scheduling.kueue_labels import job_label

__all__ = [
    "MIN_PARALLELISM_ANNOTATION",
    "ORIGINAL_PARALLELISM_ANNOTATION",
    "POD_GROUP_LABEL",
    "POD_GROUP_TOTAL_COUNT_ANNOTATION",
    "PRIORITY_CLASS_LABEL",
    "QUEUE_NAME_LABEL",
    "WorkloadError",
    "job_priority",
    "owned_workload",
    "workload_for_job",
    "workload_for_pod_group",
    "workload_name_for_job",
]

QUEUE_NAME_LABEL = "queueing.dra.io/queue-name"
PRIORITY_CLASS_LABEL = "queueing.dra.io/priority-class"
MIN_PARALLELISM_ANNOTATION = "queueing.dra.io/min-parallelism"
# on a Job admitted partially (lower parallelism): its own parallelism, restored when it is suspended
ORIGINAL_PARALLELISM_ANNOTATION = "queueing.dra.io/original-parallelism"
POD_GROUP_LABEL = "queueing.dra.io/pod-group"
POD_GROUP_TOTAL_COUNT_ANNOTATION = "queueing.dra.io/pod-group-total-count"


class WorkloadError(ValueError):
    """The Job or pod group cannot become a Workload; the message names object and field."""


def workload_name_for_job(job: Job) -> str:
    return f"job-{job.name}"[:253]


def job_priority(
    obj_ref: str,
    labels: Mapping[str, str],
    template: PodTemplateSpec,
    workload_priority_classes: Mapping[str, int],
    priority_classes: Mapping[str, int],
    accept_kueue_labels: bool = False,
) -> tuple[int, PriorityClassRef | None]:
    name, label = job_label(labels, PRIORITY_CLASS_LABEL, accept_kueue_labels)  # acceptKueueLabels
    if name:
        if name in workload_priority_classes:
            return workload_priority_classes[name], PriorityClassRef(
                group="queueing.dra.io", kind="WorkloadPriorityClass", name=name
            )
        if name in priority_classes:
            return priority_classes[name], PriorityClassRef(
                group="scheduling.k8s.io", kind="PriorityClass", name=name
            )
        raise WorkloadError(
            f"{obj_ref}: metadata.labels[{label}]: no WorkloadPriorityClass or PriorityClass named {name!r}"
        )
    pcn = template.spec.priority_class_name
    if pcn:
        if pcn not in priority_classes:
            raise WorkloadError(
                f"{obj_ref}: spec.template.spec.priorityClassName: PriorityClass {pcn!r} not found"
            )
        return priority_classes[pcn], PriorityClassRef(
            group="scheduling.k8s.io", kind="PriorityClass", name=pcn
        )
    return 0, None


def workload_for_job(
    job: Job,
    workload_priority_classes: Mapping[str, int] | None = None,
    priority_classes: Mapping[str, int] | None = None,
    accept_kueue_labels: bool = False,
) -> Workload | None:
    """The Workload for a Job labelled with a LocalQueue, or None for a Job that is not queued
    (``accept_kueue_labels``: Kueue's labels count too, see ``kueue_labels``)."""
    ref = f"Job {job.key}"
    queue, _ = job_label(job.labels, QUEUE_NAME_LABEL, accept_kueue_labels)  # acceptKueueLabels
    if not queue:
        return None
    count, min_count = job_counts(job)
    prio, pref = job_priority(
        ref,
        job.labels,
        job.spec.template,
        workload_priority_classes or {},
        priority_classes or {},
        accept_kueue_labels,
    )
    # wire forms, validated with the Workload (one validation instead of one per model)
    owner = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": job.name,
        "uid": job.metadata.uid or "",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    pod_set = {"name": "main", "template": job.spec.template, "count": count, "minCount": min_count}
    return owned_workload(
        ref, workload_name_for_job(job), job.namespace or "default", queue, owner, [pod_set], prio, pref
    )


def owned_workload(
    ref: str,
    name: str,
    namespace: str,
    queue: str,
    owner: OwnerReference | Mapping[str, object],
    pod_sets: Sequence[PodSet | Mapping[str, object]],
    priority: int,
    priority_class_ref: PriorityClassRef | None,
) -> Workload:
    """A Workload owned by ``owner`` (its controller) in ``queue``; a spec the model rejects raises
    :class:`WorkloadError` naming ``ref``. ``owner`` and ``pod_sets`` are models or their wire
    forms (validated here: a pod set the model rejects is such a spec)."""
    spec: dict[str, object] = {
        "podSets": list(pod_sets),
        "queueName": queue,
        "priorityClassRef": priority_class_ref,
        "priority": priority,
    }
    obj: dict[str, object] = {
        "apiVersion": API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {QUEUE_NAME_LABEL: queue},
            "ownerReferences": [owner],
        },
        "spec": spec,
    }
    try:
        # spec and object in one validation (a WorkloadSpec instance given to Workload would run its
        # after-validator again); on an error, as two, for the spec's errors named relative to it
        return Workload.model_validate(obj)
    except ValidationError:
        pass
    try:
        obj["spec"] = WorkloadSpec.model_validate(spec)
    except ValidationError as e:
        raise WorkloadError(format_validation_error(e, f"{ref}: Workload spec")) from None
    return Workload.model_validate(obj)


def job_counts(job: Job) -> tuple[int, int | None]:
    """(count, minCount) of a Job's pod set: its parallelism (as before a partial admission lowered
    it), at most its completions; minCount from the min-parallelism annotation. Raises
    :class:`WorkloadError` naming the field for bad values."""
    ref = f"Job {job.key}"
    count = job.spec.parallelism if job.spec.parallelism is not None else 1
    original = job.annotations.get(ORIGINAL_PARALLELISM_ANNOTATION, "")
    if original.isdigit():
        count = int(original)
    if count < 0:
        raise WorkloadError(f"{ref}: spec.parallelism: must be >= 0, got {count}")
    if job.spec.completions is not None and 0 <= job.spec.completions < count:
        count = job.spec.completions
    min_count: int | None = None
    raw = job.annotations.get(MIN_PARALLELISM_ANNOTATION)
    if raw is not None:
        try:
            min_count = int(raw)
        except ValueError:
            raise WorkloadError(
                f"{ref}: metadata.annotations[{MIN_PARALLELISM_ANNOTATION}]: not an integer: {raw!r}"
            ) from None
        if not 1 <= min_count <= max(count, 1):
            raise WorkloadError(
                f"{ref}: metadata.annotations[{MIN_PARALLELISM_ANNOTATION}]: must be between 1 and "
                f"parallelism ({count}), got {min_count}"
            )
        if min_count >= count:
            min_count = None
    return count, min_count


def _shape(pod: Pod) -> str:
    spec = pod.spec.model_copy(update={"node_name": None, "scheduling_gates": None})
    return json.dumps(spec.model_dump(mode="json", by_alias=True, exclude_none=True), sort_keys=True)


def workload_for_pod_group(
    pods: Sequence[Pod],
    workload_priority_classes: Mapping[str, int] | None = None,
    priority_classes: Mapping[str, int] | None = None,
) -> Workload:
    """The Workload of one pod group (every pod given must carry the same group label, namespace
    and total count). Raises :class:`WorkloadError` when the group is inconsistent."""
    if not pods:
        raise WorkloadError("pod group: no pods")
    first = pods[0]
    ns = first.namespace or "default"
    group = first.labels.get(POD_GROUP_LABEL)
    ref = f"Pod {first.key}"
    if not group:
        raise WorkloadError(f"{ref}: metadata.labels[{POD_GROUP_LABEL}]: missing")
    raw = first.annotations.get(POD_GROUP_TOTAL_COUNT_ANNOTATION)
    try:
        total = int(raw) if raw is not None else None
    except ValueError:
        total = None
    if total is None or total < 1:
        raise WorkloadError(
            f"{ref}: metadata.annotations[{POD_GROUP_TOTAL_COUNT_ANNOTATION}]: "
            f"must be a positive integer, got {raw!r}"
        )
    queue = first.labels.get(QUEUE_NAME_LABEL)
    if not queue:
        raise WorkloadError(f"{ref}: metadata.labels[{QUEUE_NAME_LABEL}]: missing")
    shapes: dict[str, list[Pod]] = {}
    for p in pods:
        pref_ = f"Pod {p.key}"
        if (p.namespace or "default") != ns or p.labels.get(POD_GROUP_LABEL) != group:
            raise WorkloadError(f"{pref_}: metadata.labels[{POD_GROUP_LABEL}]: not in pod group {ns}/{group}")
        if p.annotations.get(POD_GROUP_TOTAL_COUNT_ANNOTATION) != raw:
            raise WorkloadError(
                f"{pref_}: metadata.annotations[{POD_GROUP_TOTAL_COUNT_ANNOTATION}]: "
                f"differs from the group's ({raw})"
            )
        if p.labels.get(QUEUE_NAME_LABEL) != queue:
            raise WorkloadError(
                f"{pref_}: metadata.labels[{QUEUE_NAME_LABEL}]: differs from the group's ({queue})"
            )
        shapes.setdefault(_shape(p), []).append(p)
    if len(pods) > total:
        raise WorkloadError(
            f"{ref}: metadata.annotations[{POD_GROUP_TOTAL_COUNT_ANNOTATION}]: the group has "
            f"{len(pods)} pods, more than {total}"
        )
    groups = sorted(shapes.values(), key=lambda ps: min(p.name for p in ps))
    if len(groups) > 8:
        raise WorkloadError(f"{ref}: pod group {group}: more than 8 different pod shapes")
    pod_sets = []
    for i, members in enumerate(groups):
        tmpl = members[0]
        spec = tmpl.spec.model_copy(update={"node_name": None, "scheduling_gates": None})
        pod_sets.append(
            PodSet(
                name="main" if i == 0 else f"ps-{i}",
                template=PodTemplateSpec(metadata={"labels": dict(tmpl.labels)}, spec=spec),
                count=len(members),
            )
        )
    prio, pcref = job_priority(
        ref, first.labels, pod_sets[0].template, workload_priority_classes or {}, priority_classes or {}
    )
    owners = [
        OwnerReference(api_version="v1", kind="Pod", name=p.name, uid=p.metadata.uid or "")
        for p in sorted(pods, key=lambda p: p.name)
    ]
    return Workload(
        api_version=API_VERSION,
        kind="Workload",
        metadata=ObjectMeta(
            name=f"pod-group-{group}"[:253],
            namespace=ns,
            labels={QUEUE_NAME_LABEL: queue, POD_GROUP_LABEL: group},
            owner_references=owners,
        ),
        spec=WorkloadSpec(pod_sets=pod_sets, queue_name=queue, priority_class_ref=pcref, priority=prio),
    )
