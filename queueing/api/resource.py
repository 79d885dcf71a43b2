"""resource.k8s.io/v1 kinds read and written by the DRA allocator.

ResourceSlice, DeviceClass, ResourceClaim and ResourceClaimTemplate with every field the structured
allocator uses (devices, attributes, capacity with requestPolicy, sharedCounters and consumesCounters,
device taints, node targeting incl. perDeviceNodeSelection, bindsToNode, pool generation and slice
count; requests with ``exactly``/``firstAvailable``, selectors, allocation mode, adminAccess,
tolerations, capacity requests; constraints; config; ``status.allocation``).

Unknown fields are kept (``extra="allow"``) so objects round-trip. Names follow ``KubeModel``:
snake_case attributes, camelCase wire names.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, Field, Strict, model_validator

from queueing.api.base import FieldError, KubeModel, KubeObject
from queueing.api.core import NodeSelector, Taint, Toleration
from queueing.api.quantity import Quantity
from queueing.api.validation import (
    DnsLabel,
    DnsSubdomain,
    NonNegQuantity,
    PositiveInt64,
    check_dns_subdomain,
    check_semver,
)

__all__ = [
    "API_VERSION",
    "AllocationResult",
    "CELDeviceSelector",
    "CapacityRequestPolicy",
    "CapacityRequestPolicyRange",
    "CapacityRequirements",
    "Counter",
    "CounterSet",
    "Device",
    "DeviceAllocationConfiguration",
    "DeviceAllocationResult",
    "DeviceAttribute",
    "DeviceCapacity",
    "DeviceClaim",
    "DeviceClaimConfiguration",
    "DeviceClass",
    "DeviceClassConfiguration",
    "DeviceClassSpec",
    "DeviceConstraint",
    "DeviceCounterConsumption",
    "DeviceRequest",
    "DeviceRequestAllocationResult",
    "DeviceSelector",
    "DeviceSubRequest",
    "DeviceTaint",
    "DeviceToleration",
    "ExactDeviceRequest",
    "OpaqueDeviceConfiguration",
    "ResourceClaim",
    "ResourceClaimSpec",
    "ResourceClaimStatus",
    "ResourceClaimTemplate",
    "ResourceClaimTemplateSpec",
    "ResourcePool",
    "ResourceSlice",
    "ResourceSliceSpec",
]

API_VERSION = "resource.k8s.io/v1"

AllocationMode = Literal["ExactCount", "All"]
TaintEffect = Literal["NoSchedule", "NoExecute", "None"]

# the API server's limits (k8s.io/api/resource/v1, pkg/apis/resource/validation)
MAX_DEVICES_PER_SLICE = 128
MAX_DEVICES_PER_SLICE_WITH_TAINTS_OR_COUNTERS = 64
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_ATTRIBUTE_VALUE_LENGTH = 64
MAX_TAINTS_PER_DEVICE = 16
MAX_TOLERATIONS = 16
MAX_REQUESTS = 32
MAX_SELECTORS = 32
MAX_CONSTRAINTS = 32
MAX_CONFIGS = 32
MAX_FIRST_AVAILABLE = 8
MAX_COUNTER_CONSUMPTIONS = 2
CEL_EXPRESSION_MAX_LENGTH = 10 * 1024
Int64 = Annotated[int, Strict(), Field(ge=-(2**63), le=2**63 - 1)]
NonNegInt64 = Annotated[int, Strict(), Field(ge=0, le=2**63 - 1)]
StrictBool = Annotated[bool, Strict()]
_C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$", re.ASCII)


def check_qualified_name(name: str) -> str:
    """An attribute or capacity name: ``[<domain>/]<identifier>``, the domain a DNS subdomain of at
    most 63 characters, the identifier a C identifier of at most 32 characters."""
    domain, sep, ident = name.rpartition("/")
    if sep:
        if len(domain) > 63:
            raise ValueError(f"{name!r}: the domain before '/' has at most 63 characters")
        check_dns_subdomain(domain)
    if len(ident) > 32 or not _C_IDENTIFIER.match(ident):
        raise ValueError(
            f"{name[:80]!r} is not a valid name: a C identifier (letters, digits, '_'; not starting with a "
            "digit) of at most 32 characters, optionally prefixed by a domain and '/'"
        )
    return name


QualifiedName = Annotated[str, AfterValidator(check_qualified_name)]


def _check_driver(name: str) -> str:
    if len(name) > 63:
        raise ValueError(f"{name[:80]!r} is too long: a driver name has at most 63 characters")
    return check_dns_subdomain(name)


DriverName = Annotated[str, AfterValidator(_check_driver)]


# ---------------------------------------------------------------- ResourceSlice
class ResourcePool(KubeModel):
    name: str = Field(min_length=1, max_length=253)
    generation: NonNegInt64 = 0
    resource_slice_count: Annotated[int, Strict(), Field(ge=1, le=2**63 - 1)] = 1


class DeviceAttribute(KubeModel):
    """Exactly one of int/bool/string/version is set."""

    int_: Int64 | None = Field(default=None, alias="int")
    bool_: StrictBool | None = Field(default=None, alias="bool")
    string: str | None = Field(default=None, max_length=MAX_ATTRIBUTE_VALUE_LENGTH)
    version: Annotated[str, AfterValidator(check_semver)] | None = None

    @model_validator(mode="after")
    def _one_value(self) -> DeviceAttribute:
        n = sum(v is not None for v in (self.int_, self.bool_, self.string, self.version))
        if n != 1:
            raise FieldError(
                "",
                "exactly one of int, bool, string and version must be set" + ("" if n == 0 else f", got {n}"),
            )
        return self

    def kind_and_value(self) -> tuple[str, int | bool | str] | None:
        """``(type, value)`` of the one value that is set, or None when none is."""
        if self.int_ is not None:
            return "int", self.int_
        if self.bool_ is not None:
            return "bool", self.bool_
        if self.string is not None:
            return "string", self.string
        if self.version is not None:
            return "version", self.version
        return None


class CapacityRequestPolicyRange(KubeModel):
    min: NonNegQuantity | None = None
    max: NonNegQuantity | None = None
    step: NonNegQuantity | None = None


class CapacityRequestPolicy(KubeModel):
    default: NonNegQuantity | None = None
    valid_values: list[NonNegQuantity] | None = Field(default=None, max_length=10)
    valid_range: CapacityRequestPolicyRange | None = None


class DeviceCapacity(KubeModel):
    value: NonNegQuantity
    request_policy: CapacityRequestPolicy | None = None


class Counter(KubeModel):
    value: NonNegQuantity


class CounterSet(KubeModel):
    name: str
    counters: dict[str, Counter] = Field(default_factory=dict)


class DeviceCounterConsumption(KubeModel):
    counter_set: str
    counters: dict[str, Counter] = Field(default_factory=dict)


class DeviceTaint(Taint):
    """A taint on a device (same shape as a node taint; effects NoSchedule, NoExecute, None)."""


class DeviceToleration(Toleration):
    """A request's toleration of device taints: the core/v1 rules (``Toleration.tolerates``)."""


class Device(KubeModel):
    name: DnsLabel
    attributes: dict[QualifiedName, DeviceAttribute] | None = None
    capacity: dict[QualifiedName, DeviceCapacity] | None = None
    consumes_counters: list[DeviceCounterConsumption] | None = Field(
        default=None, max_length=MAX_COUNTER_CONSUMPTIONS
    )
    node_name: str | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool | None = None
    taints: list[DeviceTaint] | None = Field(default=None, max_length=MAX_TAINTS_PER_DEVICE)
    binds_to_node: bool | None = None
    binding_conditions: list[str] | None = None
    binding_failure_conditions: list[str] | None = None
    allow_multiple_allocations: bool | None = None


class ResourceSliceSpec(KubeModel):
    driver: DriverName
    pool: ResourcePool
    node_name: str | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool | None = None
    per_device_node_selection: bool | None = None
    devices: list[Device] = Field(default_factory=list, max_length=MAX_DEVICES_PER_SLICE)
    shared_counters: list[CounterSet] | None = None

    @model_validator(mode="after")
    def _check(self) -> ResourceSliceSpec:
        limited = False
        for i, d in enumerate(self.devices):
            n = len(d.attributes or {}) + len(d.capacity or {})
            if n > MAX_ATTRIBUTES_AND_CAPACITIES:
                raise FieldError(
                    f"devices[{i}]",
                    f"at most {MAX_ATTRIBUTES_AND_CAPACITIES} attributes and capacities combined, got {n}",
                )
            limited = limited or bool(d.taints) or bool(d.consumes_counters)
        if limited and len(self.devices) > MAX_DEVICES_PER_SLICE_WITH_TAINTS_OR_COUNTERS:
            raise FieldError(
                "devices",
                f"at most {MAX_DEVICES_PER_SLICE_WITH_TAINTS_OR_COUNTERS} devices when a device has taints or "
                f"consumes counters, got {len(self.devices)}",
            )
        return self


class ResourceSlice(KubeObject):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "ResourceSlice"

    spec: ResourceSliceSpec


# ---------------------------------------------------------------- DeviceClass
class CELDeviceSelector(KubeModel):
    expression: str = Field(max_length=CEL_EXPRESSION_MAX_LENGTH)


class DeviceSelector(KubeModel):
    cel: CELDeviceSelector | None = None


class OpaqueDeviceConfiguration(KubeModel):
    driver: str
    parameters: Any = None


class DeviceClassConfiguration(KubeModel):
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceClassSpec(KubeModel):
    selectors: list[DeviceSelector] | None = Field(default=None, max_length=MAX_SELECTORS)
    config: list[DeviceClassConfiguration] | None = Field(default=None, max_length=MAX_CONFIGS)
    extended_resource_name: str | None = None


class DeviceClass(KubeObject):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "DeviceClass"

    spec: DeviceClassSpec = Field(default_factory=DeviceClassSpec)


# ---------------------------------------------------------------- ResourceClaim
class CapacityRequirements(KubeModel):
    requests: dict[QualifiedName, NonNegQuantity] | None = None


class ExactDeviceRequest(KubeModel):
    device_class_name: DnsSubdomain
    selectors: list[DeviceSelector] | None = Field(default=None, max_length=MAX_SELECTORS)
    allocation_mode: AllocationMode | None = None
    count: PositiveInt64 | None = None
    admin_access: StrictBool | None = None
    tolerations: list[DeviceToleration] | None = Field(default=None, max_length=MAX_TOLERATIONS)
    capacity: CapacityRequirements | None = None


class DeviceSubRequest(KubeModel):
    name: DnsLabel
    device_class_name: DnsSubdomain
    selectors: list[DeviceSelector] | None = Field(default=None, max_length=MAX_SELECTORS)
    allocation_mode: AllocationMode | None = None
    count: PositiveInt64 | None = None
    tolerations: list[DeviceToleration] | None = Field(default=None, max_length=MAX_TOLERATIONS)
    capacity: CapacityRequirements | None = None


class DeviceRequest(KubeModel):
    name: DnsLabel
    exactly: ExactDeviceRequest | None = None
    first_available: list[DeviceSubRequest] | None = Field(default=None, max_length=MAX_FIRST_AVAILABLE)


class DeviceConstraint(KubeModel):
    requests: list[str] | None = None
    match_attribute: str | None = None
    distinct_attribute: str | None = None


class DeviceClaimConfiguration(KubeModel):
    requests: list[str] | None = None
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceClaim(KubeModel):
    requests: list[DeviceRequest] | None = Field(default=None, max_length=MAX_REQUESTS)
    constraints: list[DeviceConstraint] | None = Field(default=None, max_length=MAX_CONSTRAINTS)
    config: list[DeviceClaimConfiguration] | None = Field(default=None, max_length=MAX_CONFIGS)

    @model_validator(mode="after")
    def _check(self) -> DeviceClaim:
        seen: set[str] = set()
        for i, r in enumerate(self.requests or []):
            if r.name in seen:
                raise FieldError(f"requests[{i}].name", f"duplicate request name {r.name!r}")
            seen.add(r.name)
        return self


class ResourceClaimSpec(KubeModel):
    devices: DeviceClaim = Field(default_factory=DeviceClaim)


class DeviceRequestAllocationResult(KubeModel):
    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool | None = None
    tolerations: list[DeviceToleration] | None = None
    binding_conditions: list[str] | None = None
    binding_failure_conditions: list[str] | None = None
    share_id: str | None = Field(default=None, alias="shareID")
    consumed_capacity: dict[str, Quantity] | None = None


class DeviceAllocationConfiguration(KubeModel):
    source: Literal["FromClass", "FromClaim"]
    requests: list[str] | None = None
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceAllocationResult(KubeModel):
    results: list[DeviceRequestAllocationResult] | None = None
    config: list[DeviceAllocationConfiguration] | None = None


class AllocationResult(KubeModel):
    devices: DeviceAllocationResult | None = None
    node_selector: NodeSelector | None = None
    allocation_timestamp: str | None = None


class ResourceClaimStatus(KubeModel):
    allocation: AllocationResult | None = None
    reserved_for: list[dict[str, Any]] | None = None
    devices: list[dict[str, Any]] | None = None


class ResourceClaim(KubeObject):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "ResourceClaim"

    spec: ResourceClaimSpec = Field(default_factory=ResourceClaimSpec)
    status: ResourceClaimStatus = Field(default_factory=ResourceClaimStatus)


class ResourceClaimTemplateSpec(KubeModel):
    metadata: dict[str, Any] | None = None
    spec: ResourceClaimSpec = Field(default_factory=ResourceClaimSpec)


class ResourceClaimTemplate(KubeObject):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "ResourceClaimTemplate"

    spec: ResourceClaimTemplateSpec = Field(default_factory=ResourceClaimTemplateSpec)
