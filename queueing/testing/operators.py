"""The base of the stand-in controllers of the pod-gated kinds (Deployment, StatefulSet,
LeaderWorkerSet), on the stand-in operators' loop (queueing/testing/operator.py): each creates the
pods the real controller would create for an object of its kind (the pure functions of
queueing/integrations: ``pods_of``) and deletes the pods it no longer wants; the stand-in kubelet
runs them (``simulate.queueing.dra.io/duration`` from the pod template's annotations; none: until
deleted).

Pods are created through the store, so the emulator's admission (deploy/'s MutatingAdmissionPolicy:
the admission gate) applies to them as to a real controller's. A pod that ended is not replaced (a
serving pod's container would restart in place); a deleted one is (e.g. after an eviction: it comes
back gated and waits for the next admission).
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any

from queueing.testing.operator import Key, Operator
from queueing.testing.store import ApiError

__all__ = ["PodOperator"]


class PodOperator(Operator):
    """Subclasses give :meth:`wanted` (and ``owner_of`` for their pods)."""

    def wanted(self, obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """Pod name (or a generateName prefix ending in ``-``, with the pod's ``count``) -> the pod."""
        raise NotImplementedError

    def owned(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        uid = obj["metadata"]["uid"]
        pods = self.store.list(self.store.resource("pods"), obj["metadata"]["namespace"], None)[0]
        return [
            p for p in pods if any(o.get("uid") == uid for o in p["metadata"].get("ownerReferences") or [])
        ]

    def reconcile(self, key: Key) -> None:
        """Create the missing pods and delete the unwanted ones of object ``key``."""
        obj = self.get(key)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return  # gone: the garbage collector deletes its pods
        ns = key[0]
        pods_rt = self.store.resource("pods")
        want = self.wanted(obj)
        have = {
            p["metadata"]["name"]: p for p in self.owned(obj) if not p["metadata"].get("deletionTimestamp")
        }
        named = {k: v for k, v in want.items() if not k.endswith("-")}
        for pod_name, pod in named.items():
            if pod_name not in have:
                with contextlib.suppress(ApiError):  # e.g. a pod of that name still being deleted
                    self.store.create(pods_rt, ns, pod)
                    self.standins.pods_created += 1
        for prefix, pod in want.items():
            if not prefix.endswith("-"):
                continue
            count = int(pod.pop("count", 1))  # replicas of one template under one prefix
            mine = sorted(n for n in have if n.startswith(prefix))
            for _ in range(count - len(mine)):
                body = copy.deepcopy(pod)
                body["metadata"].pop("name", None)
                body["metadata"]["generateName"] = prefix
                self.store.create(pods_rt, ns, body)
                self.standins.pods_created += 1
            for extra in mine[count:]:
                self.delete("pods", "", have[extra])
        for pod_name, p in have.items():
            if not any(pod_name == n or (n.endswith("-") and pod_name.startswith(n)) for n in want):
                self.delete("pods", "", p)
