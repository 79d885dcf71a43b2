"""The parts of the pod-gated workload kinds the controller reads: ``apps/v1`` StatefulSet and
Deployment, ``leaderworkerset.x-k8s.io/v1`` LeaderWorkerSet (only the fields queueing reads; the rest
is kept as given, ``extra="allow"``)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from queueing.api.base import KubeModel, KubeObject
from queueing.api.core import PodTemplateSpec
from queueing.api.validation import NonNegInt32

__all__ = [
    "Deployment",
    "DeploymentSpec",
    "LeaderWorkerSet",
    "LeaderWorkerSetSpec",
    "LeaderWorkerTemplate",
    "StatefulSet",
    "StatefulSetSpec",
]


class StatefulSetSpec(KubeModel):
    """A StatefulSet's (and a Deployment's) replicas of one pod template."""

    replicas: NonNegInt32 | None = None  # default 1
    template: PodTemplateSpec = Field(default_factory=PodTemplateSpec)


DeploymentSpec = StatefulSetSpec  # the same two fields


class StatefulSet(KubeObject):
    API_VERSION: ClassVar[str] = "apps/v1"
    KIND: ClassVar[str] = "StatefulSet"

    spec: StatefulSetSpec = Field(default_factory=StatefulSetSpec)


class Deployment(KubeObject):
    API_VERSION: ClassVar[str] = "apps/v1"
    KIND: ClassVar[str] = "Deployment"

    spec: DeploymentSpec = Field(default_factory=DeploymentSpec)


class LeaderWorkerTemplate(KubeModel):
    leader_template: PodTemplateSpec | None = None  # absent: the leader uses the worker template
    worker_template: PodTemplateSpec = Field(default_factory=PodTemplateSpec)
    size: NonNegInt32 | None = None  # pods per group, leader included (default 1)


class LeaderWorkerSetSpec(KubeModel):
    replicas: NonNegInt32 | None = None  # groups (default 1)
    leader_worker_template: LeaderWorkerTemplate = Field(default_factory=LeaderWorkerTemplate)


class LeaderWorkerSet(KubeObject):
    API_VERSION: ClassVar[str] = "leaderworkerset.x-k8s.io/v1"
    KIND: ClassVar[str] = "LeaderWorkerSet"

    spec: LeaderWorkerSetSpec = Field(default_factory=LeaderWorkerSetSpec)
