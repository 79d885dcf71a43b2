"""Workloads for the kinds with several pod sets (RayJob, RayCluster, JobSet, ...), named and owned as
Kueue does it (pure).

* name: ``<kind>-<name>-<hash>`` in lower case (:func:`workload_name`): the object's kind and name,
  cut so that the whole fits a DNS subdomain, then five hex digits of a SHA-1 over kind, group and
  name, so that two kinds' objects of one name never share a Workload (batch/v1 Jobs keep
  ``job-<name>``, which existing Workloads and the ledger already carry);
* owner: the object (controller ownerReference with its UID), so ``kubectl get workloads`` shows
  which object each belongs to and deleting the object deletes its Workload;
* queue: the label ``queueing.dra.io/queue-name`` (None: not queued); priority as for Jobs
  (:func:`queueing.scheduling.jobs.job_priority`, from the first pod set's template).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from queueing.api.base import KubeObject, OwnerReference, format_validation_error
from queueing.api.core import PodTemplateSpec
from queueing.api.v1beta1 import PodSet, Workload
from queueing.scheduling.jobs import QUEUE_NAME_LABEL, WorkloadError, job_priority, owned_workload

__all__ = ["ObjectJob", "count_of", "pod_template", "workload_for_object", "workload_name"]

_HASH_LENGTH = 5
_MAX_NAME = 253


def workload_name(kind: str, group: str, name: str, max_length: int = _MAX_NAME) -> str:
    """``<kind>-<name>-<hash>``, lower case, at most ``max_length`` characters (Kueue's
    ``GetWorkloadNameForOwnerWithGVK``: the prefix is cut, the hash kept; 63 where the name is also a
    label value, as Kueue's ShortWorkloadNames: the pod-gated kinds' pod-group label)."""
    digest = hashlib.sha1(f"{kind}\n{group}\n{name}".encode()).hexdigest()[:_HASH_LENGTH]
    prefix = f"{kind.lower()}-{name}"[: max_length - _HASH_LENGTH - 1].rstrip("-.")
    return f"{prefix}-{digest}"


def pod_template(raw: Any, ref: str, path: str) -> PodTemplateSpec:
    """A pod template read from ``path`` of an object; a bad one raises :class:`WorkloadError`
    naming the object and the field."""
    if not isinstance(raw, dict):
        raise WorkloadError(f"{ref}: {path}: missing or not an object")
    try:
        return PodTemplateSpec.model_validate(raw)
    except ValidationError as e:
        raise WorkloadError(format_validation_error(e, f"{ref}: {path}")) from None


def count_of(raw: Any, ref: str, path: str, default: int = 1) -> int:
    """A non-negative integer field (``default`` when absent)."""
    if raw is None:
        return default
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        raise WorkloadError(f"{ref}: {path}: must be a non-negative integer, got {raw!r}")
    return raw


def workload_for_object(
    obj: KubeObject,
    group: str,
    pod_sets: Sequence[PodSet],
    ref: str,
    workload_priority_classes: Mapping[str, int],
    priority_classes: Mapping[str, int],
) -> Workload | None:
    """The Workload of ``obj`` (apiVersion and kind from the object) with ``pod_sets``; None when the
    object carries no queue label."""
    queue = obj.labels.get(QUEUE_NAME_LABEL)
    if not queue:
        return None
    if not pod_sets:
        raise WorkloadError(f"{ref}: spec: no pod sets")
    kind, name = obj.kind or type(obj).__name__, obj.name
    prio, pref = job_priority(
        ref, obj.labels, pod_sets[0].template, workload_priority_classes, priority_classes
    )
    owner = OwnerReference(
        api_version=obj.api_version or "",
        kind=kind,
        name=name,
        uid=obj.metadata.uid or "",
        controller=True,
        block_owner_deletion=True,
    )
    return owned_workload(
        ref, workload_name(kind, group, name), obj.namespace or "default", queue, owner, pod_sets, prio, pref
    )


class ObjectJob:
    """What the adapters of the kinds held by ``spec.suspend`` with several pod sets share (RayJob,
    RayCluster, JobSet): the object and its raw form, its key, its Workload."""

    group = ""

    def __init__(self, obj: KubeObject) -> None:
        self.obj = obj
        self.raw = obj.to_dict()

    @property
    def object(self) -> KubeObject:
        return self.obj

    @property
    def key(self) -> str:
        return self.obj.key

    @property
    def ref(self) -> str:
        """How messages name it: ``<Kind> <namespace>/<name>``."""
        return f"{self.obj.kind} {self.obj.key}"

    def pod_sets(self) -> list[PodSet]:
        raise NotImplementedError

    def workload(
        self, workload_priority_classes: Mapping[str, int], priority_classes: Mapping[str, int]
    ) -> Workload | None:
        if not self.obj.labels.get(QUEUE_NAME_LABEL):
            return None
        return workload_for_object(
            self.obj, self.group, self.pod_sets(), self.ref, workload_priority_classes, priority_classes
        )

    def is_suspended(self) -> bool:
        return bool((self.raw.get("spec") or {}).get("suspend"))
