"""The ``apps/v1`` StatefulSet adapter: all its replicas are one gang (Kueue's StatefulSet
integration, a pod group of ``replicas`` pods).

* queued: the label ``queueing.dra.io/queue-name`` on the StatefulSet (copied into its pod template
  by deploy/'s MutatingAdmissionPolicy);
* held: its pods are created with the admission gate (see queueing/integrations/podgated.py);
* pod set: one, ``main``, ``count = spec.replicas`` (default 1), the template is its pods';
* Workload ``statefulset-<name>-<hash>``, owned by the StatefulSet;
* evicted: its pods are deleted; the StatefulSet controller creates them again, gated, and the
  Workload waits in its queue again;
* done: scaled down to 0 replicas (Finished, quota released) or deleted (the Workload goes with it:
  quota released);
* partial admission: none (a gang).
"""

from __future__ import annotations

from queueing.api.apps import StatefulSet
from queueing.api.base import OwnerReference
from queueing.api.core import Pod
from queueing.integrations.podgated import LABEL_VALUE_MAX, GatedGroup, Membership, owner_of, pod_from
from queueing.integrations.workloads import workload_name
from queueing.scheduling.jobs import QUEUE_NAME_LABEL

__all__ = ["KIND", "StatefulSetGroup", "membership", "owner_ref", "pods_of", "replicas"]

KIND = "StatefulSet"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"  # a LeaderWorkerSet's StatefulSets are not ours


def replicas(sts: StatefulSet) -> int:
    return sts.spec.replicas if sts.spec.replicas is not None else 1


def owner_ref(sts: StatefulSet) -> OwnerReference:
    return OwnerReference(api_version="apps/v1", kind=KIND, name=sts.name, uid=sts.metadata.uid or "")


def pods_of(sts: StatefulSet) -> list[Pod]:
    """The pods its controller creates: ``<name>-0`` .. ``<name>-<replicas-1>``, all at once
    (``podManagementPolicy: Parallel``, which a gang needs: with OrderedReady a pod waits for the one
    before it to be Ready, which waits for the whole gang), each with its hostname."""
    out = []
    for i in range(replicas(sts)):
        name = f"{sts.name}-{i}"
        pod = pod_from(
            sts.spec.template,
            owner_ref(sts),
            sts.namespace or "default",
            name,
            labels={"statefulset.kubernetes.io/pod-name": name, "apps.kubernetes.io/pod-index": str(i)},
        )
        pod.spec.__pydantic_extra__ = {**(pod.spec.__pydantic_extra__ or {}), "hostname": name}
        out.append(pod)
    return out


def membership(pod: Pod, sts: StatefulSet | None) -> Membership | None:
    """The group of a gated pod its StatefulSet ``sts`` (the pod's controlling owner) created; None
    when the pod is not a queued StatefulSet's."""
    o = owner_of(pod, KIND)
    if o is None or LWS_NAME_LABEL in pod.labels or sts is None or sts.metadata.uid != o.uid:
        return None
    if QUEUE_NAME_LABEL not in sts.labels:
        return None
    return Membership(workload_name(KIND, "apps", sts.name, LABEL_VALUE_MAX), replicas(sts), "main")


class StatefulSetGroup(GatedGroup):
    """A StatefulSet's pods as one Workload."""

    KIND = KIND

    def __init__(self, namespace: str, name: str, pods: list[Pod], sts: StatefulSet | None) -> None:
        super().__init__(namespace, name, pods, owner_ref(sts) if sts is not None else None)
        self.sts = sts

    def finished(self) -> tuple[bool, bool]:
        """Done once scaled down to 0 (or gone: then its Workload is deleted with it)."""
        if self.sts is None or self.sts.metadata.deletion_timestamp:
            return True, True
        return replicas(self.sts) == 0, replicas(self.sts) == 0
