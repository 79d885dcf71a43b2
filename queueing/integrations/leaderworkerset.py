"""The ``leaderworkerset.x-k8s.io/v1`` LeaderWorkerSet adapter: each replica group (a leader and
``size - 1`` workers) is one gang Workload, as Kueue does it.

* queued: the label ``queueing.dra.io/queue-name`` on the LeaderWorkerSet (copied into its leader
  and worker templates by deploy/'s MutatingAdmissionPolicy);
* held: the group's pods are created with the admission gate (queueing/integrations/podgated.py);
  the LeaderWorkerSet controller labels them ``leaderworkerset.sigs.k8s.io/name``,
  ``.../group-index``, ``.../worker-index`` (0: the leader), ``.../group-key`` and annotates
  ``.../size``;
* pod sets: ``leader`` (1) and ``worker`` (``size - 1``), templates from the pods;
* Workload ``leaderworkerset-<name>-<group index>-<hash>`` (Kueue's name), owned by the
  LeaderWorkerSet when the controller knows it (its CRD installed), else by the group's pods;
* evicted: the group's pods are deleted; the LeaderWorkerSet controller creates the group again,
  gated, and the Workload waits again;
* done: the group is gone: its LeaderWorkerSet deleted (its Workloads go with it) or scaled down
  below the group's index (Finished, quota released);
* partial admission: none (a group is a gang).
"""

from __future__ import annotations

import hashlib

from queueing.api.apps import LeaderWorkerSet
from queueing.api.base import OwnerReference
from queueing.api.core import Pod
from queueing.integrations.podgated import LABEL_VALUE_MAX, GatedGroup, Membership, pod_from
from queueing.integrations.workloads import workload_name
from queueing.scheduling.jobs import QUEUE_NAME_LABEL, WorkloadError

__all__ = [
    "GROUP_INDEX_LABEL",
    "KIND",
    "NAME_LABEL",
    "SIZE_ANNOTATION",
    "WORKER_INDEX_LABEL",
    "LeaderWorkerSetGroup",
    "group_index",
    "membership",
    "owner_ref",
    "pods_of",
]

KIND = "LeaderWorkerSet"
GROUP = "leaderworkerset.x-k8s.io"
API_VERSION = f"{GROUP}/v1"
NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
GROUP_KEY_LABEL = "leaderworkerset.sigs.k8s.io/group-key"
SIZE_ANNOTATION = "leaderworkerset.sigs.k8s.io/size"
LEADER_NAME_ANNOTATION = "leaderworkerset.sigs.k8s.io/leader-name"


def owner_ref(lws: LeaderWorkerSet) -> OwnerReference:
    return OwnerReference(api_version=API_VERSION, kind=KIND, name=lws.name, uid=lws.metadata.uid or "")


def pods_of(lws: LeaderWorkerSet) -> list[Pod]:
    """The pods its controller (with its StatefulSets) creates: per replica group ``g`` a leader
    ``<name>-<g>`` (``leaderTemplate``, else ``workerTemplate``) and ``size - 1`` workers
    ``<name>-<g>-<w>``, labelled and annotated as the LeaderWorkerSet controller does. In a real
    cluster the leader's controller is the leader StatefulSet ``<name>`` and a worker's the group's
    StatefulSet ``<name>-<g>``; their owner references here name those with the LeaderWorkerSet's UID."""
    lwt = lws.spec.leader_worker_template
    size = lwt.size if lwt.size is not None else 1
    ns = lws.namespace or "default"
    out = []
    for g in range(lws.spec.replicas if lws.spec.replicas is not None else 1):
        leader = f"{lws.name}-{g}"
        key = hashlib.sha1(f"{ns}/{leader}".encode()).hexdigest()
        for w in range(size):
            name = leader if w == 0 else f"{leader}-{w}"
            annotations = {SIZE_ANNOTATION: str(size)}
            if w:
                annotations[LEADER_NAME_ANNOTATION] = leader
            owner = OwnerReference(
                api_version="apps/v1",
                kind="StatefulSet",
                name=lws.name if w == 0 else leader,
                uid=lws.metadata.uid or "",
            )
            pod = pod_from(
                (lwt.leader_template if w == 0 else None) or lwt.worker_template,
                owner,
                ns,
                name,
                labels={
                    NAME_LABEL: lws.name,
                    GROUP_INDEX_LABEL: str(g),
                    WORKER_INDEX_LABEL: str(w),
                    GROUP_KEY_LABEL: key,
                },
                annotations=annotations,
            )
            pod.spec.__pydantic_extra__ = {**(pod.spec.__pydantic_extra__ or {}), "hostname": name}
            out.append(pod)
    return out


def group_index(pod: Pod) -> int | None:
    raw = pod.labels.get(GROUP_INDEX_LABEL, "")
    return int(raw) if raw.isdigit() else None


def membership(pod: Pod) -> Membership | None:
    """The group of a gated queued pod a LeaderWorkerSet created (None: not one). Raises
    :class:`WorkloadError` for a pod whose LeaderWorkerSet labels are unreadable."""
    name = pod.labels.get(NAME_LABEL)
    if not name or QUEUE_NAME_LABEL not in pod.labels:
        return None
    ref = f"Pod {pod.key}"
    index = group_index(pod)
    if index is None:
        raise WorkloadError(
            f"{ref}: metadata.labels[{GROUP_INDEX_LABEL}]: must be a group index, "
            f"got {pod.labels.get(GROUP_INDEX_LABEL)!r}"
        )
    raw = pod.annotations.get(SIZE_ANNOTATION, "1")
    if not raw.isdigit() or int(raw) < 1:
        raise WorkloadError(
            f"{ref}: metadata.annotations[{SIZE_ANNOTATION}]: must be a positive integer, got {raw!r}"
        )
    worker = pod.labels.get(WORKER_INDEX_LABEL, "0")
    return Membership(
        workload_name(KIND, GROUP, f"{name}-{index}", LABEL_VALUE_MAX),
        int(raw),
        "leader" if worker == "0" else "worker",
    )


class LeaderWorkerSetGroup(GatedGroup):
    """One replica group of a LeaderWorkerSet as one gang Workload."""

    KIND = KIND
    POD_SETS = ("leader", "worker")

    def __init__(
        self,
        namespace: str,
        name: str,
        pods: list[Pod],
        lws: LeaderWorkerSet | None,
        index: int | None = None,
    ) -> None:
        super().__init__(namespace, name, pods, owner_ref(lws) if lws is not None else None)
        self.lws = lws
        self.index = group_index(pods[0]) if pods else index

    def finished(self) -> tuple[bool, bool]:
        """Done once its LeaderWorkerSet is scaled down below this group (or deleted: then the
        Workload is deleted with it); unknown without the LeaderWorkerSet."""
        if self.lws is None:
            return False, False
        index = self.index
        replicas = self.lws.spec.replicas if self.lws.spec.replicas is not None else 1
        done = bool(self.lws.metadata.deletion_timestamp) or (index is not None and index >= replicas)
        return done, done
