"""Workload sources: one adapter per kind behind the :class:`GenericJob` protocol (Kueue's
jobframework), listed in :data:`queueing.integrations.registry.INTEGRATIONS`. The controller's
reconcilers (source, binding, eviction) read every kind only through them: batch/v1 Job, pod
groups, RayJob, RayCluster, JobSet, and the pod-gated StatefulSet, Deployment and LeaderWorkerSet
(podgated.py, pod_kinds.py: their pods grouped, each group a pod group)."""

from queueing.integrations.base import GenericJob, PodSetStart, StartPatch, SuspendableJob
from queueing.integrations.job import BatchJob
from queueing.integrations.jobset import JobSet
from queueing.integrations.podgroup import PodGroup
from queueing.integrations.ray import RayCluster, RayJob

__all__ = [
    "BatchJob",
    "GenericJob",
    "JobSet",
    "PodGroup",
    "PodSetStart",
    "RayCluster",
    "RayJob",
    "StartPatch",
    "SuspendableJob",
]
