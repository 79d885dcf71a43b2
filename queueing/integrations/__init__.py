"""Workload sources: one adapter per kind behind the :class:`GenericJob` protocol (Kueue's
jobframework). The workload source reconciler (queueing/controller/source.py) reads Jobs and pod
groups only through it; RayJob, JobSet, LeaderWorkerSet and Deployment adapters come as further
adapters of the same protocol."""

from queueing.integrations.base import GenericJob
from queueing.integrations.job import BatchJob
from queueing.integrations.podgroup import PodGroup

__all__ = ["BatchJob", "GenericJob", "PodGroup"]
