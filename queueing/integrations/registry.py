"""The integrated kinds, one entry each: which API resource, how its adapter is built, how it is held.

The controller iterates this list (queueing/controller/source.py, binding.py, eviction.py) instead of
branching on kinds: per entry held by ``suspend`` it watches the objects labelled
``queueing.dra.io/queue-name``, creates their Workloads, suspends those running unadmitted, starts
them on admission (:meth:`SuspendableJob.start_patch`), suspends them on eviction and finishes them.
Entries held by ``pod-gate`` are pods held by a scheduling gate (pod groups), stopped by deleting
their pods.

An entry with ``crd=True`` is served from a CustomResourceDefinition that may be missing: its adapter
is disabled (one log line) until the CRD appears, then its informer starts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from queueing.api.apps import Deployment, LeaderWorkerSet, StatefulSet
from queueing.api.base import KubeObject
from queueing.api.core import Job
from queueing.integrations.base import GenericJob, SuspendableJob
from queueing.integrations.job import BatchJob
from queueing.integrations.jobset import JobSet
from queueing.integrations.ray import RayCluster, RayJob

__all__ = ["INTEGRATIONS", "Integration", "by_kind", "pod_gated", "suspendable"]


@dataclass(frozen=True)
class Integration:
    """One integrated kind. ``adapter(obj, options)`` builds its :class:`GenericJob` (options:
    ``accept_kueue_labels``); ``held_by``: ``suspend`` (``spec.suspend``) or ``pod-gate`` (the
    admission gate on its pods)."""

    kind: str
    group: str
    version: str
    plural: str
    held_by: Literal["suspend", "pod-gate"]
    model: type[KubeObject]
    adapter: Callable[[Any, bool], GenericJob] | None
    crd: bool = False
    # whether the controller watches its objects (a pod-gated kind read only through its pods: no)
    watched: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def crd_name(self) -> str:
        """The CustomResourceDefinition's name (``<plural>.<group>``)."""
        return f"{self.plural}.{self.group}"

    def adapt(self, obj: Any, accept_kueue_labels: bool = False) -> SuspendableJob:
        """The adapter of a kind held by suspend."""
        assert self.adapter is not None, f"{self.kind} has no object adapter"
        if isinstance(obj, KubeObject) and (obj.kind is None or obj.api_version is None):
            # list items carry no kind: the adapter's Workload owner and Events name it
            obj = obj.model_copy(update={"kind": self.kind, "api_version": self.api_version})
        out: SuspendableJob = self.adapter(obj, accept_kueue_labels)  # type: ignore[assignment]
        return out


INTEGRATIONS: tuple[Integration, ...] = (
    Integration("Job", "batch", "v1", "jobs", "suspend", Job, lambda o, k: BatchJob(o, k)),
    # pods labelled queueing.dra.io/pod-group (their adapter, PodGroup, is built from the group's pods)
    Integration("Pod", "", "v1", "pods", "pod-gate", KubeObject, None),
    Integration("RayJob", "ray.io", "v1", "rayjobs", "suspend", KubeObject, lambda o, _: RayJob(o), crd=True),
    Integration(
        "RayCluster",
        "ray.io",
        "v1",
        "rayclusters",
        "suspend",
        KubeObject,
        lambda o, _: RayCluster(o),
        crd=True,
    ),
    Integration(
        "JobSet",
        "jobset.x-k8s.io",
        "v1alpha2",
        "jobsets",
        "suspend",
        KubeObject,
        lambda o, _: JobSet(o),
        crd=True,
    ),
    # pod-gated (queueing/integrations/podgated.py): their pods are grouped and held by the admission
    # gate; the objects are read for replicas, owner and when they are done
    Integration("StatefulSet", "apps", "v1", "statefulsets", "pod-gate", StatefulSet, None),
    Integration("Deployment", "apps", "v1", "deployments", "pod-gate", Deployment, None, watched=False),
    Integration(
        "LeaderWorkerSet",
        "leaderworkerset.x-k8s.io",
        "v1",
        "leaderworkersets",
        "pod-gate",
        LeaderWorkerSet,
        None,
        crd=True,
    ),
)


def by_kind(api_version: str, kind: str) -> Integration | None:
    """The entry of an owner reference's apiVersion and kind (None: not an integrated kind)."""
    for i in INTEGRATIONS:
        if i.kind == kind and i.api_version == api_version:
            return i
    return None


def suspendable() -> list[Integration]:
    """The entries held by ``spec.suspend`` (one object, one Workload)."""
    return [i for i in INTEGRATIONS if i.held_by == "suspend"]


def pod_gated() -> list[Integration]:
    """The pod-gated kinds whose objects the controller watches (StatefulSet, LeaderWorkerSet)."""
    return [i for i in INTEGRATIONS if i.held_by == "pod-gate" and i.watched and i.model is not KubeObject]
