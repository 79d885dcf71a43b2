"""The stand-in LeaderWorkerSet controller (with its StatefulSets): per replica group ``g`` a leader
pod ``<name>-<g>`` (``leaderTemplate``, else ``workerTemplate``) and ``size - 1`` worker pods
``<name>-<g>-<w>`` (``workerTemplate``), labelled and annotated as the LeaderWorkerSet controller
does (``leaderworkerset.sigs.k8s.io/name``, ``group-index``, ``worker-index``, ``group-key``,
``size``). A real cluster's leader pods are controlled by the leader StatefulSet ``<name>`` and the
workers by one StatefulSet per group; here their controller reference names StatefulSet ``<name>``
with the LeaderWorkerSet's UID (so deleting the LeaderWorkerSet deletes them). Groups at or above
``replicas`` are deleted (scaled down); a group's missing pods are created again."""

from __future__ import annotations

import hashlib
from typing import Any

from queueing.testing.operators import PodOperator

__all__ = ["LeaderWorkerSetController"]

PREFIX = "leaderworkerset.sigs.k8s.io/"


class LeaderWorkerSetController(PodOperator):
    GROUP = "leaderworkerset.x-k8s.io"
    PLURAL = "leaderworkersets"

    def wanted(self, obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
        spec = obj.get("spec") or {}
        lwt = spec.get("leaderWorkerTemplate") or {}
        size = lwt.get("size", 1)
        meta = obj["metadata"]
        name = meta["name"]
        out = {}
        for g in range(spec.get("replicas", 1)):
            leader = f"{name}-{g}"
            key = hashlib.sha1(f"{meta['namespace']}/{leader}".encode()).hexdigest()
            for w in range(size):
                template = (lwt.get("leaderTemplate") if w == 0 else None) or lwt.get("workerTemplate") or {}
                labels = {
                    f"{PREFIX}name": name,
                    f"{PREFIX}group-index": str(g),
                    f"{PREFIX}worker-index": str(w),
                    f"{PREFIX}group-key": key,
                }
                annotations = {f"{PREFIX}size": str(size)}
                if w:
                    annotations[f"{PREFIX}leader-name"] = leader
                pod_name = leader if w == 0 else f"{leader}-{w}"
                pod = self.pod_from(
                    template,
                    obj,
                    labels=labels,
                    annotations=annotations,
                    kind="StatefulSet",
                    name=name if w == 0 else leader,
                )
                pod["spec"]["hostname"] = pod_name
                out[pod_name] = pod
        return out

    def owner_of(self, pod: dict[str, Any]) -> str | None:
        return (pod["metadata"].get("labels") or {}).get(f"{PREFIX}name")
