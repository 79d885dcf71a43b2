"""What the pod-gated kinds share (StatefulSet, Deployment, LeaderWorkerSet; Kueue's pod-based
integrations). They are not suspended: their pods are.

1. **Held**: their pods are created with the scheduling gate ``queueing.dra.io/admission``. The
   MutatingAdmissionPolicies of deploy/ do it in the API server (no webhook server): the queue-name
   and priority-class labels of the object are copied into its pod templates, and a pod created with
   the queue-name label by a ReplicaSet, a StatefulSet (also a LeaderWorkerSet's) gets the gate.
2. **Grouped**: the controller gives every gated pod its :class:`Membership` (labels
   ``queueing.dra.io/pod-group`` = the Workload's name, ``queueing.dra.io/pod-set``, annotation
   ``queueing.dra.io/pod-group-total-count``), as Kueue's StatefulSet and LeaderWorkerSet reconcilers
   label their pods. From then on the pods are a pod group (queueing/integrations/podgroup.py): one
   Workload once all ``total`` pods exist, admitted as a gang, bound by removing the gate (planned
   node, claims), evicted by deleting the pods (their controller creates them again, gated: the
   Workload waits again), with the Workload named and owned per kind.
3. **Done** per kind: see each adapter's ``finished``.

Pure: no I/O; the controller and ``queueing simulate`` both use it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from queueing.api.base import ObjectMeta, OwnerReference
from queueing.api.core import Pod, PodTemplateSpec
from queueing.api.v1beta1 import (
    API_VERSION,
    GATE_ADMISSION,
    POD_GROUP_LABEL,
    POD_GROUP_TOTAL_ANNOTATION,
    POD_SET_LABEL,
    PodSet,
    Workload,
    WorkloadSpec,
)
from queueing.integrations.podgroup import PodGroup, ended
from queueing.scheduling.jobs import QUEUE_NAME_LABEL, WorkloadError, job_priority

LABEL_VALUE_MAX = 63  # a Workload name that is also the pods' pod-group label value

__all__ = ["GatedGroup", "Membership", "gated", "owner_of", "pod_from", "template_of", "with_membership"]


@dataclass(frozen=True)
class Membership:
    """The group a gated pod belongs to: the labels and annotation the controller writes on it."""

    group: str  # the Workload's name, also the pod-group label value
    total: int  # pods in the group
    pod_set: str  # the pod set of the Workload the pod is one of

    def patch(self) -> dict[str, Any]:
        """The merge patch that puts a pod into its group."""
        return {
            "metadata": {
                "labels": {POD_GROUP_LABEL: self.group, POD_SET_LABEL: self.pod_set},
                "annotations": {POD_GROUP_TOTAL_ANNOTATION: str(self.total)},
            }
        }


def gated(pod: Pod) -> bool:
    """Held by the admission gate (not placed yet)."""
    return any(g.name == GATE_ADMISSION for g in pod.spec.scheduling_gates or [])


def owner_of(pod: Pod, kind: str) -> OwnerReference | None:
    """The pod's controlling owner when it is of ``kind``."""
    return next(
        (o for o in pod.metadata.owner_references or [] if o.controller and o.kind == kind),
        None,
    )


def pod_from(
    template: PodTemplateSpec,
    owner: OwnerReference,
    namespace: str,
    name: str | None,
    *,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> Pod:
    """A pod of ``template`` as its controller creates it (controlled by ``owner``); what the stand-in
    controllers create and ``queueing simulate`` queues (``name`` None: the API server names it)."""
    meta = template.metadata or {}
    return Pod.model_validate(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                **({"name": name} if name is not None else {}),
                "namespace": namespace,
                "labels": {**(meta.get("labels") or {}), **(labels or {})},
                "annotations": {**(meta.get("annotations") or {}), **(annotations or {})},
                "ownerReferences": [{**owner.to_dict(), "controller": True, "blockOwnerDeletion": True}],
            },
            "spec": template.spec.to_dict(),
        }
    )


def with_membership(pod: Pod, m: Membership) -> Pod:
    """The pod as the controller labels it (its group, pod set and the group's size)."""
    meta = pod.metadata.model_copy(
        update={
            "labels": {**pod.labels, POD_GROUP_LABEL: m.group, POD_SET_LABEL: m.pod_set},
            "annotations": {**pod.annotations, POD_GROUP_TOTAL_ANNOTATION: str(m.total)},
        }
    )
    return pod.model_copy(update={"metadata": meta})


def template_of(pod: Pod) -> PodTemplateSpec:
    """The pod as a pod set's template: its labels and spec, without what binding and its controller
    set per pod (node, gates, hostname)."""
    spec = pod.spec.model_copy(update={"node_name": None, "scheduling_gates": None}, deep=True)
    for per_pod in ("hostname", "subdomain"):  # a StatefulSet's pods each have their own
        (spec.__pydantic_extra__ or {}).pop(per_pod, None)
    return PodTemplateSpec(metadata={"labels": dict(pod.labels)}, spec=spec)


class GatedGroup(PodGroup):
    """The pods of one group of a pod-gated kind (all carry its :class:`Membership`), as one workload.

    Subclasses name the kind, the owner of the Workload and when it is done."""

    KIND = ""
    POD_SETS: tuple[str, ...] = ("main",)  # the order of the Workload's pod sets

    def __init__(
        self, namespace: str, name: str, pods: list[Pod], owner: OwnerReference | None = None
    ) -> None:
        super().__init__(namespace, name, pods)
        self.owner = owner

    @property
    def workload_name(self) -> str:
        return self.name  # the group is named as the Workload (<kind>-<name>-<hash>)

    def owners(self) -> list[OwnerReference]:
        if self.owner is not None:
            return [self.owner.model_copy(update={"controller": True, "block_owner_deletion": True})]
        return [
            OwnerReference(api_version="v1", kind="Pod", name=p.name, uid=p.metadata.uid or "")
            for p in sorted(self.pods, key=lambda p: p.name)
        ]

    def workload(
        self, workload_priority_classes: Mapping[str, int], priority_classes: Mapping[str, int]
    ) -> Workload | None:
        if not self.pods:
            return None
        first = min(self.pods, key=lambda p: p.name)
        ref = f"Pod {first.key} ({self.KIND} group {self.name})"
        queue = first.labels.get(QUEUE_NAME_LABEL)
        if not queue:
            raise WorkloadError(f"{ref}: metadata.labels[{QUEUE_NAME_LABEL}]: missing")
        by_set: dict[str, list[Pod]] = {}
        for p in sorted(self.pods, key=lambda p: p.name):
            by_set.setdefault(p.labels.get(POD_SET_LABEL, "main"), []).append(p)
        names = [n for n in self.POD_SETS if n in by_set] + sorted(
            n for n in by_set if n not in self.POD_SETS
        )
        pod_sets = [PodSet(name=n, template=template_of(by_set[n][0]), count=len(by_set[n])) for n in names]
        prio, pcref = job_priority(
            ref, first.labels, pod_sets[0].template, workload_priority_classes, priority_classes
        )
        return Workload(
            api_version=API_VERSION,
            kind="Workload",
            metadata=ObjectMeta(
                name=self.workload_name,
                namespace=self.namespace,
                labels={QUEUE_NAME_LABEL: queue, POD_GROUP_LABEL: self.name},
                owner_references=self.owners(),
            ),
            spec=WorkloadSpec(pod_sets=pod_sets, queue_name=queue, priority_class_ref=pcref, priority=prio),
        )

    def finished(self) -> tuple[bool, bool]:
        """Serving kinds run until their object says they are done (see the subclasses); pods that
        end are replaced by their controller."""
        return False, False


def all_ended(pods: Sequence[Pod]) -> bool:
    return bool(pods) and all(ended(p) for p in pods)
