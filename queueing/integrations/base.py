"""The protocol every workload source adapter follows (Kueue's ``jobframework.GenericJob``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from queueing.api.base import KubeObject
from queueing.api.core import Pod
from queueing.api.v1beta1 import PodSet, Workload

__all__ = ["GenericJob"]


class GenericJob(Protocol):
    """One workload of some kind (a batch/v1 Job, a pod group, ...) as the controller handles it."""

    @property
    def object(self) -> KubeObject:
        """The object Events and messages name (the Job; a pod group's first pod)."""
        ...

    @property
    def key(self) -> str:
        """``namespace/name`` of the workload source (unique per kind)."""
        ...

    def workload(
        self, workload_priority_classes: Mapping[str, int], priority_classes: Mapping[str, int]
    ) -> Workload | None:
        """The Workload to create for it (None: not queued); raises ``WorkloadError`` for bad input,
        naming the object and field."""
        ...

    def pod_sets(self) -> list[PodSet]:
        """Its pod sets with their templates and counts (as the Workload carries them)."""
        ...

    def is_suspended(self) -> bool:
        """Whether it waits for an admission (suspended, or its pods gated)."""
        ...

    def suspend_patch(self) -> dict[str, Any] | None:
        """The write that suspends it (None: it is stopped by deleting its pods)."""
        ...

    def finished(self) -> tuple[bool, bool]:
        """(finished, succeeded)."""
        ...

    def owns(self, pods: Iterable[Pod]) -> list[Pod]:
        """The pods among ``pods`` that belong to it."""
        ...
