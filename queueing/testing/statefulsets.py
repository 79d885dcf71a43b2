"""The stand-in StatefulSet controller: the pods of queueing.integrations.statefulset.pods_of
(``<name>-0`` .. ``<name>-<replicas-1>``, all at once); the ordinals at or above ``replicas`` are
deleted (scaled down)."""

from __future__ import annotations

from typing import Any

from queueing.api.apps import StatefulSet
from queueing.integrations import leaderworkerset, statefulset
from queueing.testing.operators import PodOperator

__all__ = ["StatefulSetController"]


class StatefulSetController(PodOperator):
    group = "apps"
    plural = "statefulsets"

    def wanted(self, obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {p.name: p.to_dict() for p in statefulset.pods_of(StatefulSet.model_validate(obj))}

    def owner_of(self, pod: dict[str, Any]) -> str | None:
        if leaderworkerset.NAME_LABEL in (pod["metadata"].get("labels") or {}):
            return None  # a LeaderWorkerSet's (the stand-in LeaderWorkerSet controller's)
        ref = next(
            (o for o in pod["metadata"].get("ownerReferences") or [] if o.get("kind") == statefulset.KIND),
            None,
        )
        return ref["name"] if ref else None
