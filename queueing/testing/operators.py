"""The base of the stand-in controllers of the pod-gated kinds (Deployment, StatefulSet,
LeaderWorkerSet): each creates the pods the real controller would create for an object of its kind,
from its templates, and deletes the pods it no longer wants; the stand-in kubelet runs them
(``simulate.queueing.dra.io/duration`` from the pod template's annotations; none: until deleted).

Pods are created through the store, so the emulator's admission (deploy/'s MutatingAdmissionPolicy:
the admission gate) applies to them as to a real controller's. A pod that ended is not replaced (a
serving pod's container would restart in place); a deleted one is (e.g. after an eviction: it comes
back gated and waits for the next admission).
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any

from queueing.testing.resources import ResourceType
from queueing.testing.store import ApiError, Store

__all__ = ["PodOperator"]

Key = tuple[str, str]


class PodOperator:
    """Watches its kind (``GROUP``/``PLURAL``) and the pods it owns; :meth:`reconcile` one object."""

    GROUP = ""
    PLURAL = ""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.pods_rt = store.resource("pods")

    def resource(self) -> ResourceType | None:
        """Its kind as the store serves it (None: not served, e.g. the CRD is not installed)."""
        try:
            return self.store.resource(self.PLURAL, self.GROUP)
        except KeyError:
            return None

    # ------------------------------------------------------------------ what subclasses give
    def wanted(self, obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """Pod name (or a generateName prefix ending in ``-``, see :meth:`reconcile`) -> the pod."""
        raise NotImplementedError

    def owner_of(self, pod: dict[str, Any]) -> str | None:
        """The name of the object of this kind a pod belongs to (None: not one of ours)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ shared
    def owned(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        uid = obj["metadata"]["uid"]
        pods = self.store.list(self.pods_rt, obj["metadata"]["namespace"], None)[0]
        return [
            p for p in pods if any(o.get("uid") == uid for o in p["metadata"].get("ownerReferences") or [])
        ]

    def reconcile(self, ns: str, name: str) -> None:
        """Create the missing pods and delete the unwanted ones of object ``ns/name``."""
        rt = self.resource()
        if rt is None:
            return
        try:
            obj = self.store.get(rt, ns, name)
        except ApiError:
            return  # gone: the garbage collector deletes its pods
        if obj["metadata"].get("deletionTimestamp"):
            return
        want = self.wanted(obj)
        have = {p["metadata"]["name"]: p for p in self.owned(obj)}
        prefixed = {k: v for k, v in want.items() if k.endswith("-")}
        named = {k: v for k, v in want.items() if not k.endswith("-")}
        for pod_name, pod in named.items():
            if pod_name not in have:
                with contextlib.suppress(ApiError):  # e.g. a pod of that name still being deleted
                    self.store.create(self.pods_rt, ns, pod)
        for pod_name, p in have.items():
            if named and pod_name not in named and not p["metadata"].get("deletionTimestamp"):
                with contextlib.suppress(ApiError):
                    self.store.delete(self.pods_rt, ns, pod_name)
        for prefix, pod in prefixed.items():  # replicas of one template: ``count`` under one prefix
            count = int(pod.pop("count", 1))
            mine = sorted(
                n
                for n, p in have.items()
                if n.startswith(prefix) and not p["metadata"].get("deletionTimestamp")
            )
            for _ in range(count - len(mine)):
                body = copy.deepcopy(pod)
                body["metadata"].pop("name", None)
                body["metadata"]["generateName"] = prefix
                self.store.create(self.pods_rt, ns, body)
            for extra in mine[count:]:
                with contextlib.suppress(ApiError):
                    self.store.delete(self.pods_rt, ns, extra)

    def step(self) -> None:
        rt = self.resource()
        if rt is None:
            return
        for obj in self.store.list(rt, None, None)[0]:
            self.reconcile(obj["metadata"]["namespace"], obj["metadata"]["name"])
