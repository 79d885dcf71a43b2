"""ClusterQueue and LocalQueue status (``queueing.controller.queues``): usage reads as kubectl prints
quantities."""

from __future__ import annotations

from fractions import Fraction

from queueing.api.v1beta1 import ClusterQueue, LocalQueue
from queueing.controller.queues import queue_statuses
from queueing.scheduling.snapshot import AdmittedWorkload, PodSetInfo, WorkloadInfo


def test_usage_in_status_reads_as_quantities() -> None:
    res = [
        {"name": "cpu", "nominalQuota": "4"},
        {"name": "memory", "nominalQuota": "8Gi"},
        {"name": "gpu.nvidia.com", "nominalQuota": 8},
    ]
    cq = ClusterQueue.model_validate(
        {
            "apiVersion": "queueing.dra.io/v1beta1",
            "kind": "ClusterQueue",
            "metadata": {"name": "team"},
            "spec": {
                "resourceGroups": [
                    {
                        "coveredResources": [r["name"] for r in res],
                        "flavors": [{"name": "default", "resources": res}],
                    }
                ]
            },
        }
    )
    lq = LocalQueue.model_validate(
        {
            "apiVersion": "queueing.dra.io/v1beta1",
            "kind": "LocalQueue",
            "metadata": {"name": "lq", "namespace": "ml"},
            "spec": {"clusterQueue": "team"},
        }
    )
    wl = WorkloadInfo(namespace="ml", name="w", queue_name="lq", pod_sets=(PodSetInfo(name="main", count=1),))
    usage = {
        ("default", "cpu"): Fraction(1, 2),
        ("default", "memory"): Fraction(16 * 2**30),
        ("default", "gpu.nvidia.com"): Fraction(2),
    }
    cqs, lqs = queue_statuses([cq], [lq], [AdmittedWorkload(wl, "team", usage, 0.0)], {}, {}, 0.0)
    (flavor,) = cqs["team"]["flavorsUsage"]
    assert flavor["resources"] == [
        {"name": "cpu", "total": "500m", "borrowed": "0"},
        {"name": "memory", "total": "16Gi", "borrowed": "8Gi"},
        {"name": "gpu.nvidia.com", "total": "2", "borrowed": "0"},
    ]
    assert [r["total"] for r in lqs["ml/lq"]["flavorsUsage"][0]["resources"]] == ["500m", "16Gi", "2"]
