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

from typing import Any, ClassVar, Literal

from pydantic import Field

from queueing.api.base import KubeModel, KubeObject
from queueing.api.core import NodeSelector, Taint, Toleration
from queueing.api.quantity import Quantity

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


# ---------------------------------------------------------------- ResourceSlice
class ResourcePool(KubeModel):
    name: str
    generation: int = 0
    resource_slice_count: int = 1


class DeviceAttribute(KubeModel):
    """Exactly one of int/bool/string/version is set."""

    int_: int | None = Field(default=None, alias="int")
    bool_: bool | None = Field(default=None, alias="bool")
    string: str | None = None
    version: str | None = None

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
    min: Quantity | None = None
    max: Quantity | None = None
    step: Quantity | None = None


class CapacityRequestPolicy(KubeModel):
    default: Quantity | None = None
    valid_values: list[Quantity] | None = None
    valid_range: CapacityRequestPolicyRange | None = None


class DeviceCapacity(KubeModel):
    value: Quantity
    request_policy: CapacityRequestPolicy | None = None


class Counter(KubeModel):
    value: Quantity


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
    name: str
    attributes: dict[str, DeviceAttribute] | None = None
    capacity: dict[str, DeviceCapacity] | None = None
    consumes_counters: list[DeviceCounterConsumption] | None = None
    node_name: str | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool | None = None
    taints: list[DeviceTaint] | None = None
    binds_to_node: bool | None = None
    binding_conditions: list[str] | None = None
    binding_failure_conditions: list[str] | None = None
    allow_multiple_allocations: bool | None = None


class ResourceSliceSpec(KubeModel):
    driver: str
    pool: ResourcePool
    node_name: str | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool | None = None
    per_device_node_selection: bool | None = None
    devices: list[Device] = Field(default_factory=list)
    shared_counters: list[CounterSet] | None = None


class ResourceSlice(KubeObject):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "ResourceSlice"

    spec: ResourceSliceSpec


# ---------------------------------------------------------------- DeviceClass
class CELDeviceSelector(KubeModel):
    expression: str


class DeviceSelector(KubeModel):
    cel: CELDeviceSelector | None = None


class OpaqueDeviceConfiguration(KubeModel):
    driver: str
    parameters: Any = None


class DeviceClassConfiguration(KubeModel):
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceClassSpec(KubeModel):
    selectors: list[DeviceSelector] | None = None
    config: list[DeviceClassConfiguration] | None = None
    extended_resource_name: str | None = None


class DeviceClass(KubeObject):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "DeviceClass"

    spec: DeviceClassSpec = Field(default_factory=DeviceClassSpec)


# ---------------------------------------------------------------- ResourceClaim
class CapacityRequirements(KubeModel):
    requests: dict[str, Quantity] | None = None


class ExactDeviceRequest(KubeModel):
    device_class_name: str
    selectors: list[DeviceSelector] | None = None
    allocation_mode: AllocationMode | None = None
    count: int | None = None
    admin_access: bool | None = None
    tolerations: list[DeviceToleration] | None = None
    capacity: CapacityRequirements | None = None


class DeviceSubRequest(KubeModel):
    name: str
    device_class_name: str
    selectors: list[DeviceSelector] | None = None
    allocation_mode: AllocationMode | None = None
    count: int | None = None
    tolerations: list[DeviceToleration] | None = None
    capacity: CapacityRequirements | None = None


class DeviceRequest(KubeModel):
    name: str
    exactly: ExactDeviceRequest | None = None
    first_available: list[DeviceSubRequest] | None = None


class DeviceConstraint(KubeModel):
    requests: list[str] | None = None
    match_attribute: str | None = None
    distinct_attribute: str | None = None


class DeviceClaimConfiguration(KubeModel):
    requests: list[str] | None = None
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceClaim(KubeModel):
    requests: list[DeviceRequest] | None = None
    constraints: list[DeviceConstraint] | None = None
    config: list[DeviceClaimConfiguration] | None = None


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
