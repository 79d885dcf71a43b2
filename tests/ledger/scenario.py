"""A small, hand-checkable history written through the repository API (used by the report tests).

Day 0 is 2024-03-01 (UTC). Cohort ``research``: ``team-a`` (8 GPUs, lends at most 4, borrows at most 4;
64 CPUs) and ``team-b`` (8 GPUs, weight 2); standalone ``solo`` (2 GPUs). Devices have 16Gi of memory.

=====  ============  ========  ============================  ======================================
 wl     queue         CQ        admitted (created -> admit)   then
=====  ============  ========  ============================  ======================================
 w1     ml/train      team-a    d0 00:00 -> d0 01:00           4 GPUs+4 devices, 32 CPU; finish d0 03:00
 w2     bio/main      team-b    d0 21:00 -> d0 22:00           12 GPUs+12 devices; finish d2 02:00
 w6     ml/train      team-a    d1 09:00 -> d1 10:00           2 GPUs+2 devices; evicted d1 11:00 by w4
                                                               (Preempted), 1 device freed
 w7     ml/infer      team-a    d1 12:00 -> d1 12:00           1 GPU; evicted d1 12:30 PodsReadyTimeout
 w4     bio/main      team-b    d1 10:30 -> d2 03:00           10 GPUs (no devices); still running
 w5     ml/train      team-a    d2 04:00 -> d2 04:01           2 GPUs, 16 CPU (no devices); still running
 s1..   ops/q         solo      d3 + 100i s -> +i s            1 GPU; finish 50 s later (i = 1..10)
=====  ============  ========  ============================  ======================================
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from queueing.api.quantity import Quantity
from queueing.ledger.repository import Ledger
from queueing.ledger.state import (
    AdmissionRequest,
    Charge,
    ClusterQueueSpec,
    LocalQueueSpec,
    PlannedDevice,
    PodPlan,
    QuotaSpec,
    WorkloadSpec,
)

D0 = datetime(2024, 3, 1, tzinfo=UTC)
GPU = "nvidia.com/gpu"
Q = Quantity.parse


def t(day: int, hours: float = 0, seconds: float = 0) -> datetime:
    return D0 + timedelta(days=day, hours=hours, seconds=seconds)


def devices(n: int, node: str = "node-1") -> tuple[PodPlan, ...]:
    return (
        PodPlan(
            pod_index=0,
            node=node,
            devices=tuple(
                PlannedDevice(f"gpu.nvidia.com/{node}/gpu-{i}", "gpu.nvidia.com", Q("16Gi")) for i in range(n)
            ),
        ),
    )


def gpu(n: int, cpu: int = 0) -> tuple[Charge, ...]:
    out = [Charge("h200", GPU, Q(str(n)))]
    if cpu:
        out.append(Charge("default", "cpu", Q(str(cpu))))
    return tuple(out)


async def queues(led: Ledger) -> None:
    at = D0 - timedelta(days=1)
    await led.upsert_cluster_queue(
        ClusterQueueSpec(
            "team-a",
            cohort="research",
            quotas=(
                QuotaSpec("h200", GPU, Q("8"), borrowing_limit=Q("4"), lending_limit=Q("4")),
                QuotaSpec("default", "cpu", Q("64")),
            ),
        ),
        at=at,
    )
    await led.upsert_cluster_queue(
        ClusterQueueSpec(
            "team-b", cohort="research", quotas=(QuotaSpec("h200", GPU, Q("8")),), fair_sharing_weight=Q("2")
        ),
        at=at,
    )
    await led.upsert_cluster_queue(ClusterQueueSpec("solo", quotas=(QuotaSpec("h200", GPU, Q("2")),)), at=at)
    for ns, name, cq in (
        ("ml", "train", "team-a"),
        ("ml", "infer", "team-a"),
        ("bio", "main", "team-b"),
        ("ops", "q", "solo"),
    ):
        await led.upsert_local_queue(LocalQueueSpec(ns, name, cq), at=at)


async def _wl(led: Ledger, uid: str, queue: str, created: datetime) -> None:
    ns, lq = queue.split("/")
    await led.add_workload(WorkloadSpec(uid, ns, uid, lq), at=created)


async def build(led: Ledger) -> None:
    await queues(led)
    await _wl(led, "w1", "ml/train", t(0, 0))
    await led.admit(AdmissionRequest("w1", "team-a", gpu(4, cpu=32), devices(4)), at=t(0, 1))
    await led.finish("w1", at=t(0, 3))

    await _wl(led, "w2", "bio/main", t(0, 21))
    await led.admit(AdmissionRequest("w2", "team-b", gpu(12), devices(12, "node-2")), at=t(0, 22))

    await _wl(led, "w6", "ml/train", t(1, 9))
    await led.admit(AdmissionRequest("w6", "team-a", gpu(2), devices(2, "node-3")), at=t(1, 10))
    await _wl(led, "w4", "bio/main", t(1, 10.5))
    await led.evict(
        "w6",
        at=t(1, 11),
        reason="Preempted",
        preemptor_uid="w4",
        freed_devices=["gpu.nvidia.com/node-3/gpu-0"],
    )

    await _wl(led, "w7", "ml/infer", t(1, 12))
    await led.admit(AdmissionRequest("w7", "team-a", gpu(1)), at=t(1, 12))
    await led.evict("w7", at=t(1, 12.5), reason="PodsReadyTimeout", requeue=False)

    await led.finish("w2", at=t(2, 2))
    await led.admit(AdmissionRequest("w4", "team-b", gpu(10)), at=t(2, 3))

    await _wl(led, "w5", "ml/train", t(2, 4))
    await led.admit(AdmissionRequest("w5", "team-a", gpu(2, cpu=16)), at=t(2, 4, 60))

    for i in range(1, 11):
        created = t(3, 0, 100 * i)
        await _wl(led, f"s{i}", "ops/q", created)
        await led.admit(AdmissionRequest(f"s{i}", "solo", gpu(1)), at=created + timedelta(seconds=i))
        await led.finish(f"s{i}", at=created + timedelta(seconds=50))
