"""The stand-in Deployment controller: ``spec.replicas`` pods from ``spec.template`` (the stand-in
cluster has no ReplicaSets: the pods are the Deployment's own, named ``<name>-<random>``, with its
controller reference)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from queueing.testing.operators import PodOperator

__all__ = ["DeploymentController"]


class DeploymentController(PodOperator):
    GROUP = "apps"
    PLURAL = "deployments"

    def wanted(self, obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
        spec = obj.get("spec") or {}
        template = spec.get("template") or {}
        replicas = spec.get("replicas", 1)
        tmpl_hash = hashlib.sha1(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]
        pod = self.pod_from(template, obj, labels={"pod-template-hash": tmpl_hash})
        pod["count"] = replicas
        return {f"{obj['metadata']['name']}-{tmpl_hash}-": pod}

    def owner_of(self, pod: dict[str, Any]) -> str | None:
        ref = next(
            (o for o in pod["metadata"].get("ownerReferences") or [] if o.get("kind") == "Deployment"), None
        )
        return ref["name"] if ref else None
