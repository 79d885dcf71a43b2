"""The stand-in StatefulSet controller: pods ``<name>-0`` .. ``<name>-<replicas-1>`` from
``spec.template``, all at once (``podManagementPolicy: Parallel``, which a gang needs: with
OrderedReady a pod waits for the one before it to be Ready, which waits for the whole gang), each
with its hostname and the StatefulSet's pod labels; the ordinals at or above ``replicas`` are deleted
(scaled down)."""

from __future__ import annotations

from typing import Any

from queueing.testing.operators import PodOperator

__all__ = ["StatefulSetController"]

LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"


class StatefulSetController(PodOperator):
    GROUP = "apps"
    PLURAL = "statefulsets"

    def wanted(self, obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
        spec = obj.get("spec") or {}
        name = obj["metadata"]["name"]
        out = {}
        for i in range(spec.get("replicas", 1)):
            pod_name = f"{name}-{i}"
            pod = self.pod_from(
                spec.get("template") or {},
                obj,
                labels={
                    "statefulset.kubernetes.io/pod-name": pod_name,
                    "apps.kubernetes.io/pod-index": str(i),
                },
            )
            pod["spec"]["hostname"] = pod_name
            out[pod_name] = pod
        return out

    def owner_of(self, pod: dict[str, Any]) -> str | None:
        if LWS_NAME_LABEL in (pod["metadata"].get("labels") or {}):
            return None  # a LeaderWorkerSet's (the stand-in LeaderWorkerSet controller's)
        ref = next(
            (o for o in pod["metadata"].get("ownerReferences") or [] if o.get("kind") == "StatefulSet"), None
        )
        return ref["name"] if ref else None
