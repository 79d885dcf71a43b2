"""Kubernetes Events (core/v1, what ``kubectl describe`` lists under "Events") about our objects.

``EventRecorder.emit(obj, "Normal", "Admitted", "...")`` creates one Event per distinct
(object, reason, message) in this process: repeating the same event is not written again (Events are
API writes too; the controller re-runs its reconciliation often). A failure to record an Event is
logged and never stops the caller.
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any

from queueing.api.base import KubeObject
from queueing.kube.client import EVENTS, KubeClient

__all__ = ["EventRecorder"]

log = logging.getLogger("queueing.kube.events")


class EventRecorder:
    def __init__(self, kube: KubeClient, component: str = "queueing-controller", memory: int = 10000) -> None:
        self.kube = kube
        self.component = component
        self.memory = memory
        self._seen: OrderedDict[tuple[str, str, str], None] = OrderedDict()
        self._by_uid: dict[str, set[tuple[str, str, str]]] = {}
        self.emitted = 0

    def __len__(self) -> int:
        """How many (object, reason, message) keys are remembered."""
        return len(self._seen)

    def forget(self, uid: str) -> None:
        """Drop what is remembered about an object (call when it is deleted)."""
        for key in self._by_uid.pop(uid, ()):
            self._seen.pop(key, None)

    def _drop_oldest(self) -> None:
        key, _ = self._seen.popitem(last=False)
        keys = self._by_uid.get(key[0])
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_uid[key[0]]

    async def emit(
        self,
        obj: KubeObject,
        type_: str,
        reason: str,
        message: str,
        *,
        api_version: str | None = None,
        kind: str | None = None,
    ) -> None:
        uid = obj.metadata.uid or obj.key
        key = (uid, reason, message)
        if key in self._seen:
            return
        self._seen[key] = None
        self._by_uid.setdefault(uid, set()).add(key)
        while len(self._seen) > self.memory:
            self._drop_oldest()
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        digest = hashlib.sha256("\0".join(key).encode()).hexdigest()[:16]
        namespace = obj.namespace or "default"
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{obj.name}.{digest}", "namespace": namespace},
            "involvedObject": {
                "apiVersion": api_version or obj.api_version or type(obj).API_VERSION,
                "kind": kind or obj.kind or type(obj).KIND,
                "name": obj.name,
                "namespace": namespace,
                "uid": obj.metadata.uid,
                "resourceVersion": obj.metadata.resource_version,
            },
            "reason": reason,
            "message": message[:1024],
            "type": type_,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            await self.kube.create(EVENTS, body, namespace)
            self.emitted += 1
        except Exception as e:  # an Event is best effort
            log.info("event %s %s on %s not recorded: %s", type_, reason, obj.key, e)
