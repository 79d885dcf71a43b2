"""The light projection of a Pod the cache keeps for every pod of the cluster (memory: a cluster
has many pods, and the cache needs only what decides a node's free resources)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from queueing.api.core import FINISHED_POD_PHASES

__all__ = ["counted_pods_selectors", "light_pod"]


def counted_pods_selectors(managed_labels: Collection[str]) -> tuple[str, str]:
    """The label and field selectors of a watch that sends exactly the pods the cache can count: none
    that carries one of ``managed_labels`` (``ClusterCache._counted``: the plans of admitted workloads
    hold those resources) and none finished (``ClusterState._charge_pod`` counts no such pod;
    kube-scheduler's own pod informer uses the same field selector). A pod that gains such a label or
    finishes leaves the watch with a DELETED event, as it leaves the count. So a cluster's finished
    pods (a Job's stay until the Job is deleted) are not kept, and queueing's own pods are not sent
    and kept a second time beside the controller's pods informer."""
    labels = ",".join(f"!{k}" for k in managed_labels)
    fields = ",".join(f"status.phase!={p}" for p in FINISHED_POD_PHASES)
    return labels, fields


def _container(c: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": c.get("name") or ""}
    res = c.get("resources")
    if isinstance(res, dict):
        kept = {k: res[k] for k in ("requests", "limits", "claims") if res.get(k)}
        if kept:
            out["resources"] = kept
    if c.get("restartPolicy"):
        out["restartPolicy"] = c["restartPolicy"]  # a sidecar (counted with the containers)
    return out


def light_pod(raw: dict[str, Any], labels: Collection[str] = ()) -> dict[str, Any]:
    """A pod as the API sends it, cut down to what the cache reads: name, namespace, uid,
    resourceVersion, the labels named in ``labels`` (which pods are managed), the node, the phase,
    the containers' requests and limits (init containers with their restart policy) and the pod's
    resource claims."""
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    status = raw.get("status") or {}
    m: dict[str, Any] = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if meta.get(k)}
    kept = {k: v for k, v in (meta.get("labels") or {}).items() if k in labels}
    if kept:
        m["labels"] = kept
    s: dict[str, Any] = {
        "containers": [_container(c) for c in spec.get("containers") or [] if isinstance(c, dict)]
    }
    if spec.get("initContainers"):
        s["initContainers"] = [_container(c) for c in spec["initContainers"] if isinstance(c, dict)]
    for k in ("nodeName", "resourceClaims"):
        if spec.get(k):
            s[k] = spec[k]
    out: dict[str, Any] = {"apiVersion": raw.get("apiVersion") or "v1", "kind": raw.get("kind") or "Pod"}
    out["metadata"] = m
    out["spec"] = s
    if status.get("phase"):
        out["status"] = {"phase": status["phase"]}
    return out
