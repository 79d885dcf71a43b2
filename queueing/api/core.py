"""The parts of core Kubernetes kinds the controller and allocator read.

Only the fields we use are typed; everything else is kept as given (``extra="allow"`` on
``KubeModel``), so ``Model.parse(obj).to_dict() == obj`` for any valid object.

Kinds: Node, Pod, Namespace (core/v1), Job (batch/v1), PriorityClass (scheduling.k8s.io/v1),
Lease (coordination.k8s.io/v1), and their nested structures (NodeSelector, Toleration, Taint,
Container, PodSpec, ...).

Small pure helpers that are part of the Kubernetes semantics of these types live here too:
``NodeSelectorRequirement.matches``, ``NodeSelector.matches`` (ORed terms, ANDed requirements),
``Toleration.tolerates`` (upstream ``ToleratesTaint``), ``PodSpec.required_node_selector``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from queueing.api.base import KubeModel, KubeObject
from queueing.api.quantity import Quantity
from queueing.api.validation import DnsLabel, NonNegInt32

__all__ = [
    "FINISHED_POD_PHASES",
    "Affinity",
    "Container",
    "ContainerResourceClaim",
    "Job",
    "JobCondition",
    "JobSpec",
    "JobStatus",
    "Lease",
    "LeaseSpec",
    "Namespace",
    "Node",
    "NodeAffinity",
    "NodeSelector",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "NodeSpec",
    "NodeStatus",
    "Pod",
    "PodCondition",
    "PodResourceClaim",
    "PodSchedulingGate",
    "PodSpec",
    "PodStatus",
    "PodTemplateSpec",
    "PriorityClass",
    "ResourceRequirements",
    "Taint",
    "Toleration",
]

NodeSelectorOperator = Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]


# ---------------------------------------------------------------- node selection
class NodeSelectorRequirement(KubeModel):
    key: str
    operator: NodeSelectorOperator
    values: list[str] | None = None

    def matches(self, labels: dict[str, str]) -> bool:
        """Whether a label set satisfies this requirement (core/v1 semantics).

        ``In``/``NotIn`` compare against ``values`` (``NotIn`` also matches a missing key);
        ``Exists``/``DoesNotExist`` test the key only; ``Gt``/``Lt`` compare the label value and the
        single value as integers (a non-integer label value does not match).
        """
        values = self.values or []
        present = self.key in labels
        op = self.operator
        if op == "In":
            return present and labels[self.key] in values
        if op == "NotIn":
            return not present or labels[self.key] not in values
        if op == "Exists":
            return present
        if op == "DoesNotExist":
            return not present
        # Gt / Lt
        if not present or len(values) != 1:
            return False
        try:
            have, want = int(labels[self.key]), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want


class NodeSelectorTerm(KubeModel):
    match_expressions: list[NodeSelectorRequirement] | None = None
    match_fields: list[NodeSelectorRequirement] | None = None

    def matches(self, labels: dict[str, str], node_name: str | None = None) -> bool:
        """All requirements hold. An empty term matches nothing (as upstream)."""
        exprs = self.match_expressions or []
        fields = self.match_fields or []
        if not exprs and not fields:
            return False
        field_values = {"metadata.name": node_name} if node_name is not None else {}
        return all(r.matches(labels) for r in exprs) and all(r.matches(field_values) for r in fields)


class NodeSelector(KubeModel):
    node_selector_terms: list[NodeSelectorTerm] = Field(default_factory=list)

    def matches(self, labels: dict[str, str], node_name: str | None = None) -> bool:
        """Any term holds (terms are ORed)."""
        return any(t.matches(labels, node_name) for t in self.node_selector_terms)


class NodeAffinity(KubeModel):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    # preferred terms are kept as given; the scheduler does not score
    preferred_during_scheduling_ignored_during_execution: list[dict[str, Any]] | None = None


class Affinity(KubeModel):
    """Node affinity is typed; podAffinity / podAntiAffinity are kept as unknown fields."""

    node_affinity: NodeAffinity | None = None


# ---------------------------------------------------------------- taints
class Taint(KubeModel):
    key: str
    value: str | None = None
    effect: str
    time_added: str | None = None


class Toleration(KubeModel):
    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: str | None = None
    toleration_seconds: int | None = None

    def tolerates(self, taint: Taint) -> bool:
        """Upstream ``Toleration.ToleratesTaint``.

        An empty effect matches every effect; an empty key with ``Exists`` matches every key;
        ``Exists`` ignores the value; ``Equal`` (the default) needs equal values.
        """
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return (self.value or "") == (taint.value or "")


# ---------------------------------------------------------------- Node
class NodeSpec(KubeModel):
    taints: list[Taint] | None = None
    unschedulable: bool | None = None


class NodeStatus(KubeModel):
    allocatable: dict[str, Quantity] | None = None
    capacity: dict[str, Quantity] | None = None


class Node(KubeObject):
    API_VERSION: ClassVar[str] = "v1"
    KIND: ClassVar[str] = "Node"

    spec: NodeSpec = Field(default_factory=NodeSpec)
    status: NodeStatus = Field(default_factory=NodeStatus)

    @property
    def allocatable(self) -> dict[str, Quantity]:
        """``status.allocatable``, falling back to ``status.capacity`` (as the scheduler does)."""
        return dict(self.status.allocatable or self.status.capacity or {})


# ---------------------------------------------------------------- containers / pods
class ContainerResourceClaim(KubeModel):
    name: str
    request: str | None = None


class ResourceRequirements(KubeModel):
    requests: dict[str, Quantity] | None = None
    limits: dict[str, Quantity] | None = None
    claims: list[ContainerResourceClaim] | None = None


class Container(KubeModel):
    name: str
    image: str | None = None
    resources: ResourceRequirements | None = None

    @property
    def requests(self) -> dict[str, Quantity]:
        """Effective requests: explicit requests, and limits where no request is given."""
        res = self.resources
        if res is None:
            return {}
        out = dict(res.limits or {})
        out.update(res.requests or {})
        return out


class PodResourceClaim(KubeModel):
    name: DnsLabel
    resource_claim_name: str | None = None
    resource_claim_template_name: str | None = None


class PodSchedulingGate(KubeModel):
    name: str


class PodSpec(KubeModel):
    containers: list[Container] = Field(default_factory=list)
    init_containers: list[Container] | None = None
    node_name: str | None = None
    node_selector: dict[str, str] | None = None
    affinity: Affinity | None = None
    tolerations: list[Toleration] | None = None
    resource_claims: list[PodResourceClaim] | None = None
    scheduling_gates: list[PodSchedulingGate] | None = None
    priority_class_name: str | None = None
    priority: int | None = None

    def required_node_selector(self) -> NodeSelector | None:
        """The required node-affinity selector, if any."""
        if self.affinity is None or self.affinity.node_affinity is None:
            return None
        return self.affinity.node_affinity.required_during_scheduling_ignored_during_execution

    def fits_node_labels(self, labels: dict[str, str], node_name: str | None = None) -> bool:
        """``nodeSelector`` and required node affinity both hold for a node's labels."""
        for k, v in (self.node_selector or {}).items():
            if labels.get(k) != v:
                return False
        sel = self.required_node_selector()
        return sel is None or sel.matches(labels, node_name)

    def tolerates(self, taints: list[Taint], effects: tuple[str, ...] = ("NoSchedule", "NoExecute")) -> bool:
        """Every taint with one of ``effects`` is tolerated by some toleration."""
        tols = self.tolerations or []
        return all(any(t.tolerates(taint) for t in tols) for taint in taints if taint.effect in effects)


class PodTemplateSpec(KubeModel):
    metadata: dict[str, Any] | None = None
    spec: PodSpec = Field(default_factory=PodSpec)


class PodCondition(KubeModel):
    type: str
    status: str
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = None


# the phases of a pod that has ended: it takes no node resources and holds no claim any more
FINISHED_POD_PHASES = ("Succeeded", "Failed")


class PodStatus(KubeModel):
    phase: str | None = None
    conditions: list[PodCondition] | None = None


class Pod(KubeObject):
    API_VERSION: ClassVar[str] = "v1"
    KIND: ClassVar[str] = "Pod"

    spec: PodSpec = Field(default_factory=PodSpec)
    status: PodStatus = Field(default_factory=PodStatus)


class Namespace(KubeObject):
    API_VERSION: ClassVar[str] = "v1"
    KIND: ClassVar[str] = "Namespace"
    NAME_RULE: ClassVar[Literal["subdomain", "label", "job"]] = "label"


# ---------------------------------------------------------------- Job
class JobSpec(KubeModel):
    """int32 fields as the API server takes them: JSON integers (not booleans or strings), 0..2^31-1."""

    parallelism: NonNegInt32 | None = None
    completions: NonNegInt32 | None = None
    suspend: bool | None = None
    backoff_limit: NonNegInt32 | None = None
    template: PodTemplateSpec = Field(default_factory=PodTemplateSpec)


class JobCondition(KubeModel):
    type: str
    status: str
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = None


class JobStatus(KubeModel):
    active: int | None = None
    succeeded: int | None = None
    failed: int | None = None
    conditions: list[JobCondition] | None = None


class Job(KubeObject):
    API_VERSION: ClassVar[str] = "batch/v1"
    KIND: ClassVar[str] = "Job"
    NAME_RULE: ClassVar[Literal["subdomain", "label", "job"]] = "job"

    spec: JobSpec = Field(default_factory=JobSpec)
    status: JobStatus = Field(default_factory=JobStatus)


# ---------------------------------------------------------------- PriorityClass / Lease
class PriorityClass(KubeObject):
    API_VERSION: ClassVar[str] = "scheduling.k8s.io/v1"
    KIND: ClassVar[str] = "PriorityClass"

    value: int
    global_default: bool | None = None
    preemption_policy: str | None = None
    description: str | None = None


class LeaseSpec(KubeModel):
    holder_identity: str | None = None
    lease_duration_seconds: int | None = None
    acquire_time: str | None = None
    renew_time: str | None = None
    lease_transitions: int | None = None


class Lease(KubeObject):
    API_VERSION: ClassVar[str] = "coordination.k8s.io/v1"
    KIND: ClassVar[str] = "Lease"

    spec: LeaseSpec = Field(default_factory=LeaseSpec)
