"""The batch/v1 Job adapter."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from queueing.api.core import Job, Pod
from queueing.api.v1beta1 import (
    HOSTNAME_LABEL,
    PodSet,
    Workload,
)
from queueing.controller.plan import (
    ORIGINAL_PARALLELISM_ANNOTATION,
    job_finished,
)
from queueing.integrations.base import PodSetStart, StartPatch
from queueing.scheduling.jobs import workload_for_job

__all__ = ["BatchJob", "original_parallelism"]


def original_parallelism(job: Job) -> int | None:
    """The parallelism a partially admitted Job had before the controller lowered it."""
    raw = job.annotations.get(ORIGINAL_PARALLELISM_ANNOTATION, "")
    return int(raw) if raw.isdigit() else None


class BatchJob:
    """A batch/v1 Job: suspended through ``spec.suspend``, finished by its Complete/Failed conditions."""

    def __init__(self, job: Job, accept_kueue_labels: bool = False) -> None:
        self.job = job
        self.accept_kueue_labels = accept_kueue_labels  # acceptKueueLabels (scheduling/kueue_labels.py)

    @property
    def object(self) -> Job:
        return self.job

    @property
    def key(self) -> str:
        return self.job.key

    def workload(
        self, workload_priority_classes: Mapping[str, int], priority_classes: Mapping[str, int]
    ) -> Workload | None:
        return workload_for_job(
            self.job, workload_priority_classes, priority_classes, self.accept_kueue_labels
        )

    def pod_sets(self) -> list[PodSet]:
        wl = self.workload({}, {})
        return list(wl.spec.pod_sets) if wl is not None else []

    def is_suspended(self) -> bool:
        return bool(self.job.spec.suspend)

    def suspend_patch(self) -> dict[str, Any]:
        """``spec.suspend`` (the Job controller deletes its pods); a partial admission's lowered
        parallelism is given back in the same write (as Kueue restores the pod set info)."""
        body: dict[str, Any] = {"spec": {"suspend": True}}
        original = original_parallelism(self.job)
        if original is not None:
            body["spec"]["parallelism"] = original
            body["metadata"] = {"annotations": {ORIGINAL_PARALLELISM_ANNOTATION: None}}
        return body

    def finished(self) -> tuple[bool, bool]:
        return job_finished(self.job)

    def start_patch(self, starts: Mapping[str, PodSetStart]) -> StartPatch:
        """Unsuspend in one strategic patch: the pod template's labels, the planned node (or a
        previous admission's removed), the placement gate when needed, the admitted parallelism
        (partial admission: the Job's own kept in ``queueing.dra.io/original-parallelism``)."""
        start = next(iter(starts.values()))
        template: dict[str, Any] = {"metadata": {"labels": dict(start.labels)}}
        spec: dict[str, Any] = {}
        if start.node is not None:
            spec["nodeSelector"] = {HOSTNAME_LABEL: start.node}
        elif HOSTNAME_LABEL in (self.job.spec.template.spec.node_selector or {}) and not start.keep_hostname:
            spec["nodeSelector"] = {HOSTNAME_LABEL: None}  # a previous admission's node
        if start.gate:
            spec["schedulingGates"] = [{"name": start.gate_name}]
        if spec:
            template["spec"] = spec
        patch: dict[str, Any] = {"spec": {"suspend": False, "template": template}}
        original = original_parallelism(self.job)
        own = original if original is not None else self.job.spec.parallelism
        if start.count is not None and own is not None and start.count < own:
            # partial admission: the Job's own parallelism is kept to be restored on suspension
            patch["spec"]["parallelism"] = start.count
            patch["metadata"] = {"annotations": {ORIGINAL_PARALLELISM_ANNOTATION: str(own)}}
        elif original is not None:  # left from an earlier partial admission: admitted in full now
            patch["spec"]["parallelism"] = original
            patch["metadata"] = {"annotations": {ORIGINAL_PARALLELISM_ANNOTATION: None}}
        return StartPatch(patch, "strategic")

    def owns(self, pods: Iterable[Pod]) -> list[Pod]:
        """Its pods: those the Job controller made for it (its controller-uid label or owner)."""
        uid = self.job.metadata.uid
        return [
            p
            for p in pods
            if p.labels.get("batch.kubernetes.io/controller-uid", p.labels.get("controller-uid")) == uid
            or any(o.controller and o.uid == uid for o in p.metadata.owner_references or [])
        ]
