"""Round-trip and semantics tests for the core Kubernetes models in queueing.api.core."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from queueing.api.core import (
    Container,
    Job,
    Lease,
    Namespace,
    Node,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Pod,
    PodSpec,
    PriorityClass,
    Taint,
    Toleration,
)
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


# ---------------------------------------------------------------- semantics of the helpers
GPU_TAINT = Taint(key="nvidia.com/gpu", value="present", effect="NoSchedule")


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        # upstream Toleration.ToleratesTaint
        ({"operator": "Exists"}, GPU_TAINT, True),  # empty key + Exists tolerates everything
        ({"key": "nvidia.com/gpu", "operator": "Exists"}, GPU_TAINT, True),
        ({"key": "nvidia.com/gpu", "value": "present"}, GPU_TAINT, True),  # operator defaults Equal
        ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "other"}, GPU_TAINT, False),
        ({"key": "other", "operator": "Exists"}, GPU_TAINT, False),
        ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}, GPU_TAINT, False),
        ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, GPU_TAINT, True),
        ({"key": "k", "operator": "Equal"}, Taint(key="k", effect="NoSchedule"), True),  # "" == ""
    ],
)
def test_toleration_tolerates(toleration: dict[str, Any], taint: Taint, expected: bool) -> None:
    assert Toleration.parse(toleration).tolerates(taint) is expected


LABELS = {"gpu": "h200", "count": "8", "zone": "a"}


@pytest.mark.parametrize(
    ("req", "expected"),
    [
        ({"key": "gpu", "operator": "In", "values": ["h100", "h200"]}, True),
        ({"key": "gpu", "operator": "In", "values": ["h100"]}, False),
        ({"key": "missing", "operator": "In", "values": ["x"]}, False),
        ({"key": "gpu", "operator": "NotIn", "values": ["h100"]}, True),
        ({"key": "gpu", "operator": "NotIn", "values": ["h200"]}, False),
        ({"key": "missing", "operator": "NotIn", "values": ["x"]}, True),  # absent key: not in
        ({"key": "zone", "operator": "Exists"}, True),
        ({"key": "missing", "operator": "Exists"}, False),
        ({"key": "missing", "operator": "DoesNotExist"}, True),
        ({"key": "count", "operator": "Gt", "values": ["4"]}, True),
        ({"key": "count", "operator": "Gt", "values": ["8"]}, False),
        ({"key": "count", "operator": "Lt", "values": ["9"]}, True),
        ({"key": "gpu", "operator": "Gt", "values": ["1"]}, False),  # non-integer label value
    ],
)
def test_node_selector_requirement(req: dict[str, Any], expected: bool) -> None:
    assert NodeSelectorRequirement.parse(req).matches(LABELS) is expected


def test_node_selector_terms_or_and() -> None:
    gpu = {"key": "gpu", "operator": "In", "values": ["h200"]}
    zone_b = {"key": "zone", "operator": "In", "values": ["b"]}
    # requirements in a term are ANDed
    assert not NodeSelectorTerm.parse({"matchExpressions": [gpu, zone_b]}).matches(LABELS)
    # terms are ORed
    sel = NodeSelector.parse(
        {"nodeSelectorTerms": [{"matchExpressions": [zone_b]}, {"matchExpressions": [gpu]}]}
    )
    assert sel.matches(LABELS)
    # an empty term matches nothing; no terms match nothing
    assert not NodeSelector.parse({"nodeSelectorTerms": [{}]}).matches(LABELS)
    assert not NodeSelector.parse({"nodeSelectorTerms": []}).matches(LABELS)
    # matchFields selects by node name
    by_name = NodeSelectorTerm.parse(
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    )
    assert by_name.matches({}, "n1")
    assert not by_name.matches({}, "n2")


def test_pod_spec_node_fit_and_taints() -> None:
    spec = Pod.parse(POD).spec
    assert spec.fits_node_labels({"zone": "a", "gpu": "h200"})
    assert not spec.fits_node_labels({"zone": "b", "gpu": "h200"})  # nodeSelector
    assert not spec.fits_node_labels({"zone": "a", "gpu": "h100"})  # required affinity
    assert spec.scheduling_gates is not None
    assert spec.scheduling_gates[0].name == "queueing.dra.io/admission"

    job_spec = Job.parse(JOB).spec.template.spec
    assert job_spec.tolerates([GPU_TAINT])
    assert not PodSpec().tolerates([GPU_TAINT])
    # PreferNoSchedule does not block scheduling
    assert PodSpec().tolerates([Taint(key="x", effect="PreferNoSchedule")])


def test_container_effective_requests() -> None:
    c = Job.parse(JOB).spec.template.spec.containers[0]
    assert c.requests["cpu"] == Quantity.parse("1500m")
    assert c.requests["memory"] == 8 * 2**30
    # a limit without a request is the request (apiserver defaulting)
    only_limits = Container.parse({"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}})
    assert only_limits.requests["nvidia.com/gpu"] == 1
    assert Container(name="bare").requests == {}
    assert c.resources is not None and c.resources.claims is not None
    assert c.resources.claims[0].request == "gpus"


def test_node_allocatable_falls_back_to_capacity() -> None:
    node = Node.parse({"metadata": {"name": "n"}, "status": {"capacity": {"cpu": "4"}}})
    assert node.allocatable == {"cpu": Quantity.parse("4")}
    assert Node.parse(NODE).allocatable["pods"] == 110


def test_bad_quantity_names_the_field() -> None:
    bad = {"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "four"}}}
    with pytest.raises(ValidationError) as err:
        Node.parse(bad)
    assert "status.allocatable.cpu" in str(err.value)
    assert "four" in str(err.value)
