"""Builders for simulation scenarios (YAML documents) on real H200 nodes."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "dra"))

import h200

Q = "queueing.dra.io/v1beta1"
GPU = "gpu.nvidia.com"


def cluster(n: int, *, mig: bool = False, extended: bool = False) -> list[dict[str, Any]]:
    hw = h200.hardware()
    docs: list[dict[str, Any]] = []
    for i in range(n):
        docs.append(h200.node(f"h200-{i}"))
        docs += h200.node_slices(f"h200-{i}", hw, mig=mig)
    classes = [dict(c) for c in h200.CLASSES]
    if extended:
        classes[0] = dict(classes[0]) | {
            "spec": dict(classes[0]["spec"]) | {"extendedResourceName": "nvidia.com/gpu"}
        }
    return docs + classes


def flavor(name: str = "h200") -> dict[str, Any]:
    return {"apiVersion": Q, "kind": "ResourceFlavor", "metadata": {"name": name}}


def cluster_queue(
    name: str,
    gpus: int,
    *,
    cohort: str | None = None,
    borrowing: int | None = None,
    within: str = "Never",
    reclaim: str = "Never",
    weight: str | None = None,
) -> dict[str, Any]:
    res: dict[str, Any] = {"name": GPU, "nominalQuota": gpus}
    if borrowing is not None:
        res["borrowingLimit"] = borrowing
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "preemption": {"withinClusterQueue": within, "reclaimWithinCohort": reclaim},
        "resourceGroups": [{"coveredResources": [GPU], "flavors": [{"name": "h200", "resources": [res]}]}],
    }
    if cohort:
        spec["cohortName"] = cohort
    if weight is not None:
        spec["fairSharing"] = {"weight": weight}
    return {"apiVersion": Q, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def cohort(name: str, gpus: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if gpus is not None:
        spec["resourceGroups"] = [
            {
                "coveredResources": [GPU],
                "flavors": [{"name": "h200", "resources": [{"name": GPU, "nominalQuota": gpus}]}],
            }
        ]
    return {"apiVersion": Q, "kind": "Cohort", "metadata": {"name": name}, "spec": spec}


def local_queue(ns: str, name: str, cq: str) -> dict[str, Any]:
    return {
        "apiVersion": Q,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"clusterQueue": cq},
    }


def priority(name: str, value: int) -> dict[str, Any]:
    return {"apiVersion": Q, "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value}


def template(ns: str, gpus: int, name: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name or f"gpus-{gpus}", "namespace": ns},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "gpus", "exactly": {"deviceClassName": GPU, "count": gpus}}]
                }
            }
        },
    }


def job(
    ns: str,
    name: str,
    *,
    pods: int = 1,
    gpus: int = 1,
    queue: str = "lq",
    arrival: str | None = "0s",
    duration: str | None = "10m",
    priority_class: str | None = None,
    node: str | None = None,
    extended: int = 0,
    min_parallelism: int | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "x"}
    spec: dict[str, Any] = {"containers": [container]}
    if extended:
        container["resources"] = {"limits": {"nvidia.com/gpu": extended}}
    elif gpus:
        spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": f"gpus-{gpus}"}]
        container["resources"] = {"claims": [{"name": "gpus"}]}
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    labels = {"queueing.dra.io/queue-name": queue}
    if priority_class:
        labels["queueing.dra.io/priority-class"] = priority_class
    ann: dict[str, str] = {}
    if arrival is not None:
        ann["simulate.queueing.dra.io/arrival"] = arrival
    if duration is not None:
        ann["simulate.queueing.dra.io/duration"] = duration
    if min_parallelism is not None:
        ann["queueing.dra.io/min-parallelism"] = str(min_parallelism)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": labels, "annotations": ann},
        "spec": {"parallelism": pods, "template": {"spec": spec}},
    }


def write(path: Path, docs: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path
