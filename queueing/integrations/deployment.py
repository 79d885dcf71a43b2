"""The ``apps/v1`` Deployment adapter: each pod is one Workload (Kueue's Deployment integration
queues its pods as plain pods; serving: a pod holds its quota while it runs).

* queued: the label ``queueing.dra.io/queue-name`` on the Deployment (copied into its pod template
  by deploy/'s MutatingAdmissionPolicy; the pods carry it);
* held: each pod is created with the admission gate (queueing/integrations/podgated.py);
* pod set: one, ``main``, count 1, the pod's own spec;
* Workload ``pod-<pod name>-<hash>``, owned by the pod (deleted with it);
* evicted: the pod is deleted; its ReplicaSet creates another, gated, which waits with a new
  Workload;
* done: the pod ended (Finished, quota released) or is gone (scaled down, the Deployment deleted,
  a rollout: the Workload goes with it, quota released);
* partial admission: none (one pod).
"""

from __future__ import annotations

from queueing.api.apps import Deployment
from queueing.api.base import OwnerReference
from queueing.api.core import Pod
from queueing.integrations.podgated import (
    LABEL_VALUE_MAX,
    GatedGroup,
    Membership,
    all_ended,
    owner_of,
    pod_from,
)
from queueing.integrations.workloads import workload_name
from queueing.scheduling.jobs import QUEUE_NAME_LABEL

__all__ = ["KIND", "OWNER_KINDS", "DeploymentPod", "membership", "pod_of", "replicas"]

KIND = "Deployment"
# a Deployment's pods are its ReplicaSets' (the stand-in cluster has no ReplicaSets: its pods are the
# Deployment's own)
OWNER_KINDS = ("ReplicaSet", "Deployment")


def replicas(dep: Deployment) -> int:
    return dep.spec.replicas if dep.spec.replicas is not None else 1


def pod_of(dep: Deployment, name: str | None, labels: dict[str, str] | None = None) -> Pod:
    """One of its pods, named ``name`` (None: by the API server; the stand-in cluster has no ReplicaSets: the Deployment is
    the pod's controller)."""
    owner = OwnerReference(api_version="apps/v1", kind=KIND, name=dep.name, uid=dep.metadata.uid or "")
    return pod_from(dep.spec.template, owner, dep.namespace or "default", name, labels=labels)


def membership(pod: Pod) -> Membership | None:
    """Its own group of one, for a gated queued pod a ReplicaSet (a Deployment's) created."""
    if QUEUE_NAME_LABEL not in pod.labels or not any(owner_of(pod, k) for k in OWNER_KINDS):
        return None
    return Membership(workload_name("Pod", "", pod.name, LABEL_VALUE_MAX), 1, "main")


class DeploymentPod(GatedGroup):
    """One pod of a Deployment as one Workload, owned by the pod."""

    KIND = KIND

    def finished(self) -> tuple[bool, bool]:
        if not all_ended(self.pods):
            return False, False
        return True, all(p.status.phase == "Succeeded" for p in self.pods)
