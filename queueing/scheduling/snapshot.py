"""Immutable inputs of a scheduling cycle.

The scheduling core works on these frozen dataclasses only, never on the API models: the shell
(controller, simulator) translates its objects into a :class:`ClusterSnapshot` once per cycle.

Conventions:

* Amounts are exact :class:`fractions.Fraction` values in the resource's base unit (cores, bytes,
  devices). Use :func:`amount` to turn a Kubernetes quantity text or a number into one
  (it goes through :class:`queueing.api.quantity.Quantity`).
* Times are seconds as ``float`` on whatever clock the caller uses (virtual or wall); the core
  never reads a clock.
* A *flavor-resource* is the pair ``(flavor name, resource name)``.
* Workload keys are ``"namespace/name"``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from typing import TYPE_CHECKING, Literal

from queueing.api.quantity import Quantity

if TYPE_CHECKING:
    from queueing.scheduling.backlog import Backlog

__all__ = [
    "AdmittedWorkload",
    "ClusterQueueSpec",
    "ClusterSnapshot",
    "CohortSpec",
    "FlavorFungibility",
    "FlavorQuotas",
    "FlavorResource",
    "FlavorSpec",
    "LabelSelector",
    "LabelSelectorRequirement",
    "LocalQueueSpec",
    "PodSetInfo",
    "PreemptionPolicy",
    "ResourceGroup",
    "ResourceQuota",
    "Taint",
    "Toleration",
    "WorkloadInfo",
    "amount",
]

FlavorResource = tuple[str, str]
QueueingStrategy = Literal["BestEffortFIFO", "StrictFIFO"]
StopPolicy = Literal["None", "Hold", "HoldAndDrain"]
WithinClusterQueue = Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"]
ReclaimWithinCohort = Literal["Never", "LowerPriority", "Any"]
BorrowWithinCohortPolicy = Literal["Never", "LowerPriority"]


def amount(v: str | int | Fraction | Quantity) -> Fraction:
    """An exact amount from a quantity text ("1.5Gi"), an int, a Fraction or a Quantity."""
    if isinstance(v, Quantity):
        return v.value
    if isinstance(v, str):
        return Quantity.parse(v).value
    return Fraction(v)


# ---------------------------------------------------------------------------------------------
# selectors, taints


@dataclass(frozen=True)
class LabelSelectorRequirement:
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "In":
            return self.key in labels and labels[self.key] in self.values
        if self.operator == "NotIn":
            return self.key not in labels or labels[self.key] not in self.values
        if self.operator == "Exists":
            return self.key in labels
        return self.key not in labels


@dataclass(frozen=True)
class LabelSelector:
    """metav1.LabelSelector. The empty selector matches everything."""

    match_labels: Mapping[str, str] = field(default_factory=dict)
    match_expressions: tuple[LabelSelectorRequirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels.items()) and all(
            r.matches(labels) for r in self.match_expressions
        )


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


@dataclass(frozen=True)
class Toleration:
    key: str = ""  # empty with operator Exists tolerates everything
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: str = ""  # empty tolerates every effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return self.key == taint.key and self.value == taint.value


# ---------------------------------------------------------------------------------------------
# quota configuration


@dataclass(frozen=True)
class ResourceQuota:
    """Quota of one resource in one flavor. ``None`` limits mean "no limit"."""

    nominal: Fraction
    borrowing_limit: Fraction | None = None
    lending_limit: Fraction | None = None


@dataclass(frozen=True)
class FlavorSpec:
    """A ResourceFlavor: the nodes it stands for and the taints its nodes carry."""

    name: str
    node_labels: Mapping[str, str] = field(default_factory=dict)
    node_taints: tuple[Taint, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    # ResourceFlavor ``placementPolicy`` (``queueing.dra.scoring``): FirstFit or LeastFragmentation
    placement_policy: str = "FirstFit"
    # ResourceFlavor ``topologyName`` and that Topology's levels as (key, is a device attribute),
    # widest first; no levels with a name set: the Topology does not exist
    topology_name: str | None = None
    topology_levels: tuple[tuple[str, bool], ...] = ()


@dataclass(frozen=True)
class FlavorQuotas:
    """One flavor of a resource group, with the quota of each covered resource."""

    name: str
    resources: Mapping[str, ResourceQuota]


@dataclass(frozen=True)
class ResourceGroup:
    """Resources that are assigned flavors together; flavors are tried in order."""

    covered_resources: tuple[str, ...]
    flavors: tuple[FlavorQuotas, ...]


@dataclass(frozen=True)
class PreemptionPolicy:
    within_cluster_queue: WithinClusterQueue = "Never"
    reclaim_within_cohort: ReclaimWithinCohort = "Never"
    borrow_within_cohort: BorrowWithinCohortPolicy = "Never"
    max_priority_threshold: int | None = None


@dataclass(frozen=True)
class FlavorFungibility:
    """Kueue's flavorFungibility: what to do when a flavor fits only by borrowing / preempting."""

    when_can_borrow: Literal["Borrow", "TryNextFlavor"] = "Borrow"
    when_can_preempt: Literal["Preempt", "TryNextFlavor"] = "TryNextFlavor"


@dataclass(frozen=True)
class ClusterQueueSpec:
    name: str
    resource_groups: tuple[ResourceGroup, ...] = ()
    cohort: str | None = None
    queueing_strategy: QueueingStrategy = "BestEffortFIFO"
    preemption: PreemptionPolicy = field(default_factory=PreemptionPolicy)
    flavor_fungibility: FlavorFungibility = field(default_factory=FlavorFungibility)
    fair_weight: Fraction = Fraction(1)
    stop_policy: StopPolicy = "None"
    # None matches no namespace (Kueue's default); the empty selector matches all.
    namespace_selector: LabelSelector | None = field(default_factory=LabelSelector)
    # Kueue's admissionScope.admissionMode == UsageBasedAdmissionFairSharing
    admission_fair_sharing: bool = False

    def quotas(self) -> dict[FlavorResource, ResourceQuota]:
        return {
            (fq.name, r): q for g in self.resource_groups for fq in g.flavors for r, q in fq.resources.items()
        }


@dataclass(frozen=True)
class CohortSpec:
    """A Cohort object: optional parent and its own quota (added to the pool of its subtree)."""

    name: str
    parent: str | None = None
    resource_groups: tuple[ResourceGroup, ...] = ()
    fair_weight: Fraction = Fraction(1)

    def quotas(self) -> dict[FlavorResource, ResourceQuota]:
        return {
            (fq.name, r): q for g in self.resource_groups for fq in g.flavors for r, q in fq.resources.items()
        }


@dataclass(frozen=True)
class LocalQueueSpec:
    namespace: str
    name: str
    cluster_queue: str
    fair_weight: Fraction = Fraction(1)
    stop_policy: StopPolicy = "None"
    terminating: bool = False  # being deleted (its finalizer waits for its admitted workloads)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


# ---------------------------------------------------------------------------------------------
# workloads


@dataclass(frozen=True)
class PodSetInfo:
    """A group of identical pods of a workload.

    ``requests`` are per pod (cpu, memory, pods, extended resources). ``device_requests`` are the
    per-pod device charges the workload's claims are expected to produce (DeviceClass name ->
    device count, ``<class>/<capacity>`` -> capacity); they choose the resource groups that apply
    and order the queue; the quota actually charged comes from the placer's plan.
    ``devices_exact`` says that the plan charges exactly ``device_requests`` per pod (every claim an
    ``ExactCount`` request of one DeviceClass per pod: no shared claims, no ``All`` mode, no
    alternatives), apart from device capacity charges.
    """

    name: str
    count: int
    requests: Mapping[str, Fraction] = field(default_factory=dict)
    device_requests: Mapping[str, Fraction] = field(default_factory=dict)
    min_count: int | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    devices_exact: bool = False


@dataclass(frozen=True)
class WorkloadInfo:
    """A pending (or admitted) workload as the scheduler sees it."""

    namespace: str
    name: str
    queue_name: str  # the LocalQueue, in the workload's namespace
    pod_sets: tuple[PodSetInfo, ...]
    priority: int = 0
    creation_time: float = 0.0
    uid: str = ""
    # the time it was last requeued (evicted); orders the queue instead of creation_time if set
    requeue_time: float | None = None
    # not eligible for admission before this time (requeue backoff)
    backoff_until: float | None = None
    # False once deactivated (e.g. backoff limit reached)
    active: bool = True
    # opaque: what the placer needs to place the pods (claims, topology, ...)
    placement_request: object = None

    @cached_property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @cached_property
    def queue_key(self) -> str:
        return f"{self.namespace}/{self.queue_name}"

    @cached_property
    def fit_signature(self) -> str:
        """What decides whether the workload fits, apart from priority and identity (computed
        once per object; a string so that hashing and comparing it is cheap)."""
        req = self.placement_request
        try:
            hash(req)
            rkey: object = req
        except TypeError:
            rkey = repr(req)
        return repr(
            (
                self.queue_key,
                rkey,
                tuple(
                    (
                        ps.name,
                        ps.count,
                        ps.min_count,
                        tuple(sorted(ps.requests.items())),
                        tuple(sorted(ps.device_requests.items())),
                        tuple(sorted(ps.node_selector.items())),
                        ps.tolerations,
                    )
                    for ps in self.pod_sets
                ),
            )
        )

    @cached_property
    def order_time(self) -> float:
        return self.requeue_time if self.requeue_time is not None else self.creation_time


@dataclass(frozen=True)
class AdmittedWorkload:
    """A workload holding quota (and devices) in a ClusterQueue."""

    workload: WorkloadInfo
    cluster_queue: str
    usage: Mapping[FlavorResource, Fraction]
    admission_time: float
    placement: object = None  # the Placement the placer returned (opaque here)
    # admitted pod counts per pod set (less than the spec with partial admission)
    counts: Mapping[str, int] = field(default_factory=dict)
    # an eviction is in progress: still holds its resources, but is no preemption candidate
    evicting: bool = False

    @property
    def key(self) -> str:
        return self.workload.key


@dataclass(frozen=True)
class ClusterSnapshot:
    """Everything one scheduling cycle looks at."""

    cluster_queues: tuple[ClusterQueueSpec, ...] = ()
    cohorts: tuple[CohortSpec, ...] = ()
    local_queues: tuple[LocalQueueSpec, ...] = ()
    flavors: tuple[FlavorSpec, ...] = ()
    pending: tuple[WorkloadInfo, ...] = ()
    admitted: tuple[AdmittedWorkload, ...] = ()
    namespaces: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # name -> labels
    # admission fair sharing: decayed historical usage per LocalQueue key ("ns/name") and per
    # ClusterQueue name (resource -> amount); see ordering.DecayedUsage
    local_queue_usage: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    cluster_queue_usage: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    # instead of ``pending``: the pending workloads kept sorted by the caller between cycles
    # (``backlog.Backlog``; the cycle only reads it)
    backlog: Backlog | None = None
    # pending workloads whose preemption was planned in an earlier cycle (their last reason is
    # Preempting): tried first, before anyone else can take what their victims free
    nominated: frozenset[str] = frozenset()
    # ClusterQueues the shell cannot use (e.g. the ledger refused their spec) -> why: inactive, as a
    # stopped queue is (the reason comes first, e.g. ``LedgerRejected: ...``)
    inactive: Mapping[str, str] = field(default_factory=dict)
