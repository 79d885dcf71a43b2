"""DRA feature gates the allocator honours (all on by default, as in the issue's contract)."""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["GATES", "Features"]

# Kubernetes gate name -> Features attribute
GATES: dict[str, str] = {
    "DRAPrioritizedList": "prioritized_list",
    "DRAAdminAccess": "admin_access",
    "DRAPartitionableDevices": "partitionable_devices",
    "DRAConsumableCapacity": "consumable_capacity",
    "DRADeviceTaints": "device_taints",
    "DRADeviceBindingConditions": "binding_conditions",
    "DRAExtendedResource": "extended_resource",
}


@dataclass(frozen=True, slots=True)
class Features:
    prioritized_list: bool = True
    admin_access: bool = True
    partitionable_devices: bool = True
    consumable_capacity: bool = True
    device_taints: bool = True
    binding_conditions: bool = True
    extended_resource: bool = True  # extended resources backed by DeviceClasses (gang placement)

    @classmethod
    def parse(cls, text: str, base: Features | None = None) -> Features:
        """``Name=bool,Name=bool`` as kube components take ``--feature-gates``; ValueError on bad input."""
        out = base or cls()
        for part in (p.strip() for p in text.split(",")):
            if not part:
                continue
            name, sep, value = part.partition("=")
            name, value = name.strip(), value.strip().lower()
            if not sep or value not in ("true", "false"):
                raise ValueError(f"{part!r}: expected Name=true or Name=false")
            if name not in GATES:
                raise ValueError(f"unknown feature gate {name!r} (known: {', '.join(sorted(GATES))})")
            out = replace(out, **{GATES[name]: value == "true"})
        return out
