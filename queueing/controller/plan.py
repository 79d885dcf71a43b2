"""From a scheduling decision to what is written: the Workload's ``status.admission``, the ledger's
admission record, ResourceClaim allocations, Job and Pod patches, conditions. No I/O here.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from queueing.api.core import Job, Pod
from queueing.api.quantity import Quantity
from queueing.api.resource import DeviceClass, ResourceClaimSpec, ResourceSlice
from queueing.api.v1beta1 import (
    Admission,
    ClaimPlacement,
    Condition,
)
from queueing.ledger.state import AdmissionRequest, Charge, PlannedDevice, PodPlan
from queueing.scheduling.cycle import Admission as CycleAdmission
from queueing.scheduling.jobs import ORIGINAL_PARALLELISM_ANNOTATION

__all__ = [
    "ORIGINAL_PARALLELISM_ANNOTATION",
    "DeviceIndex",
    "admission_json",
    "allocation_for",
    "fmt_time",
    "is_implicit_claim",
    "job_finished",
    "ledger_pods",
    "ledger_request",
    "needs_gate",
    "plan_summary",
    "pod_claim_name",
    "quantity",
    "with_condition",
    "without_nulls",
]

EXTENDED_SUFFIX = "-extended-resources"


def fmt_time(t: float) -> str:
    """RFC 3339 (seconds) from epoch seconds, without reading any clock."""
    return _dt.datetime.fromtimestamp(int(t), tz=_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def quantity(v: Fraction) -> Quantity:
    return Quantity.from_value(v)


def _condition(
    type_: str, status: str, reason: str, message: str, ltt: str, generation: int | None
) -> Condition:
    kw: dict[str, Any] = {"observed_generation": generation} if generation is not None else {}
    return Condition(
        type=type_, status=status, reason=reason, message=message, last_transition_time=ltt, **kw
    )


def with_condition(
    conditions: Sequence[Condition] | None,
    type_: str,
    status: str,
    reason: str,
    message: str,
    now: float,
    generation: int | None = None,
) -> list[Condition]:
    """The conditions with ``type_`` set; ``lastTransitionTime`` changes only when the status does."""
    out: list[Condition] = []
    found = False
    for c in conditions or []:
        if c.type != type_:
            out.append(c)
            continue
        found = True
        ltt = c.last_transition_time if c.status == status else fmt_time(now)
        out.append(_condition(type_, status, reason, message, ltt, generation))
    if not found:
        out.append(_condition(type_, status, reason, message, fmt_time(now), generation))
    return out


def is_implicit_claim(c: ClaimPlacement) -> bool:
    """The per-pod claim for extended resources served by DRA: kube-scheduler creates it at binding;
    we never write it (the plan pins the node; its devices are what must be free there)."""
    return c.name.endswith(EXTENDED_SUFFIX) and (c.resource_claim_name in (None, c.name))


def job_finished(job: Job) -> tuple[bool, bool]:
    """(finished, succeeded) from the Job's Complete / Failed conditions."""
    for c in job.status.conditions or []:
        if c.status == "True" and c.type in ("Complete", "SuccessCriteriaMet"):
            return True, True
        if c.status == "True" and c.type in ("Failed", "FailureTarget"):
            return True, False
    return False, False


# ---------------------------------------------------------------------------- status.admission
def without_nulls(v: Any) -> Any:
    """A body without explicit nulls (models built in code set optional fields to None; the CRD schema
    rejects null where it is not nullable)."""
    if isinstance(v, dict):
        return {k: without_nulls(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [without_nulls(x) for x in v]
    return v


def admission_json(admission: Admission | None) -> dict[str, Any] | None:
    """``status.admission`` as written (JSON without nulls): what the ledger keeps with the admission
    and what a Workload's status is compared with."""
    return None if admission is None else without_nulls(admission.to_dict())


def plan_summary(admission: Admission, limit: int = 8) -> str:
    """``main[0] -> node-a (gpu-0, gpu-1); main[1] -> node-b (gpu-0)`` (the first ``limit`` pods)."""
    parts: list[str] = []
    total = 0
    for a in admission.pod_set_assignments:
        for p in a.placements or []:
            total += 1
            if len(parts) >= limit:
                continue
            devs = [d.device for c in p.claims or [] for d in c.devices]
            parts.append(f"{a.name}[{p.index}] -> {p.node_name}" + (f" ({', '.join(devs)})" if devs else ""))
    if total > limit:
        parts.append(f"... {total - limit} more")
    return "; ".join(parts) if parts else "no pods placed"


# ---------------------------------------------------------------------------- ledger
class DeviceIndex:
    """Device class and memory of devices, for the ledger's plan rows (reports in GPU-hours)."""

    def __init__(self, slices: Iterable[ResourceSlice]) -> None:
        self.memory: dict[tuple[str, str, str], Quantity] = {}
        for s in slices:
            for d in s.spec.devices:
                cap = (d.capacity or {}).get("memory")
                if cap is not None:
                    self.memory[(s.spec.driver, s.spec.pool.name, d.name)] = cap.value


def _request_classes(spec: ResourceClaimSpec | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for r in (spec.devices.requests if spec else None) or []:
        if r.exactly is not None:
            out[r.name] = r.exactly.device_class_name
        for sub in r.first_available or []:
            out[f"{r.name}/{sub.name}"] = sub.device_class_name
    return out


def ledger_request(
    uid: str,
    adm: CycleAdmission,
    admission: Admission,
    claim_specs: Mapping[str, ResourceClaimSpec],
    devices: DeviceIndex,
) -> AdmissionRequest:
    """The ledger record of an admission: charges per flavor and resource, and the plan per pod.
    ``claim_specs`` maps a pod claim name (``<podset>/<claim>``) to its spec, for the device class."""
    charges = tuple(
        Charge(flavor, resource, quantity(v))
        for (flavor, resource), v in sorted(adm.assignment.usage.items())
        if v
    )
    pods = ledger_pods(admission, claim_specs, devices)
    flavors: dict[str, str] = {}
    for a in admission.pod_set_assignments:
        flavors.update(a.flavors or {})
    return AdmissionRequest(uid, adm.cluster_queue, charges, pods, flavors, admission_json(admission))


def ledger_pods(
    admission: Admission, claim_specs: Mapping[str, ResourceClaimSpec], devices: DeviceIndex
) -> tuple[PodPlan, ...]:
    """The ledger's plan rows of an admission: per pod its node and devices (class, memory). The
    ledger numbers the pods of a workload across its pod sets (placement indexes count per pod set):
    the first pod set's pods keep their index, each next pod set's follow the highest so far."""
    pods: list[PodPlan] = []
    offset = 0
    for a in admission.pod_set_assignments:
        base = offset
        for p in a.placements or []:
            offset = max(offset, base + p.index + 1)
            planned: list[PlannedDevice] = []
            seen: set[str] = set()
            for c in p.claims or []:
                classes = _request_classes(claim_specs.get(f"{a.name}/{c.name}"))
                for d in c.devices:
                    if d.admin_access:
                        continue
                    key = f"{d.driver}/{d.pool}/{d.device}"
                    if key in seen:
                        continue
                    seen.add(key)
                    planned.append(
                        PlannedDevice(
                            key,
                            classes.get(d.request, ""),
                            devices.memory.get((d.driver, d.pool, d.device)),
                        )
                    )
            pods.append(PodPlan(base + p.index, p.node_name, tuple(planned), pod_set=a.name))
    return tuple(pods)


# ---------------------------------------------------------------------------- claims
def allocation_for(
    spec: ResourceClaimSpec,
    claim: ClaimPlacement,
    node: str,
    classes: Mapping[str, DeviceClass],
) -> dict[str, Any]:
    """The ``status.allocation`` to write into a claim for its planned devices: the results, the
    configuration (FromClass for every request that got a device, then FromClaim) and a node selector
    pinning the planned node (node-local devices), as kube-scheduler's DRA plugin writes it."""
    results: list[dict[str, Any]] = []
    for d in claim.devices:
        r: dict[str, Any] = {"request": d.request, "driver": d.driver, "pool": d.pool, "device": d.device}
        if d.admin_access:
            r["adminAccess"] = True
        if d.share_id:
            r["shareID"] = d.share_id
        if d.consumed_capacity:
            r["consumedCapacity"] = {k: str(v) for k, v in d.consumed_capacity.items()}
        results.append(r)
    req_classes = _request_classes(spec)
    config: list[dict[str, Any]] = []
    for request in dict.fromkeys(d.request for d in claim.devices):
        dc = classes.get(req_classes.get(request, ""))
        for cc in (dc.spec.config if dc is not None else None) or []:
            if cc.opaque is not None:
                config.append({"source": "FromClass", "requests": [request], "opaque": cc.opaque.to_dict()})
    for c in spec.devices.config or []:
        if c.opaque is not None:
            entry: dict[str, Any] = {"source": "FromClaim", "opaque": c.opaque.to_dict()}
            if c.requests:
                entry["requests"] = list(c.requests)
            config.append(entry)
    devices: dict[str, Any] = {"results": results}
    if config:
        devices["config"] = config
    return {
        "devices": devices,
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        },
    }


def pod_claim_name(pod: Pod, claim: str) -> str | None:
    """The ResourceClaim generated for a pod's template claim (``status.resourceClaimStatuses``)."""
    extra = pod.status.model_extra or {}
    for s in extra.get("resourceClaimStatuses") or []:
        if isinstance(s, dict) and s.get("name") == claim:
            name = s.get("resourceClaimName")
            return str(name) if name else None
    return None


def needs_gate(admission: Admission, pod_set: str, full: bool, template_claims: bool) -> bool:
    """Whether the pods of a pod set must be held by the placement gate: their planned nodes differ
    (each pod gets its own node selector), or claims are generated per pod and must get their planned
    allocation before kube-scheduler sees the pod (Full mode)."""
    a = next((x for x in admission.pod_set_assignments if x.name == pod_set), None)
    if a is None:
        return False
    nodes = {p.node_name for p in a.placements or []}
    return len(nodes) > 1 or (full and template_claims and bool(a.placements))
