"""The pod-gated kinds side by side: which kind a gated pod is of, its group, and the adapter of a
group of pods (a plain pod group when none of the kinds claims it). A LeaderWorkerSet's pods are
owned by StatefulSets: it is asked first."""

from __future__ import annotations

from collections.abc import Callable

from queueing.api.apps import LeaderWorkerSet, StatefulSet
from queueing.api.base import KubeObject
from queueing.api.core import Pod
from queueing.api.v1beta1 import Workload
from queueing.integrations import deployment, leaderworkerset, statefulset
from queueing.integrations.podgated import Membership, owner_of
from queueing.integrations.podgroup import PodGroup

__all__ = ["finished_without_pods", "group_for", "kind_of", "membership_of"]


def kind_of(pod: Pod) -> str | None:
    """The pod-gated kind whose pod this is (None: none of them; maybe a plain pod group's)."""
    if leaderworkerset.NAME_LABEL in pod.labels:
        return leaderworkerset.KIND
    if owner_of(pod, statefulset.KIND) is not None:
        return statefulset.KIND
    if any(owner_of(pod, k) for k in deployment.OWNER_KINDS):
        return deployment.KIND
    return None


def membership_of(pod: Pod, statefulsets: Callable[[str, str], StatefulSet | None]) -> Membership | None:
    """The group of a gated pod of one of the pod-gated kinds (None: not one, or its object is not
    known yet). Raises ``WorkloadError`` naming the pod and field for unreadable labels."""
    kind = kind_of(pod)
    ns = pod.namespace or "default"
    if kind == leaderworkerset.KIND:
        return leaderworkerset.membership(pod)
    if kind == statefulset.KIND:
        o = owner_of(pod, statefulset.KIND)
        return statefulset.membership(pod, statefulsets(ns, o.name) if o is not None else None)
    if kind == deployment.KIND:
        return deployment.membership(pod)
    return None


def group_for(
    namespace: str,
    name: str,
    pods: list[Pod],
    statefulsets: Callable[[str, str], StatefulSet | None],
    leaderworkersets: Callable[[str, str], LeaderWorkerSet | None] = lambda ns, n: None,
) -> PodGroup:
    """The adapter of the group ``name``'s pods (all carry the group label)."""
    kind = kind_of(pods[0]) if pods else None
    if kind == leaderworkerset.KIND:
        lws = leaderworkersets(namespace, pods[0].labels.get(leaderworkerset.NAME_LABEL, ""))
        return leaderworkerset.LeaderWorkerSetGroup(namespace, name, pods, lws)
    if kind == statefulset.KIND:
        o = owner_of(pods[0], statefulset.KIND)
        sts = statefulsets(namespace, o.name) if o is not None else None
        if sts is not None and o is not None and sts.metadata.uid != o.uid:
            sts = None
        return statefulset.StatefulSetGroup(namespace, name, pods, sts)
    if kind == deployment.KIND:
        return deployment.DeploymentPod(namespace, name, pods)
    return PodGroup(namespace, name, pods)


def finished_without_pods(wl: Workload, obj: KubeObject | None) -> tuple[bool, bool] | None:
    """(finished, succeeded) of an admitted group of a pod-gated kind whose pods are all gone, from
    ``obj``, the object its Workload is owned by (None: gone or re-created); None for a kind whose
    Workload goes with its pods."""
    ns, name = wl.namespace or "default", wl.name
    if isinstance(obj, StatefulSet) or (obj is None and _owner_kind(wl) == statefulset.KIND):
        return statefulset.StatefulSetGroup(
            ns, name, [], obj if isinstance(obj, StatefulSet) else None
        ).finished()
    if isinstance(obj, LeaderWorkerSet):
        labels = (wl.spec.pod_sets[0].template.metadata or {}).get("labels") or {} if wl.spec.pod_sets else {}
        raw = str(labels.get(leaderworkerset.GROUP_INDEX_LABEL, ""))
        index = int(raw) if raw.isdigit() else None
        return leaderworkerset.LeaderWorkerSetGroup(ns, name, [], obj, index).finished()
    return None


def _owner_kind(wl: Workload) -> str | None:
    return next((o.kind for o in wl.metadata.owner_references or [] if o.controller), None)
