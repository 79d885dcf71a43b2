"""Round-trip and semantics tests for the core Kubernetes models in queueing.api.core."""

from __future__ import annotations

from typing import Any

from queueing.api.core import Job, Lease, Namespace, Node, Pod, PriorityClass
from queueing.api.quantity import Quantity

NODE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "gpu-node-1", "labels": {"nvidia.com/gpu.product": "NVIDIA-H200"}},
    "spec": {
        "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        "unschedulable": False,
        "podCIDR": "10.0.1.0/24",
    },
    "status": {
        "allocatable": {"cpu": "191500m", "memory": "2063937904Ki", "pods": "110"},
        "capacity": {"cpu": "192", "memory": "2064040304Ki", "pods": 110},
        "nodeInfo": {"kubeletVersion": "v1.34.1"},
    },
}


def test_node_round_trip_and_typed_fields() -> None:
    node = Node.parse(NODE)
    assert node.to_dict() == NODE
    assert node.name == "gpu-node-1"
    alloc = node.status.allocatable
    assert alloc is not None
    assert alloc["cpu"] == Quantity.parse("191.5")
    assert alloc["memory"].value == 2063937904 * 1024
    assert node.spec.taints is not None and node.spec.taints[0].effect == "NoSchedule"


JOB: dict[str, Any] = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {
        "name": "train",
        "namespace": "team-a",
        "labels": {"queueing.dra.io/queue-name": "user-queue"},
    },
    "spec": {
        "parallelism": 2,
        "completions": 2,
        "suspend": True,
        "backoffLimit": 0,
        "completionMode": "Indexed",
        "template": {
            "metadata": {"labels": {"app": "train"}},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "main",
                        "image": "ghcr.io/example/train:1",
                        "resources": {
                            "requests": {"cpu": "1.5", "memory": "8Gi"},
                            "limits": {"memory": "8Gi"},
                            "claims": [{"name": "gpu", "request": "gpus"}],
                        },
                    }
                ],
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
                "priorityClassName": "high",
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            },
        },
    },
    "status": {"active": 0, "conditions": [{"type": "Suspended", "status": "True"}]},
}

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "team-a"},
    "spec": {
        "containers": [{"name": "c", "image": "busybox"}],
        "schedulingGates": [{"name": "queueing.dra.io/admission"}],
        "nodeSelector": {"zone": "a"},
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h200"]}]}
                    ]
                }
            },
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []},
        },
        "priority": 1000,
    },
    "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]},
}

PRIORITY_CLASS: dict[str, Any] = {
    "apiVersion": "scheduling.k8s.io/v1",
    "kind": "PriorityClass",
    "metadata": {"name": "high"},
    "value": 1000,
    "globalDefault": False,
    "preemptionPolicy": "PreemptLowerPriority",
    "description": "high",
}

LEASE: dict[str, Any] = {
    "apiVersion": "coordination.k8s.io/v1",
    "kind": "Lease",
    "metadata": {"name": "queueing-leader", "namespace": "queueing-system"},
    "spec": {
        "holderIdentity": "pod-1",
        "leaseDurationSeconds": 15,
        "acquireTime": "2025-01-01T00:00:00.000000Z",
        "renewTime": "2025-01-01T00:00:10.000000Z",
        "leaseTransitions": 3,
    },
}

NAMESPACE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Namespace",
    "metadata": {"name": "team-a", "labels": {"team": "a"}},
    "spec": {"finalizers": ["kubernetes"]},
    "status": {"phase": "Active"},
}


def test_round_trips() -> None:
    for cls, obj in [
        (Job, JOB),
        (Pod, POD),
        (PriorityClass, PRIORITY_CLASS),
        (Lease, LEASE),
        (Namespace, NAMESPACE),
    ]:
        parsed = cls.parse(obj)
        assert parsed.to_dict() == obj, cls.__name__
        assert cls.parse(parsed.to_dict()).to_dict() == obj, cls.__name__
