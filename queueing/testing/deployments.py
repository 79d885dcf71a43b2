"""The stand-in Deployment controller: ``spec.replicas`` pods of ``spec.template``
(queueing.integrations.deployment.pod_of: the stand-in cluster has no ReplicaSets, the pods are the
Deployment's own, named ``<name>-<template hash>-<random>``)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from queueing.api.apps import Deployment
from queueing.integrations import deployment
from queueing.testing.operators import PodOperator

__all__ = ["DeploymentController"]


class DeploymentController(PodOperator):
    group = "apps"
    plural = "deployments"

    def wanted(self, obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
        dep = Deployment.model_validate(obj)
        tmpl_hash = hashlib.sha1(
            json.dumps(obj["spec"].get("template"), sort_keys=True).encode()
        ).hexdigest()[:10]
        prefix = f"{dep.name}-{tmpl_hash}-"
        pod = deployment.pod_of(dep, None, {"pod-template-hash": tmpl_hash}).to_dict()
        pod["count"] = deployment.replicas(dep)
        return {prefix: pod}

    def owner_of(self, pod: dict[str, Any]) -> str | None:
        ref = next(
            (o for o in pod["metadata"].get("ownerReferences") or [] if o.get("kind") == deployment.KIND),
            None,
        )
        return ref["name"] if ref else None
