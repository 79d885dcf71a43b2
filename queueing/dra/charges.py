"""What a placed gang charges to quota, per workload: devices per DeviceClass and their capacity.

Resource names are the ones ClusterQueues cover: ``<class>`` counts devices of that DeviceClass,
``<class>/<capacity>`` sums a capacity of those devices (the device's full value when it is allocated
exclusively; the ``consumedCapacity`` on a device with ``allowMultipleAllocations``). adminAccess
results take nothing and charge nothing.

Every claim is charged at most once, however many containers or pods use it:

* a claim from a ResourceClaimTemplate and the implicit claim for extended resources belong to their
  pod and are charged to the pod's workload;
* a referenced ResourceClaim (``resourceClaimName``) is charged to the workload that owns it (its
  ownerReferences) when every pod using it belongs to that workload; without an owner, to the one
  workload whose pods use it; a claim used by pods of more than one workload (or owned by one workload
  and used by another) is charged to none and listed in ``GangCharges.unowned``, so the caller can
  report it. Users are the gang's pods, the ClusterState's pods that reference the claim, and pods in
  the claim's ``status.reservedFor`` that one of those lists knows.

Pure: the caller says which workload a pod belongs to (``workload_of``); by default the pod's
controller ownerReference (``<namespace>/<Kind>/<name>``), then the pod-group label
(``<namespace>/pod-group/<value>``), then the pod itself (``<namespace>/Pod/<name>``). A claim's
owner reference maps the same way (an owning Pod maps to that pod's workload when the pod is known).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

from queueing.api.base import OwnerReference
from queueing.api.core import Pod
from queueing.api.resource import ResourceClaim
from queueing.dra.extended import is_extended_resource_claim
from queueing.dra.gang import ClusterState, GangResult
from queueing.dra.inventory import Pick

__all__ = [
    "POD_GROUP_LABEL",
    "ClaimCharge",
    "GangCharges",
    "charge_gang",
    "charge_own_claims",
    "claim_charges",
    "default_workload_of",
]

POD_GROUP_LABEL = "queueing.dra.io/pod-group"
ClaimSource = Literal["template", "extended-resource", "shared"]
_ONE = Fraction(1)


def default_workload_of(pod: Pod) -> str:
    ns = pod.namespace or "default"
    for ref in pod.metadata.owner_references or []:
        if ref.controller:
            return f"{ns}/{ref.kind}/{ref.name}"
    group = pod.labels.get(POD_GROUP_LABEL)
    if group:
        return f"{ns}/pod-group/{group}"
    return f"{ns}/Pod/{pod.name}"


@dataclass(frozen=True, slots=True)
class ClaimCharge:
    claim: str  # namespace/name
    source: ClaimSource
    charges: Mapping[str, Fraction]  # "<class>" -> devices, "<class>/<capacity>" -> amount
    devices: tuple[tuple[str, str, str, str], ...]  # (class, driver, pool, device), adminAccess excluded
    users: tuple[str, ...]  # workloads whose pods use the claim
    owner: str | None  # workload owning the claim (ownerReferences / the pod of a per-pod claim)
    charged_to: str | None  # None: shared across workloads, charged to none
    new: bool  # allocated by this placement (False: allocated before)


@dataclass(frozen=True, slots=True)
class GangCharges:
    workloads: Mapping[str, Mapping[str, Fraction]]  # workload -> resource -> amount
    claims: tuple[ClaimCharge, ...] = field(default=())

    @property
    def unowned(self) -> tuple[ClaimCharge, ...]:
        """Claims shared across workloads: charged to none, to be reported."""
        return tuple(c for c in self.claims if c.charged_to is None)

    def for_workload(self, workload: str) -> dict[str, Fraction]:
        return dict(self.workloads.get(workload, {}))


def claim_charges(
    claim: ResourceClaim, picks: Sequence[Pick]
) -> tuple[dict[str, Fraction], tuple[tuple[str, str, str, str], ...]]:
    """Charges of one allocated claim: devices per DeviceClass and their capacity."""
    return _charges(_request_classes(claim), picks)


def _request_classes(claim: ResourceClaim) -> dict[str, str]:
    """Request (``req`` or ``req/sub``) -> DeviceClass name."""
    classes: dict[str, str] = {}
    for r in claim.spec.devices.requests or []:
        if r.exactly is not None:
            classes[r.name] = r.exactly.device_class_name
        for sub in r.first_available or []:
            classes[f"{r.name}/{sub.name}"] = sub.device_class_name
    return classes


def _charges(
    classes: Mapping[str, str], picks: Sequence[Pick]
) -> tuple[dict[str, Fraction], tuple[tuple[str, str, str, str], ...]]:
    """Devices per class, and per ``<class>/<capacity>`` the device's full value when it is taken
    exclusively or the consumed capacity on a device with multiple allocations, summed over the
    picks (resources in the order they first appear). Sums are exact: devices counted, amounts
    summed as numerators per denominator, they are what adding pick by pick gives."""
    order: dict[str, None] = {}  # resources as they first appear
    counts: dict[str, int] = {}  # class -> devices
    amounts: dict[str, dict[int, int]] = {}  # "<class>/<capacity>" -> denominator -> numerators
    devices: list[tuple[str, str, str, str]] = []
    for p in picks:
        if p.admin_access:
            continue
        cls = classes.get(p.request) or classes.get(p.request.split("/", 1)[0], "")
        dev = p.device
        devices.append((cls, dev.key[0], dev.key[1], dev.key[2]))
        n = counts.get(cls)
        if n is None:
            order[cls] = None
            counts[cls] = 1
        else:
            counts[cls] = n + 1
        if p.capacity:  # consumable capacity on a shared device
            added = [
                (dev.capacity[fq][0] if fq in dev.capacity else fq.rsplit("/", 1)[-1], amount)
                for fq, amount in p.capacity
            ]
        elif not dev.multi:
            whole = dev.whole_charges.get(cls)
            if whole is None:
                whole = dev.whole_charges[cls] = tuple(
                    (f"{cls}/{published}", cap.value.value.denominator, cap.value.value.numerator)
                    for published, cap in dev.capacity.values()
                )
            for k, d, num in whole:
                by_den = amounts.get(k)
                if by_den is None:
                    order[k] = None
                    amounts[k] = {d: num}
                else:
                    by_den[d] = by_den.get(d, 0) + num
            continue
        else:
            continue
        for published, v in added:
            k = f"{cls}/{published}"
            by_den = amounts.get(k)
            if by_den is None:
                order[k] = None
                amounts[k] = {v.denominator: v.numerator}
            else:
                d = v.denominator
                by_den[d] = by_den.get(d, 0) + v.numerator
    out: dict[str, Fraction] = {}
    for k in order:
        n = counts.get(k)
        parts = amounts.get(k)
        if parts is None:
            out[k] = Fraction(n or 0)
            continue
        if len(parts) == 1:  # one denominator (the usual case): the sum is that fraction
            ((den, num),) = parts.items()
            total = Fraction(num, den)
        else:
            total = sum((Fraction(num, den) for den, num in parts.items()), Fraction(0))
        out[k] = total if n is None else n + total  # (a class named like a capacity)
    return out, tuple(devices)


def charge_gang(
    result: GangResult,
    state: ClusterState,
    pods: Sequence[Pod],
    workload_of: Callable[[Pod], str] | Mapping[str, str] | None = None,
) -> GangCharges:
    """Charges of a placed gang per workload (see the module docstring). ``pods`` are the gang's pods
    as given to ``place_gang``; ``workload_of`` maps a pod (or a pod key) to its workload."""
    known_pods: dict[str, Pod] | None = None

    def known() -> dict[str, Pod]:  # only needed for shared claims: built on first use
        nonlocal known_pods
        if known_pods is None:
            known_pods = {p.key: p for p in state.pods.values()}
            known_pods.update({p.key: p for p in pods})
        return known_pods

    def wl(p: Pod) -> str:
        if workload_of is None:
            return default_workload_of(p)
        if callable(workload_of):
            return workload_of(p)
        return workload_of.get(p.key) or default_workload_of(p)

    def owner_of(claim: ResourceClaim) -> str | None:
        ns = claim.namespace or "default"
        refs: list[OwnerReference] = claim.metadata.owner_references or []
        ref = next((r for r in refs if r.controller), refs[0] if refs else None)
        if ref is None:
            return None
        if ref.kind == "Pod" and f"{ns}/{ref.name}" in known():
            return wl(known()[f"{ns}/{ref.name}"])
        return f"{ns}/{ref.kind}/{ref.name}"

    def users_of(key: str, claim: ResourceClaim) -> set[str]:
        ns, _, name = key.partition("/")
        users: set[str] = set()
        for p in known().values():
            if (p.namespace or "default") != ns:
                continue
            if any(prc.resource_claim_name == name for prc in p.spec.resource_claims or []):
                users.add(wl(p))
        for r in claim.status.reserved_for or []:
            pk = f"{ns}/{r.get('name')}"
            if r.get("resource", "pods") == "pods" and pk in known():
                users.add(wl(known()[pk]))
        return users

    by_key = {p.key: p for p in pods}
    # id(claim spec) -> (spec, its request classes): the claims of a pod set share their spec
    spec_classes: dict[int, tuple[object, dict[str, str]]] = {}

    def classes_of(claim: ResourceClaim) -> dict[str, str]:
        hit = spec_classes.get(id(claim.spec))
        if hit is None or hit[0] is not claim.spec:
            hit = spec_classes[id(claim.spec)] = (claim.spec, _request_classes(claim))
        return hit[1]

    totals: dict[str, dict[str, Fraction]] = {}
    out: list[ClaimCharge] = []
    seen: set[str] = set()

    def add(charge: ClaimCharge) -> None:
        out.append(charge)
        if charge.charged_to is not None:
            t = totals.setdefault(charge.charged_to, {})
            for k, v in charge.charges.items():
                have = t.get(k)
                t[k] = v if have is None else have + v

    for pl in result.placements:
        pod = by_key.get(pl.pod)
        if pod is None:
            raise ValueError(f"pod {pl.pod} of the placement is not among the given pods")
        w = wl(pod)
        totals.setdefault(w, {})
        shared = set(pl.shared)
        for ca in pl.claims:
            ckey = ca.claim.key
            if ckey in shared:
                continue  # charged below, once
            charges, devices = _charges(classes_of(ca.claim), ca.picks)
            src: ClaimSource = "extended-resource" if is_extended_resource_claim(ca.claim) else "template"
            seen.add(ckey)
            add(ClaimCharge(ckey, src, charges, devices, (w,), w, w, True))
        if not pl.shared:
            continue
        new_shared = {ca.claim.key: ca for ca in pl.claims if ca.claim.key in shared}
        for key in pl.shared:
            if key in seen:
                continue
            seen.add(key)
            if key in new_shared:
                ca = new_shared[key]
                claim, picks, new = ca.claim, list(ca.picks), True
            else:
                txn_ca = result.transaction.shared.get(key) if result.transaction is not None else None
                if txn_ca is not None:
                    claim, picks, new = txn_ca.claim, list(txn_ca.picks), True
                else:
                    claim = state.claims[key]
                    picks, new = state.inventory.picks_of(claim), False
            charges, devices = claim_charges(claim, picks)
            users = users_of(key, claim)
            owner = owner_of(claim)
            if owner is not None:
                charged = owner if users <= {owner} else None
            else:
                charged = next(iter(users)) if len(users) == 1 else None
            add(ClaimCharge(key, "shared", charges, devices, tuple(sorted(users)), owner, charged, new))
    return GangCharges({w: dict(sorted(t.items())) for w, t in sorted(totals.items())}, tuple(out))


def charge_own_claims(
    claims: Iterable[tuple[ResourceClaim, Sequence[Pick]]],
) -> tuple[dict[str, Fraction], dict[tuple[str, str, str], str]]:
    """What ``charge_gang`` charges a workload for its pods' own claims (from templates) placed with
    these picks, when its pods use no other claims: the workload's sums by resource (sorted, as
    ``GangCharges.for_workload``), and per device the DeviceClass it was allocated through (as
    listed in ``ClaimCharge.devices``, in that order). A claim given stands for the claims of that
    spec (only its request classes matter) of one or more pods, with all their picks in order:
    the sums are exact, so they do not depend on how the picks are grouped."""
    spec_classes: dict[int, tuple[object, dict[str, str]]] = {}
    total: dict[str, Fraction] = {}
    devices: dict[tuple[str, str, str], str] = {}
    for claim, picks in claims:
        hit = spec_classes.get(id(claim.spec))
        if hit is None or hit[0] is not claim.spec:
            hit = spec_classes[id(claim.spec)] = (claim.spec, _request_classes(claim))
        charges, devs = _charges(hit[1], picks)
        for k, v in charges.items():
            have = total.get(k)
            total[k] = v if have is None else have + v
        for d in devs:
            devices[(d[1], d[2], d[3])] = d[0]
    return dict(sorted(total.items())), devices
