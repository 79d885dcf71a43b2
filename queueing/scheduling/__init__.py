"""Pure scheduling core: quota, cohorts, fair sharing, ordering, eviction planning, the cycle.

Entry point: ``run_cycle(snapshot, placer, now, config) -> CycleResult`` (see ``cycle``).
Inputs are the frozen types of ``snapshot``; devices are placed through a ``placer.Placer``.
"""

from queueing.scheduling.config import SchedulingConfig
from queueing.scheduling.cycle import Admission, CycleResult, Eviction, PendingReason, run_cycle
from queueing.scheduling.placer import (
    CountingNode,
    CountingPlacer,
    CountingRequest,
    Placement,
    PlacementFailure,
    Placer,
)
from queueing.scheduling.preemption import PreemptionPlan, Victim
from queueing.scheduling.snapshot import (
    AdmittedWorkload,
    ClusterQueueSpec,
    ClusterSnapshot,
    CohortSpec,
    FlavorFungibility,
    FlavorQuotas,
    FlavorSpec,
    LabelSelector,
    LocalQueueSpec,
    PodSetInfo,
    PreemptionPolicy,
    ResourceGroup,
    ResourceQuota,
    WorkloadInfo,
    amount,
)

__all__ = [
    "Admission",
    "AdmittedWorkload",
    "ClusterQueueSpec",
    "ClusterSnapshot",
    "CohortSpec",
    "CountingNode",
    "CountingPlacer",
    "CountingRequest",
    "CycleResult",
    "Eviction",
    "FlavorFungibility",
    "FlavorQuotas",
    "FlavorSpec",
    "LabelSelector",
    "LocalQueueSpec",
    "PendingReason",
    "Placement",
    "PlacementFailure",
    "Placer",
    "PodSetInfo",
    "PreemptionPlan",
    "PreemptionPolicy",
    "ResourceGroup",
    "ResourceQuota",
    "SchedulingConfig",
    "Victim",
    "WorkloadInfo",
    "amount",
    "run_cycle",
]
