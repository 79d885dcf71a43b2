"""The project's own kinds, group ``queueing.dra.io``, version ``v1beta1``.

ResourceFlavor, Cohort, ClusterQueue, LocalQueue, Workload and WorkloadPriorityClass use Kueue
``v1beta2`` field names and semantics wherever Kueue has the concept (see ``docs/api.md``). What DRA
adds: per-podSet ResourceClaim references in the Workload, quota on DRA devices (resource names that
are DeviceClass names, or ``<deviceclass>/<capacity>``), and in ``status.admission`` the planned node
and devices of every pod.

Validation lives here twice, on purpose: the pydantic validators reject bad specs with a message
naming the field (``FieldError``), and the same rules are declared for the CRD schema (enums,
bounds, ``CEL_RULES``) so the API server rejects them too. ``crdgen`` turns these models into CRDs.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, Field, Strict, model_validator

from queueing.api.base import FieldError, KubeModel, KubeObject
from queueing.api.core import PodTemplateSpec, Taint, Toleration
from queueing.api.crdgen import AGE_COLUMN, CelRule, CrdInfo, CrdSchema, PrinterColumn
from queueing.api.quantity import Quantity
from queueing.api.validation import (
    _DNS_SUBDOMAIN,
    _RE_SUBDOMAIN,
    DNS_LABEL_PATTERN,
    DNS_SUBDOMAIN_PATTERN,
    check_dns_label,
    check_dns_subdomain,
    check_storable,
)

__all__ = [
    "API_VERSION",
    "GROUP",
    "KINDS",
    "RESOURCE_IN_USE_FINALIZER",
    "TERMINATING",
    "VERSION",
    "Admission",
    "AdmissionScope",
    "AllocatedDevice",
    "BorrowWithinCohort",
    "ClaimPlacement",
    "ClusterQueue",
    "ClusterQueuePreemption",
    "ClusterQueueSpec",
    "ClusterQueueStatus",
    "Cohort",
    "CohortSpec",
    "CohortStatus",
    "Condition",
    "FairSharing",
    "FairSharingStatus",
    "FieldError",
    "FlavorFungibility",
    "FlavorQuotas",
    "FlavorUsage",
    "LabelSelector",
    "LocalQueue",
    "LocalQueueSpec",
    "LocalQueueStatus",
    "PodPlacement",
    "PodSet",
    "PodSetAssignment",
    "PodSetRequest",
    "PodSetResourceClaim",
    "PriorityClassRef",
    "QuotaResource",
    "RequeueState",
    "ResourceFlavor",
    "ResourceFlavorSpec",
    "ResourceFlavorStatus",
    "ResourceGroup",
    "ResourceQuota",
    "ResourceUsage",
    "Topology",
    "TopologyLevel",
    "TopologySpec",
    "Workload",
    "WorkloadPriorityClass",
    "WorkloadSpec",
    "WorkloadStatus",
    "check_resource_name",
    "quota_resource",
]

GROUP = "queueing.dra.io"
VERSION = "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"

# condition types (Workload)
QUOTA_RESERVED = "QuotaReserved"
ADMITTED = "Admitted"
EVICTED = "Evicted"
FINISHED = "Finished"
PODS_READY = "PodsReady"
REQUEUED = "Requeued"
PREEMPTED = "Preempted"
# condition type (ClusterQueue, LocalQueue)
ACTIVE = "Active"
# condition type (ResourceFlavor, Cohort): being deleted while admitted workloads still use it
TERMINATING = "Terminating"
# on ClusterQueues, LocalQueues, ResourceFlavors and Cohorts that admitted workloads use (Kueue's
# kueue.x-k8s.io/resource-in-use): their deletion waits until those workloads are gone
RESOURCE_IN_USE_FINALIZER = "queueing.dra.io/resource-in-use"
# labels, annotations and scheduling gates the controller puts on users' objects and their pods
QUEUE_LABEL = "queueing.dra.io/queue-name"
WORKLOAD_UID_LABEL = "queueing.dra.io/workload-uid"  # on the pod template of an admitted Job
POD_SET_LABEL = "queueing.dra.io/pod-set"  # the pod set of the Workload the pod belongs to
PLACEMENT_INDEX_ANNOTATION = "queueing.dra.io/placement-index"  # which planned pod a pod is
GATE_PLACEMENT = "queueing.dra.io/placement"
GATE_ADMISSION = "queueing.dra.io/admission"
POD_GROUP_LABEL = "queueing.dra.io/pod-group"
POD_GROUP_TOTAL_ANNOTATION = "queueing.dra.io/pod-group-total-count"
HOSTNAME_LABEL = "kubernetes.io/hostname"


# ------------------------------------------------------------------ scalar types
_NAME_PART = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
RESOURCE_NAME_PATTERN = rf"^({_DNS_SUBDOMAIN}/)?{_NAME_PART}$"
_RE_NAME_PART = re.compile(rf"^{_NAME_PART}$")
_subdomain = check_dns_subdomain
_label = check_dns_label


def check_resource_name(name: str) -> str:
    """Syntax of a quota resource name; returns it unchanged or raises ``ValueError``.

    Accepted: ``cpu``, ``memory``, ``pods``, ``ephemeral-storage``, ``hugepages-2Mi`` and other unprefixed
    names, extended resources ``<domain>/<name>``, DeviceClass names (DNS subdomains such as
    ``gpu.nvidia.com``) and ``<deviceclass>/<capacity>`` (such as ``gpu.nvidia.com/memory``). Which of
    these a name means is only known next to the DeviceClasses: see :func:`quota_resource`.
    """
    if not name:
        raise ValueError("resource name must not be empty")
    prefix, sep, part = name.rpartition("/")
    if sep:
        if not prefix or len(prefix) > 253 or not _RE_SUBDOMAIN.match(prefix):
            raise ValueError(
                f"{name!r} is not a valid resource name: the part before '/' must be a DNS subdomain "
                "(an extended-resource domain or a DeviceClass name)"
            )
        if len(part) > 63 or not _RE_NAME_PART.match(part):
            raise ValueError(
                f"{name!r} is not a valid resource name: the part after '/' must be 1-63 characters "
                "of letters, digits, '-', '_' or '.', starting and ending alphanumeric"
            )
    elif len(name) > 253 or not _RE_NAME_PART.match(name):
        raise ValueError(
            f"{name!r} is not a valid resource name: letters, digits, '-', '_' or '.', "
            "starting and ending alphanumeric, at most 253 characters"
        )
    return name


ResourceName = Annotated[
    str, AfterValidator(check_resource_name), CrdSchema(pattern=RESOURCE_NAME_PATTERN, maxLength=317)
]
Name = Annotated[str, AfterValidator(_subdomain), CrdSchema(pattern=DNS_SUBDOMAIN_PATTERN, maxLength=253)]
PodSetName = Annotated[str, AfterValidator(_label), CrdSchema(pattern=DNS_LABEL_PATTERN, maxLength=63)]
Int32 = Annotated[int, Strict(), Field(ge=-(2**31), le=2**31 - 1), CrdSchema(format="int32")]
NonNegInt32 = Annotated[int, Strict(), Field(ge=0, le=2**31 - 1), CrdSchema(format="int32")]
PositiveInt32 = Annotated[int, Strict(), Field(ge=1, le=2**31 - 1), CrdSchema(format="int32")]
Int64 = Annotated[int, Strict()]
Bool = Annotated[bool, Strict()]
Time = Annotated[str, CrdSchema(format="date-time")]


@dataclass(frozen=True)
class QuotaResource:
    """What a quota resource name means, given the DeviceClasses that exist.

    ``kind``: ``devices`` (the name is a DeviceClass: counts devices allocated through it), ``capacity``
    (``<deviceclass>/<capacity>``: sums that capacity of the planned devices), ``native`` (``cpu``,
    ``memory``, ``pods``, ... from pod requests) or ``extended`` (``<domain>/<name>`` from pod requests).
    """

    name: str
    kind: Literal["native", "extended", "devices", "capacity"]
    device_class: str | None = None
    capacity: str | None = None


def quota_resource(name: str, device_classes: Collection[str]) -> QuotaResource:
    """Classify a quota resource name. A DeviceClass name wins over every other reading."""
    check_resource_name(name)
    if name in device_classes:
        return QuotaResource(name, "devices", device_class=name)
    prefix, sep, part = name.rpartition("/")
    if sep and prefix in device_classes:
        return QuotaResource(name, "capacity", device_class=prefix, capacity=part)
    return QuotaResource(name, "extended" if sep else "native")


_LEDGER_LIMIT = "1e29"  # validation.LEDGER_QUANTITY_LIMIT as CRD CEL rules write it


def _nonneg(q: Quantity | None, path: str) -> None:
    if q is not None and q.value < 0:
        raise FieldError(path, f"must be non-negative, got {q.original}")


def _unique(names: Iterable[str], path: str, what: str) -> None:
    seen: set[str] = set()
    for i, n in enumerate(names):
        if n in seen:
            raise FieldError(f"{path}[{i}].name", f"duplicate {what} {n!r}")
        seen.add(n)


# ------------------------------------------------------------------ unknown fields
class SpecModel(KubeModel):
    """A structure users write (a spec, or a whole object): a field it does not have is an error naming
    the field, as ``kubectl --validate=strict`` (and the API server with the generated CRDs) reports
    it, not silently ignored. ``UNSUPPORTED``: Kueue fields of this structure the project does not
    implement, with what to do instead. Status structures (written by the controller) keep what they
    are given."""

    UNSUPPORTED: ClassVar[dict[str, str]] = {}

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, data: Any) -> Any:
        if isinstance(data, dict):
            known = _wire_names(cls)
            if known.issuperset(data):  # the usual case: no key to report
                return data
            for k in data:
                if k not in known:
                    note = cls.UNSUPPORTED.get(str(k))
                    raise FieldError(str(k), f'unknown field "{k}"' + (f": {note}" if note else ""))
        return data


@functools.cache
def _wire_names(model: type[KubeModel]) -> frozenset[str]:
    """The field names a model accepts: wire (camelCase) and Python names."""
    out: set[str] = set()
    for name, f in model.model_fields.items():
        out.add(name)
        if f.alias:
            out.add(f.alias)
    return frozenset(out)


_NOT_IMPLEMENTED = "a Kueue field queueing does not implement (see docs/migrating-from-kueue.md)"


# ------------------------------------------------------------------ shared structures
class Condition(KubeModel):
    """A metav1.Condition: one aspect of the object's current state."""

    type: str = Field(max_length=316, description="Type of the condition, e.g. QuotaReserved or Admitted.")
    status: Literal["True", "False", "Unknown"] = Field(description="Status of the condition.")
    observed_generation: Annotated[int, Strict(), Field(ge=0)] | None = Field(
        default=None, description="The .metadata.generation the condition was set for."
    )
    last_transition_time: Time = Field(
        description="Last time the condition changed from one status to another (RFC 3339)."
    )
    reason: str = Field(
        max_length=1024,
        description="Machine-readable CamelCase reason for the condition's last transition.",
    )
    message: str = Field(max_length=32768, description="Human-readable details about the transition.")


def conditions_field(description: str) -> Any:
    """A status's ``conditions``: at most 16, a map list keyed by ``type`` (as Kubernetes' own)."""
    return Field(
        default=None,
        max_length=16,
        description=description,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )


class LabelSelectorRequirement(SpecModel):
    key: str = Field(description="The label key the selector applies to.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(
        description="The key's relationship to the values."
    )
    values: list[str] | None = Field(default=None, description="Values for In and NotIn.")


class LabelSelector(SpecModel):
    """A metav1.LabelSelector. Empty selects everything; null selects nothing."""

    match_labels: dict[str, str] | None = Field(default=None, description="Labels that must all match.")
    match_expressions: list[LabelSelectorRequirement] | None = Field(
        default=None, description="Requirements that must all hold."
    )

    def matches(self, labels: dict[str, str]) -> bool:
        for k, v in (self.match_labels or {}).items():
            if labels.get(k) != v:
                return False
        for r in self.match_expressions or []:
            present = r.key in labels
            vals = r.values or []
            ok = {
                "In": present and labels.get(r.key) in vals,
                "NotIn": not present or labels.get(r.key) not in vals,
                "Exists": present,
                "DoesNotExist": not present,
            }[r.operator]
            if not ok:
                return False
        return True


class FairSharing(SpecModel):
    """Properties of a ClusterQueue or Cohort in fair sharing."""

    weight: Quantity | None = Field(
        default=None,
        description=(
            "weight gives a comparative advantage when competing for unused resources in the cohort: "
            "the share (dominant resource usage above nominal quota) is divided by it. "
            "0 means always at disadvantage. Defaults to 1."
        ),
    )

    CEL_RULES: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            "!has(self.weight) || sign(quantity(string(self.weight))) >= 0",
            "weight must be non-negative",
        ),
    )

    @model_validator(mode="after")
    def _check(self) -> FairSharing:
        _nonneg(self.weight, "weight")
        return self


class FairSharingStatus(KubeModel):
    weighted_share: Int64 = Field(
        description="Maximum ratio of usage above nominal quota to lendable resources, divided by weight."
    )


class ResourceQuota(SpecModel):
    """Quota of one resource in one flavor."""

    name: ResourceName = Field(
        description=(
            "Name of the resource: cpu, memory, pods, an extended resource, a DeviceClass name "
            "(counts devices allocated through that class) or <deviceclass>/<capacity> "
            "(sums that capacity of the devices planned for the workload)."
        )
    )
    nominal_quota: Quantity = Field(
        description="Quantity of this resource available to workloads admitted by this queue at a point in time."
    )
    borrowing_limit: Quantity | None = Field(
        default=None,
        description=(
            "Maximum quota this queue may borrow from unused quota of others in the cohort; "
            "null means no limit. Must be null without a cohort."
        ),
    )
    lending_limit: Quantity | None = Field(
        default=None,
        description=(
            "Maximum unused quota this queue may lend to others in the cohort; null means all of "
            "nominalQuota. At most nominalQuota. Must be null without a cohort."
        ),
    )

    CEL_RULES: ClassVar[tuple[CelRule, ...]] = (
        CelRule("sign(quantity(string(self.nominalQuota))) >= 0", "nominalQuota must be non-negative"),
        CelRule(
            "!has(self.borrowingLimit) || sign(quantity(string(self.borrowingLimit))) >= 0",
            "borrowingLimit must be non-negative",
        ),
        CelRule(
            "!has(self.lendingLimit) || sign(quantity(string(self.lendingLimit))) >= 0",
            "lendingLimit must be non-negative",
        ),
        CelRule(
            f"quantity(string(self.nominalQuota)).compareTo(quantity('{_LEDGER_LIMIT}')) < 0",
            "nominalQuota must be less than 1e29 (the ledger stores quantities as NUMERIC(38, 9))",
        ),
        CelRule(
            "!has(self.borrowingLimit) || "
            f"quantity(string(self.borrowingLimit)).compareTo(quantity('{_LEDGER_LIMIT}')) < 0",
            "borrowingLimit must be less than 1e29 (the ledger stores quantities as NUMERIC(38, 9))",
        ),
        CelRule(
            "!has(self.lendingLimit) || "
            "quantity(string(self.lendingLimit)).compareTo(quantity(string(self.nominalQuota))) <= 0",
            "lendingLimit must be less than or equal to nominalQuota",
        ),
    )

    @model_validator(mode="after")
    def _check(self) -> ResourceQuota:
        _nonneg(self.nominal_quota, "nominalQuota")
        _nonneg(self.borrowing_limit, "borrowingLimit")
        _nonneg(self.lending_limit, "lendingLimit")
        for q, wire in (
            (self.nominal_quota, "nominalQuota"),
            (self.borrowing_limit, "borrowingLimit"),
            (self.lending_limit, "lendingLimit"),
        ):
            if q is not None:
                try:
                    check_storable(q)
                except ValueError as e:
                    raise FieldError(wire, str(e)) from None
        if self.lending_limit is not None and self.lending_limit > self.nominal_quota:
            raise FieldError(
                "lendingLimit",
                f"must be less than or equal to nominalQuota ({self.lending_limit.original} > "
                f"{self.nominal_quota.original})",
            )
        return self


class FlavorQuotas(SpecModel):
    """Quotas of one ResourceFlavor for the resources of its group."""

    name: Name = Field(description="Name of a ResourceFlavor.")
    resources: list[ResourceQuota] = Field(
        min_length=1,
        max_length=64,
        description="Quota per resource, listing the group's coveredResources in the same order.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )


class ResourceGroup(SpecModel):
    """Resources whose quota is provided together by a list of flavors."""

    covered_resources: list[ResourceName] = Field(
        min_length=1,
        max_length=64,
        description="Resources covered by the flavors of this group, e.g. cpu, memory, gpu.nvidia.com.",
    )
    flavors: list[FlavorQuotas] = Field(
        min_length=1,
        max_length=64,
        description=(
            "Flavors providing the resources, in order of preference. Each lists all coveredResources "
            "in the same order."
        ),
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )

    CEL_RULES: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            "self.flavors.all(x, size(x.resources) == size(self.coveredResources))",
            "flavors must have the same number of resources as the coveredResources",
        ),
        CelRule(
            "self.flavors.all(x, x.resources.map(r, r.name) == self.coveredResources)",
            "flavors must list the coveredResources in the same order",
        ),
    )

    @model_validator(mode="after")
    def _check(self) -> ResourceGroup:
        for i, r in enumerate(self.covered_resources):
            if r in self.covered_resources[:i]:
                raise FieldError(f"coveredResources[{i}]", f"duplicate resource {r!r}")
        _unique((f.name for f in self.flavors), "flavors", "flavor")
        for i, f in enumerate(self.flavors):
            names = [r.name for r in f.resources]
            if names != list(self.covered_resources):
                raise FieldError(
                    f"flavors[{i}].resources",
                    f"flavor {f.name!r} must list exactly the coveredResources {list(self.covered_resources)} "
                    f"in the same order, got {names}",
                )
        return self


def _check_resource_groups(groups: list[ResourceGroup], limits_allowed: bool, owner: str) -> None:
    flavors: dict[str, int] = {}
    resources: dict[str, int] = {}
    n_flavors = n_resources = 0
    for gi, g in enumerate(groups):
        n_flavors += len(g.flavors)
        n_resources += len(g.covered_resources)
        for r in g.covered_resources:
            if r in resources:
                raise FieldError(
                    f"resourceGroups[{gi}].coveredResources",
                    f"resource {r!r} is already covered by resourceGroups[{resources[r]}]",
                )
            resources[r] = gi
        for fi, f in enumerate(g.flavors):
            if f.name in flavors:
                raise FieldError(
                    f"resourceGroups[{gi}].flavors[{fi}].name",
                    f"flavor {f.name!r} is already used in resourceGroups[{flavors[f.name]}]",
                )
            flavors[f.name] = gi
            if limits_allowed:
                continue
            for ri, q in enumerate(f.resources):
                for attr, wire in (("borrowing_limit", "borrowingLimit"), ("lending_limit", "lendingLimit")):
                    if getattr(q, attr) is not None:
                        raise FieldError(
                            f"resourceGroups[{gi}].flavors[{fi}].resources[{ri}].{wire}",
                            f"must not be set when {owner} is empty",
                        )
    if n_flavors > 256:
        raise FieldError("resourceGroups", f"at most 256 flavors in total, got {n_flavors}")
    if n_resources > 256:
        raise FieldError("resourceGroups", f"at most 256 covered resources in total, got {n_resources}")


def _no_limits_rule(owner_field: str, limit: str) -> CelRule:
    return CelRule(
        f"!has(self.{owner_field}) && has(self.resourceGroups) ? self.resourceGroups.all(rg, "
        f"rg.flavors.all(f, f.resources.all(r, !has(r.{limit})))) : true",
        f"{limit} must be nil when {owner_field} is empty",
    )


class ResourceUsage(KubeModel):
    name: ResourceName = Field(description="Name of the resource.")
    total: Quantity | None = Field(default=None, description="Total quota used, including borrowed quota.")
    borrowed: Quantity | None = Field(
        default=None, description="Quota used above nominalQuota, borrowed from the cohort."
    )


class FlavorUsage(KubeModel):
    name: Name = Field(description="Name of the flavor.")
    resources: list[ResourceUsage] = Field(
        max_length=64,
        description="Quota usage of the resources in this flavor.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )


# ------------------------------------------------------------------ ResourceFlavor
class ResourceFlavorSpec(SpecModel):
    node_labels: dict[str, str] | None = Field(
        default=None,
        max_length=8,
        description=(
            "Labels associating this flavor with the Nodes that have them. A podSet only gets a flavor "
            "whose nodeLabels match its nodeSelector and required node affinity; the labels are then "
            "added to its pods' node selector."
        ),
        json_schema_extra={"x-kubernetes-map-type": "atomic"},
    )
    node_taints: list[Taint] | None = Field(
        default=None,
        max_length=8,
        description=(
            "Taints of the nodes of this flavor; a podSet must tolerate them (NoSchedule, NoExecute) "
            "to get this flavor, unless the flavor's tolerations do."
        ),
        json_schema_extra={
            "x-kubernetes-list-type": "atomic",
            "x-kubernetes-validations": [
                {
                    "rule": "self.all(x, x.effect in ['NoSchedule', 'PreferNoSchedule', 'NoExecute'])",
                    "message": "supported taint effect values: 'NoSchedule', 'PreferNoSchedule', 'NoExecute'",
                }
            ],
        },
    )
    tolerations: list[Toleration] | None = Field(
        default=None,
        max_length=8,
        description="Extra tolerations added to the pods admitted in the quota of this flavor.",
        json_schema_extra={
            "x-kubernetes-list-type": "atomic",
            "x-kubernetes-validations": [
                {
                    "rule": "self.all(x, !has(x.key) ? x.operator == 'Exists' : true)",
                    "message": "operator must be Exists when 'key' is empty",
                },
                {
                    "rule": "self.all(x, !has(x.effect) || x.effect in ['NoSchedule', 'PreferNoSchedule', 'NoExecute'])",
                    "message": "supported taint effect values: 'NoSchedule', 'PreferNoSchedule', 'NoExecute'",
                },
            ],
        },
    )

    topology_name: Name | None = Field(
        default=None,
        description=(
            "The Topology (levels of node labels or device attributes) of this flavor's nodes. Pod sets "
            "admitted in it may ask to be placed inside one domain of a level with the annotations "
            "queueing.dra.io/podset-required-topology or queueing.dra.io/podset-preferred-topology."
        ),
    )
    placement_policy: Literal["FirstFit", "LeastFragmentation"] | None = Field(
        default=None,
        description=(
            "Which of the feasible placements of a gang on this flavor's nodes is taken. `FirstFit` "
            "(the default): nodes in name order and devices in inventory order, as kube-scheduler's "
            "allocator. `LeastFragmentation`: best fit, the placement that leaves the most for larger "
            "shapes (fewest free GPUs on a node first; MIG slices where they block the fewest larger "
            "profiles). A gang fits under LeastFragmentation whenever it fits under FirstFit."
        ),
    )

    @model_validator(mode="after")
    def _check(self) -> ResourceFlavorSpec:
        effects = ("NoSchedule", "PreferNoSchedule", "NoExecute")
        for i, t in enumerate(self.node_taints or []):
            if t.effect not in effects:
                raise FieldError(f"nodeTaints[{i}].effect", f"must be one of {', '.join(effects)}")
        for i, tol in enumerate(self.tolerations or []):
            if not tol.key and tol.operator != "Exists":
                raise FieldError(f"tolerations[{i}].operator", "must be Exists when 'key' is empty")
            if tol.effect and tol.effect not in effects:
                raise FieldError(f"tolerations[{i}].effect", f"must be one of {', '.join(effects)}")
        return self


class ResourceFlavorStatus(KubeModel):
    conditions: list[Condition] | None = conditions_field(
        "Terminating: deleted while admitted workloads use it (the message names them)."
    )


class ResourceFlavor(SpecModel, KubeObject):
    """ResourceFlavor: a kind of nodes (hardware, pricing, location) that quota is defined for."""

    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "ResourceFlavor"
    CRD: ClassVar[CrdInfo] = CrdInfo(
        plural="resourceflavors",
        scope="Cluster",
        short_names=("flavor", "flavors", "rf"),
        printer_columns=(AGE_COLUMN,),
    )

    spec: ResourceFlavorSpec = Field(
        default_factory=ResourceFlavorSpec, description="Specification of the ResourceFlavor."
    )
    status: ResourceFlavorStatus = Field(
        default_factory=ResourceFlavorStatus, description="Observed state of the ResourceFlavor."
    )


# ------------------------------------------------------------------ Topology
class TopologyLevel(SpecModel):
    node_label: str | None = Field(
        default=None,
        min_length=1,
        max_length=316,
        description="A node label whose values name the domains of this level (e.g. a rack label, "
        "kubernetes.io/hostname).",
    )
    device_attribute: str | None = Field(
        default=None,
        min_length=1,
        max_length=316,
        description="Instead of a node label: a device attribute (fully qualified, e.g. "
        "gpu.nvidia.com/cliqueId) shared across nodes, such as an NVLink clique; a node is in the "
        "domain its devices name.",
    )

    @model_validator(mode="after")
    def _check(self) -> TopologyLevel:
        if (self.node_label is None) == (self.device_attribute is None):
            raise FieldError("nodeLabel", "exactly one of nodeLabel and deviceAttribute must be set")
        return self

    @property
    def key(self) -> str:
        return self.node_label if self.node_label is not None else self.device_attribute or ""


class TopologySpec(SpecModel):
    levels: list[TopologyLevel] = Field(
        min_length=1,
        max_length=16,
        description="The levels, from the widest (block, rack) to the narrowest (node).",
        json_schema_extra={"x-kubernetes-list-type": "atomic"},
    )

    @model_validator(mode="after")
    def _check(self) -> TopologySpec:
        seen: set[str] = set()
        for i, lv in enumerate(self.levels):
            if lv.key in seen:
                raise FieldError(f"levels[{i}]", f"level {lv.key} appears twice")
            seen.add(lv.key)
        return self


class Topology(SpecModel, KubeObject):
    """Topology: ordered levels of the cluster's topology, referenced by ResourceFlavors' topologyName."""

    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "Topology"
    CRD: ClassVar[CrdInfo] = CrdInfo(plural="topologies", scope="Cluster", printer_columns=(AGE_COLUMN,))

    spec: TopologySpec = Field(description="Specification of the Topology.")


# ------------------------------------------------------------------ ClusterQueue
QueueingStrategy = Literal["StrictFIFO", "BestEffortFIFO"]
StopPolicy = Literal["None", "Hold", "HoldAndDrain"]
FungibilityPolicy = Literal["MayStopSearch", "TryNextFlavor"]


class BorrowWithinCohort(SpecModel):
    """Preemption in other ClusterQueues of the cohort while borrowing."""

    policy: Literal["Never", "LowerPriority"] = Field(
        default="Never",
        description="Never (default): no preemption while borrowing. LowerPriority: preempt lower-priority workloads.",
    )
    max_priority_threshold: Int32 | None = Field(
        default=None,
        description="Only workloads with priority at most this may be preempted by a borrowing workload.",
    )


class ClusterQueuePreemption(SpecModel):
    """When a pending workload may preempt admitted ones."""

    reclaim_within_cohort: Literal["Never", "LowerPriority", "Any"] = Field(
        default="Never",
        description=(
            "Whether a workload that fits its nominal quota may preempt workloads of other ClusterQueues "
            "in the cohort that use more than their nominal quota: Never, LowerPriority or Any."
        ),
    )
    borrow_within_cohort: BorrowWithinCohort | None = Field(
        default=None, description="Whether a workload that needs to borrow may preempt in the cohort."
    )
    within_cluster_queue: Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"] = Field(
        default="Never",
        description=(
            "Whether a workload that does not fit its nominal quota may preempt workloads of its own "
            "ClusterQueue: Never, LowerPriority or LowerOrNewerEqualPriority."
        ),
    )

    CEL_RULES: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            "!(self.reclaimWithinCohort == 'Never' && has(self.borrowWithinCohort) && "
            "self.borrowWithinCohort.policy != 'Never')",
            "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never",
        ),
    )

    @model_validator(mode="after")
    def _check(self) -> ClusterQueuePreemption:
        b = self.borrow_within_cohort
        if self.reclaim_within_cohort == "Never" and b is not None and b.policy != "Never":
            raise FieldError("borrowWithinCohort.policy", "must be Never when reclaimWithinCohort is Never")
        return self


class FlavorFungibility(SpecModel):
    """Whether to try the next flavor before borrowing or preempting in the current one."""

    when_can_borrow: FungibilityPolicy = Field(
        default="MayStopSearch",
        description="MayStopSearch (default): take this flavor if it fits by borrowing. TryNextFlavor: try the next first.",
    )
    when_can_preempt: FungibilityPolicy = Field(
        default="TryNextFlavor",
        description="MayStopSearch: take this flavor if it fits by preempting. TryNextFlavor (default): try the next first.",
    )


class AdmissionScope(SpecModel):
    """Kueue's admissionScope: how workloads of this ClusterQueue are ordered for admission."""

    admission_mode: Literal["UsageBasedAdmissionFairSharing", "NoAdmissionFairSharing"] = Field(
        description=(
            "UsageBasedAdmissionFairSharing: order the workloads by their LocalQueue's decayed usage "
            "(needs admissionFairSharing in the controller configuration). NoAdmissionFairSharing: by "
            "priority and time."
        )
    )


class ClusterQueueSpec(SpecModel):
    UNSUPPORTED: ClassVar[dict[str, str]] = {
        "admissionChecks": "admission checks are " + _NOT_IMPLEMENTED,
        "admissionChecksStrategy": "admission checks are " + _NOT_IMPLEMENTED,
    }

    resource_groups: list[ResourceGroup] | None = Field(
        default=None,
        max_length=16,
        description=(
            "Groups of resources with the flavors providing their quota. Each resource and each flavor "
            "belongs to at most one group; up to 16 groups and 256 flavors in total."
        ),
        json_schema_extra={"x-kubernetes-list-type": "atomic"},
    )
    cohort_name: Name | None = Field(
        default=None,
        description=(
            "Cohort this ClusterQueue belongs to. Queues of a cohort borrow unused quota from each other. "
            "Empty: no borrowing or lending."
        ),
    )
    queueing_strategy: QueueingStrategy = Field(
        default="BestEffortFIFO",
        description=(
            "StrictFIFO: workloads are ordered by priority then creation time and an older workload that "
            "cannot be admitted blocks newer ones. BestEffortFIFO (default): same order, but workloads that "
            "do not fit do not block the ones that do."
        ),
    )
    namespace_selector: LabelSelector | None = Field(
        default=None,
        description="Namespaces allowed to submit workloads to this queue. Null selects none; {} selects all.",
    )
    flavor_fungibility: FlavorFungibility | None = Field(
        default=None, description="Whether to try the next flavor before borrowing or preempting."
    )
    preemption: ClusterQueuePreemption | None = Field(default=None, description="Preemption policies.")
    stop_policy: StopPolicy = Field(
        default="None",
        description=(
            "None (default): admit. Hold: no new admissions, admitted workloads run to completion. "
            "HoldAndDrain: no new admissions and admitted workloads are evicted."
        ),
    )
    fair_sharing: FairSharing | None = Field(default=None, description="Fair-sharing properties.")
    admission_scope: AdmissionScope | None = Field(
        default=None, description="Admission fair sharing for this ClusterQueue (Kueue's admissionScope)."
    )

    CEL_RULES: ClassVar[tuple[CelRule, ...]] = (
        _no_limits_rule("cohortName", "borrowingLimit"),
        _no_limits_rule("cohortName", "lendingLimit"),
    )

    @model_validator(mode="after")
    def _check(self) -> ClusterQueueSpec:
        _check_resource_groups(self.resource_groups or [], bool(self.cohort_name), "cohortName")
        return self


class ClusterQueueStatus(KubeModel):
    conditions: list[Condition] | None = conditions_field(
        "Latest observations of the queue's state (Active)."
    )
    flavors_reservation: list[FlavorUsage] | None = Field(
        default=None,
        max_length=64,
        description="Quota reserved, per flavor, by workloads assigned to this queue.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    flavors_usage: list[FlavorUsage] | None = Field(
        default=None,
        max_length=64,
        description="Quota used, per flavor, by workloads admitted in this queue.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    pending_workloads: NonNegInt32 | None = Field(
        default=None, description="Workloads waiting for admission."
    )
    reserving_workloads: NonNegInt32 | None = Field(default=None, description="Workloads reserving quota.")
    admitted_workloads: NonNegInt32 | None = Field(
        default=None, description="Workloads admitted and not finished."
    )
    fair_sharing: FairSharingStatus | None = Field(default=None, description="Current fair-sharing state.")


class ClusterQueue(SpecModel, KubeObject):
    """ClusterQueue: quota per flavor and resource, its cohort, queueing strategy and preemption."""

    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "ClusterQueue"
    CRD: ClassVar[CrdInfo] = CrdInfo(
        plural="clusterqueues",
        scope="Cluster",
        short_names=("cq",),
        printer_columns=(
            PrinterColumn("Cohort", ".spec.cohortName", "string", "Cohort that this ClusterQueue belongs to"),
            PrinterColumn("Strategy", ".spec.queueingStrategy", "string", "The queueing strategy"),
            PrinterColumn("Pending", ".status.pendingWorkloads", "integer", "Number of pending workloads"),
            PrinterColumn(
                "Admitted", ".status.admittedWorkloads", "integer", "Number of admitted, unfinished workloads"
            ),
        ),
    )

    spec: ClusterQueueSpec = Field(
        default_factory=ClusterQueueSpec, description="Specification of the ClusterQueue."
    )
    status: ClusterQueueStatus = Field(
        default_factory=ClusterQueueStatus, description="Observed state of the ClusterQueue."
    )


# ------------------------------------------------------------------ Cohort
class CohortSpec(SpecModel):
    parent_name: Name | None = Field(
        default=None,
        description="Parent Cohort, if any. Unset: this Cohort is the root of its tree.",
    )
    resource_groups: list[ResourceGroup] | None = Field(
        default=None,
        max_length=16,
        description=(
            "Quota shared by the members of the cohort, on top of their own. Borrowing and lending "
            "limits are only allowed when the Cohort has a parent."
        ),
        json_schema_extra={"x-kubernetes-list-type": "atomic"},
    )
    fair_sharing: FairSharing | None = Field(default=None, description="Fair-sharing properties.")

    CEL_RULES: ClassVar[tuple[CelRule, ...]] = (
        _no_limits_rule("parentName", "borrowingLimit"),
        _no_limits_rule("parentName", "lendingLimit"),
    )

    @model_validator(mode="after")
    def _check(self) -> CohortSpec:
        _check_resource_groups(self.resource_groups or [], bool(self.parent_name), "parentName")
        return self


class CohortStatus(KubeModel):
    conditions: list[Condition] | None = conditions_field(
        "Terminating: deleted while admitted workloads of its ClusterQueues use it (the message names them)."
    )
    fair_sharing: FairSharingStatus | None = Field(default=None, description="Current fair-sharing state.")


class Cohort(SpecModel, KubeObject):
    """Cohort: a group of ClusterQueues (and child Cohorts) that borrow from each other."""

    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "Cohort"
    CRD: ClassVar[CrdInfo] = CrdInfo(
        plural="cohorts",
        scope="Cluster",
        printer_columns=(PrinterColumn("Parent", ".spec.parentName", "string", "Parent Cohort"),),
    )

    spec: CohortSpec = Field(default_factory=CohortSpec, description="Specification of the Cohort.")
    status: CohortStatus = Field(default_factory=CohortStatus, description="Observed state of the Cohort.")


# ------------------------------------------------------------------ LocalQueue
class LocalQueueSpec(SpecModel):
    cluster_queue: Name = Field(
        description="The ClusterQueue this LocalQueue submits its workloads to. Immutable.",
        json_schema_extra={
            "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "field is immutable"}]
        },
    )
    stop_policy: StopPolicy = Field(
        default="None",
        description="None (default): admit. Hold: no new admissions. HoldAndDrain: also evict admitted workloads.",
    )
    fair_sharing: FairSharing | None = Field(default=None, description="Fair-sharing properties.")


class LocalQueueStatus(KubeModel):
    conditions: list[Condition] | None = conditions_field(
        "Latest observations of the queue's state (Active)."
    )
    pending_workloads: NonNegInt32 | None = Field(
        default=None, description="Workloads waiting for admission."
    )
    reserving_workloads: NonNegInt32 | None = Field(default=None, description="Workloads reserving quota.")
    admitted_workloads: NonNegInt32 | None = Field(
        default=None, description="Workloads admitted and not finished."
    )
    flavors_reservation: list[FlavorUsage] | None = Field(
        default=None,
        max_length=64,
        description="Quota reserved, per flavor, by workloads of this queue.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    flavors_usage: list[FlavorUsage] | None = Field(
        default=None,
        max_length=64,
        description="Quota used, per flavor, by admitted workloads of this queue.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )


class LocalQueue(SpecModel, KubeObject):
    """LocalQueue: the namespaced entry point users submit workloads to."""

    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "LocalQueue"
    CRD: ClassVar[CrdInfo] = CrdInfo(
        plural="localqueues",
        scope="Namespaced",
        short_names=("queue", "queues", "lq"),
        printer_columns=(
            PrinterColumn("ClusterQueue", ".spec.clusterQueue", "string", "Backing ClusterQueue"),
            PrinterColumn("Pending", ".status.pendingWorkloads", "integer", "Number of pending workloads"),
            PrinterColumn(
                "Admitted", ".status.admittedWorkloads", "integer", "Number of admitted, unfinished workloads"
            ),
        ),
    )

    spec: LocalQueueSpec = Field(description="Specification of the LocalQueue.")
    status: LocalQueueStatus = Field(
        default_factory=LocalQueueStatus, description="Observed state of the LocalQueue."
    )


# ------------------------------------------------------------------ WorkloadPriorityClass
class WorkloadPriorityClass(SpecModel, KubeObject):
    """WorkloadPriorityClass: a named priority for workloads, independent of pod priority."""

    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "WorkloadPriorityClass"
    CRD: ClassVar[CrdInfo] = CrdInfo(
        plural="workloadpriorityclasses",
        scope="Cluster",
        short_names=("wpc",),
        printer_columns=(
            PrinterColumn("Value", ".value", "integer", "Priority value"),
            AGE_COLUMN,
        ),
    )

    value: Int32 = Field(
        description="Priority of workloads referring to this class; higher is admitted and kept first."
    )
    description: str | None = Field(
        default=None, max_length=2048, description="When this priority class should be used."
    )


# ------------------------------------------------------------------ Workload
class PriorityClassRef(SpecModel):
    """A reference to the priority class giving a workload its priority."""

    group: Literal["queueing.dra.io", "scheduling.k8s.io"] = Field(
        description="queueing.dra.io for a WorkloadPriorityClass, scheduling.k8s.io for a pod PriorityClass."
    )
    kind: Literal["WorkloadPriorityClass", "PriorityClass"] = Field(description="Kind of the priority class.")
    name: Name = Field(description="Name of the priority class.")

    CEL_RULES: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            "(self.group == 'scheduling.k8s.io') ? self.kind == 'PriorityClass' : true",
            "only the PriorityClass kind is allowed for the scheduling.k8s.io group",
        ),
        CelRule(
            "(self.group == 'queueing.dra.io') ? self.kind == 'WorkloadPriorityClass' : true",
            "only the WorkloadPriorityClass kind is allowed for the queueing.dra.io group",
        ),
    )

    @model_validator(mode="after")
    def _check(self) -> PriorityClassRef:
        want = {"scheduling.k8s.io": "PriorityClass", "queueing.dra.io": "WorkloadPriorityClass"}[self.group]
        if self.kind != want:
            raise FieldError("kind", f"must be {want} for group {self.group}")
        return self


class PodSetResourceClaim(SpecModel):
    """A ResourceClaim the pods of a podSet use (DRA).

    ``resourceClaimTemplateName``: every pod gets its own claim from the template (devices counted per
    pod). ``resourceClaimName``: all pods share one existing claim (devices counted once).
    """

    name: PodSetName = Field(
        description="Name of the claim in the pod spec (pod.spec.resourceClaims[].name) and in containers' resources.claims."
    )
    resource_claim_name: Name | None = Field(
        default=None, description="An existing ResourceClaim in the workload's namespace, shared by all pods."
    )
    resource_claim_template_name: Name | None = Field(
        default=None, description="A ResourceClaimTemplate; each pod gets its own claim from it."
    )

    CEL_RULES: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            "has(self.resourceClaimName) != has(self.resourceClaimTemplateName)",
            "exactly one of resourceClaimName, resourceClaimTemplateName must be set",
        ),
    )

    @model_validator(mode="after")
    def _check(self) -> PodSetResourceClaim:
        if (self.resource_claim_name is None) == (self.resource_claim_template_name is None):
            raise FieldError(
                "resourceClaimName", "exactly one of resourceClaimName, resourceClaimTemplateName must be set"
            )
        return self


class PodSet(SpecModel):
    """A set of homogeneous pods: a template and a count."""

    name: PodSetName = Field(default="main", description="Name of the podSet, unique within the workload.")
    template: PodTemplateSpec = Field(
        description=(
            "The pod template. Its nodeSelector and required node affinity select flavors by their "
            "nodeLabels; its resourceClaims and containers' resources.claims name the DRA claims."
        )
    )
    count: NonNegInt32 = Field(default=1, description="Number of pods.")
    min_count: PositiveInt32 | None = Field(
        default=None,
        description="Minimum number of pods acceptable for partial admission; at most count. Only one podSet may set it.",
    )
    resource_claims: list[PodSetResourceClaim] | None = Field(
        default=None,
        max_length=32,
        description=(
            "DRA claims of each pod, by claim name: a template (one claim per pod) or a shared claim. "
            "When unset, template.spec.resourceClaims is used."
        ),
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )

    CEL_RULES: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            "has(self.minCount) ? self.minCount <= self.count : true",
            "minCount should be positive and less or equal to count",
        ),
    )

    @model_validator(mode="after")
    def _check(self) -> PodSet:
        if self.min_count is not None and self.min_count > self.count:
            raise FieldError(
                "minCount", f"must be less than or equal to count ({self.min_count} > {self.count})"
            )
        if self.resource_claims:
            _unique((c.name for c in self.resource_claims), "resourceClaims", "claim")
        return self

    def claim_refs(self) -> list[PodSetResourceClaim]:
        """The effective DRA claims: ``resourceClaims``, else the pod template's ``spec.resourceClaims``."""
        if self.resource_claims is not None:
            return list(self.resource_claims)
        out = []
        for c in self.template.spec.resource_claims or []:
            out.append(
                PodSetResourceClaim(
                    name=c.name,
                    resource_claim_name=c.resource_claim_name,
                    resource_claim_template_name=c.resource_claim_template_name,
                )
            )
        return out


class WorkloadSpec(SpecModel):
    pod_sets: list[PodSet] = Field(
        min_length=1,
        max_length=8,
        description="Sets of homogeneous pods; admitted together as a gang (1 to 8).",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    queue_name: Name | None = Field(default=None, description="The LocalQueue this workload is submitted to.")
    priority_class_ref: PriorityClassRef | None = Field(
        default=None, description="The priority class giving this workload its priority."
    )
    priority: Int32 | None = Field(
        default=None,
        description="Priority in its ClusterQueue; higher first. Filled from priorityClassRef.",
    )
    active: Bool = Field(
        default=True, description="false: the workload is never admitted and is evicted if running."
    )
    maximum_execution_time_seconds: PositiveInt32 | None = Field(
        default=None, description="If set, the workload is deactivated after being admitted this long."
    )

    CEL_RULES: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            "!has(self.priorityClassRef) || has(self.priority)",
            "priority should not be nil when priorityClassRef is set",
        ),
        CelRule(
            "self.podSets.filter(p, has(p.minCount)).size() <= 1",
            "only one podSet may set minCount",
        ),
    )

    @model_validator(mode="after")
    def _check(self) -> WorkloadSpec:
        _unique((p.name for p in self.pod_sets), "podSets", "podSet")
        partial = [i for i, p in enumerate(self.pod_sets) if p.min_count is not None]
        if len(partial) > 1:
            raise FieldError(f"podSets[{partial[1]}].minCount", "only one podSet may set minCount")
        if self.priority_class_ref is not None and self.priority is None:
            raise FieldError("priority", "must be set when priorityClassRef is set")
        return self

    @property
    def priority_class_name(self) -> str | None:
        return self.priority_class_ref.name if self.priority_class_ref else None


class AllocatedDevice(KubeModel):
    """One device planned for a request of a claim (as in ResourceClaim status.allocation)."""

    request: str = Field(
        description="Request of the claim the device is for (<request> or <request>/<subrequest>)."
    )
    driver: str = Field(description="DRA driver of the device.")
    pool: str = Field(description="Resource pool of the device.")
    device: str = Field(description="Name of the device in its pool.")
    share_id: str | None = Field(
        default=None, alias="shareID", description="Share of a device with consumable capacity."
    )
    consumed_capacity: dict[str, Quantity] | None = Field(
        default=None, description="Capacity consumed on a shared device."
    )
    admin_access: Bool | None = Field(default=None, description="Device allocated with admin access.")


class ClaimPlacement(KubeModel):
    name: str = Field(description="Name of the claim in the pod spec.")
    resource_claim_name: str | None = Field(
        default=None, description="The ResourceClaim object (for shared claims, or once created)."
    )
    devices: list[AllocatedDevice] = Field(
        default_factory=list, description="Devices planned for the claim's requests."
    )


class PodPlacement(KubeModel):
    """Where one pod of a podSet runs and which devices it gets."""

    index: NonNegInt32 = Field(description="Index of the pod in its podSet (0 to count-1).")
    node_name: str = Field(description="Node planned for the pod.")
    claims: list[ClaimPlacement] | None = Field(default=None, description="Devices planned per claim.")


class PodSetAssignment(KubeModel):
    name: PodSetName = Field(default="main", description="Name of the podSet in spec.podSets.")
    flavors: dict[str, str] | None = Field(
        default=None, description="Flavor assigned to each resource (resource name -> flavor)."
    )
    resource_usage: dict[str, Quantity] | None = Field(
        default=None,
        description="Total quota charged for all pods of the podSet, including DRA device count and capacity.",
    )
    count: NonNegInt32 | None = Field(default=None, description="Number of pods admitted.")
    placements: list[PodPlacement] | None = Field(
        default=None, description="Planned node and devices of each pod (DRA)."
    )


class Admission(KubeModel):
    cluster_queue: Name = Field(description="The ClusterQueue that admitted the workload.")
    pod_set_assignments: list[PodSetAssignment] = Field(
        default_factory=list,
        max_length=8,
        description="Admission result of each podSet.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    planned_devices: NonNegInt32 | None = Field(
        default=None, description="Number of distinct devices planned for the workload (the Devices column)."
    )

    def count_planned_devices(self) -> int:
        """Distinct (driver, pool, device, shareID) over all placements: a shared claim counts once."""
        seen: set[tuple[str, str, str, str | None]] = set()
        for a in self.pod_set_assignments:
            for p in a.placements or []:
                for c in p.claims or []:
                    for d in c.devices:
                        seen.add((d.driver, d.pool, d.device, d.share_id))
        return len(seen)


class RequeueState(KubeModel):
    count: NonNegInt32 | None = Field(default=None, description="Times the workload was requeued.")
    requeue_at: Time | None = Field(default=None, description="When the workload will be requeued.")


class PodSetRequest(KubeModel):
    name: PodSetName = Field(description="Name of the podSet.")
    resources: dict[str, Quantity] | None = Field(
        default=None, description="Total resources all pods of the podSet need."
    )


class WorkloadStatus(KubeModel):
    conditions: list[Condition] | None = conditions_field(
        "QuotaReserved, Admitted, Evicted, Preempted, Requeued, PodsReady, Finished."
    )
    admission: Admission | None = Field(
        default=None, description="Where and how the workload was admitted; null while not admitted."
    )
    requeue_state: RequeueState | None = Field(default=None, description="Requeue state after eviction.")
    resource_requests: list[PodSetRequest] | None = Field(
        default=None,
        max_length=8,
        description="Resources requested per podSet by a workload not admitted yet.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    reason: str | None = Field(
        default=None,
        max_length=316,
        description="Why the workload is not running: its pending reason or last eviction reason (the Reason column).",
    )

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.conditions or [] if c.type == type_), None)

    def is_true(self, type_: str) -> bool:
        c = self.condition(type_)
        return c is not None and c.status == "True"


class Workload(SpecModel, KubeObject):
    """Workload: a unit of admission (a gang of podSets) queued in a LocalQueue."""

    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "Workload"
    CRD: ClassVar[CrdInfo] = CrdInfo(
        plural="workloads",
        scope="Namespaced",
        short_names=("wl",),
        printer_columns=(
            PrinterColumn(
                "Queue", ".spec.queueName", "string", "Name of the queue this workload was submitted to"
            ),
            PrinterColumn(
                "Reserved in",
                ".status.admission.clusterQueue",
                "string",
                "Name of the ClusterQueue where the workload is reserving quota",
            ),
            PrinterColumn(
                "Admitted", ".status.conditions[?(@.type=='Admitted')].status", "string", "Admission status"
            ),
            PrinterColumn(
                "Finished", ".status.conditions[?(@.type=='Finished')].status", "string", "Workload finished"
            ),
            PrinterColumn(
                "Devices", ".status.admission.plannedDevices", "integer", "Number of planned DRA devices"
            ),
            # long (300+ characters): only with ``kubectl get -o wide``
            PrinterColumn("Reason", ".status.reason", "string", "Pending or eviction reason", priority=1),
            AGE_COLUMN,
        ),
    )

    spec: WorkloadSpec = Field(description="Specification of the Workload.")
    status: WorkloadStatus = Field(
        default_factory=WorkloadStatus, description="Observed state of the Workload."
    )

    CEL_RULES: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            "has(self.status) && has(self.status.conditions) && "
            "self.status.conditions.exists(c, c.type == 'QuotaReserved' && c.status == 'True') && "
            "has(self.status.admission) ? size(self.spec.podSets) == size(self.status.admission.podSetAssignments) : true",
            "podSetAssignments must have the same number of podSets as the spec",
        ),
        # Kueue's: podSets cannot change while quota is reserved (a transition rule: updates only)
        CelRule(
            "has(oldSelf.status) && has(oldSelf.status.conditions) && "
            "oldSelf.status.conditions.exists(c, c.type == 'QuotaReserved' && c.status == 'True') "
            "? self.spec.podSets == oldSelf.spec.podSets : true",
            "spec.podSets: field is immutable while QuotaReserved is True",
        ),
    )

    @model_validator(mode="after")
    def _check(self) -> Workload:
        adm = self.status.admission
        if (
            adm is not None
            and self.status.is_true(QUOTA_RESERVED)
            and len(adm.pod_set_assignments) != len(self.spec.pod_sets)
        ):
            raise FieldError(
                "status.admission.podSetAssignments",
                f"must have one entry per podSet ({len(adm.pod_set_assignments)} != {len(self.spec.pod_sets)})",
            )
        return self

    def pod_set(self, name: str) -> PodSet | None:
        return next((p for p in self.spec.pod_sets if p.name == name), None)

    @property
    def local_queue_key(self) -> str:
        """``namespace/name`` of the LocalQueue it was submitted to (``LocalQueue.key``)."""
        return f"{self.namespace or 'default'}/{self.spec.queue_name}"


KINDS: tuple[type[KubeObject], ...] = (
    ResourceFlavor,
    Topology,
    Cohort,
    ClusterQueue,
    LocalQueue,
    Workload,
    WorkloadPriorityClass,
)
