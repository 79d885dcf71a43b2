"""The pod group adapter: pods labelled ``queueing.dra.io/pod-group`` form one workload."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from queueing.api.core import FINISHED_POD_PHASES, Pod
from queueing.api.v1beta1 import (
    GATE_ADMISSION,
    POD_GROUP_LABEL,
    POD_GROUP_TOTAL_ANNOTATION,
    PodSet,
    Workload,
)
from queueing.scheduling.jobs import workload_for_pod_group

__all__ = ["PodGroup", "ended", "group_total"]


def group_total(pod: Pod) -> int:
    """The group's size from ``queueing.dra.io/pod-group-total-count`` (1 when absent or bad)."""
    raw = pod.annotations.get(POD_GROUP_TOTAL_ANNOTATION, "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else 1


def ended(pod: Pod) -> bool:
    return (pod.status.phase or "") in FINISHED_POD_PHASES


class PodGroup:
    """The pods of one group in one namespace: admitted once all exist, suspended by the admission
    gate, stopped by deleting its pods, finished when all ended."""

    def __init__(self, namespace: str, name: str, pods: list[Pod]) -> None:
        self.namespace, self.name, self.pods = namespace, name, pods

    @property
    def object(self) -> Pod:
        return self.pods[0]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def workload_name(self) -> str:
        return f"pod-group-{self.name}"[:253]

    def complete(self) -> bool:
        """All its pods exist (it is admitted only then)."""
        return bool(self.pods) and len(self.pods) >= group_total(self.pods[0])

    def workload(
        self, workload_priority_classes: Mapping[str, int], priority_classes: Mapping[str, int]
    ) -> Workload | None:
        return workload_for_pod_group(self.pods, workload_priority_classes, priority_classes)

    def pod_sets(self) -> list[PodSet]:
        return list(self.workload({}, {}).spec.pod_sets) if self.complete() else []  # type: ignore[union-attr]

    def is_suspended(self) -> bool:
        return any(g.name == GATE_ADMISSION for p in self.pods for g in p.spec.scheduling_gates or [])

    def suspend_patch(self) -> None:
        return None  # stopped by deleting its pods

    def finished(self) -> tuple[bool, bool]:
        if not self.complete() or not all(ended(p) for p in self.pods):
            return False, False
        return True, all(p.status.phase == "Succeeded" for p in self.pods)

    def owns(self, pods: Iterable[Pod]) -> list[Pod]:
        return [
            p for p in pods if p.namespace == self.namespace and p.labels.get(POD_GROUP_LABEL) == self.name
        ]
