"""The stand-in LeaderWorkerSet controller (with its StatefulSets): the pods of
queueing.integrations.leaderworkerset.pods_of (per replica group a leader and ``size - 1`` workers,
labelled as the LeaderWorkerSet controller labels them; their owner references carry the
LeaderWorkerSet's UID, so deleting it deletes them). Groups at or above ``replicas`` are deleted
(scaled down); a group's missing pods are created again."""

from __future__ import annotations

from typing import Any

from queueing.api.apps import LeaderWorkerSet
from queueing.integrations import leaderworkerset
from queueing.testing.operators import PodOperator

__all__ = ["LeaderWorkerSetController"]


class LeaderWorkerSetController(PodOperator):
    group = "leaderworkerset.x-k8s.io"
    plural = "leaderworkersets"

    def wanted(self, obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {p.name: p.to_dict() for p in leaderworkerset.pods_of(LeaderWorkerSet.model_validate(obj))}

    def owner_of(self, pod: dict[str, Any]) -> str | None:
        return (pod["metadata"].get("labels") or {}).get(leaderworkerset.NAME_LABEL)
