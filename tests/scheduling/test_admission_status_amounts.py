"""A Workload's ``status.admission.podSetAssignments[].resourceUsage`` reads as kubectl prints
quantities (``16Gi`` of memory, ``500m`` of cpu), and stands for exactly the charged amounts."""

from __future__ import annotations

from fractions import Fraction

from queueing.api.quantity import Quantity
from queueing.scheduling.assign import Assignment
from queueing.scheduling.cycle import Admission
from queueing.scheduling.from_api import admission_status
from queueing.scheduling.placer import Placement
from queueing.scheduling.snapshot import PodSetInfo, WorkloadInfo


def test_resource_usage_reads_as_quantities() -> None:
    req = {"cpu": Fraction(1, 4), "memory": Fraction(8 * 2**30)}
    wl = WorkloadInfo(
        namespace="ml", name="w", queue_name="lq", pod_sets=(PodSetInfo(name="main", count=2, requests=req),)
    )
    usage = {
        ("f", "cpu"): Fraction(1, 2),
        ("f", "memory"): Fraction(16 * 2**30),
        ("f", "gpu.nvidia.com"): Fraction(2),
    }
    flavors = {"main": {"cpu": "f", "memory": "f", "gpu.nvidia.com": "f"}}
    adm = Admission(wl, "cq", Assignment({"main": 2}, flavors, usage, Placement(nodes=("n1", "n1")), False))
    (psa,) = admission_status(adm).pod_set_assignments
    got = psa.resource_usage or {}
    assert {r: str(q) for r, q in got.items()} == {"cpu": "500m", "gpu.nvidia.com": "2", "memory": "16Gi"}
    assert psa.model_dump(mode="json", by_alias=True)["resourceUsage"]["memory"] == "16Gi"
    assert {("f", r): Quantity.parse(str(q)).value for r, q in got.items()} == usage
