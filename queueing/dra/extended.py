"""Extended resources backed by DRA (Kubernetes ``DRAExtendedResource``, on by default since 1.36).

A DeviceClass may name an extended resource (``spec.extendedResourceName``, e.g. ``nvidia.com/gpu``);
every class also backs the implicit name ``deviceclass.resource.kubernetes.io/<class>``. A pod that
requests such a resource on a node whose allocatable does *not* list it (absent or 0) gets one
implicit ResourceClaim for all those requests, created by kube-scheduler when it binds the pod. On a
node that does list it (a device plugin publishes it), the request is an ordinary node resource.

How upstream builds the claim (``pkg/scheduler/framework/plugins/dynamicresources``), and we too:

* Pod-level requests (containers summed, init containers as a maximum; ``limits`` stand in for
  missing ``requests``) decide whether the pod uses a mapped resource at all (non-zero).
* One ``exactly`` request per (container, resource), named ``container-<i>-request-<j>``: ``i`` is
  the container's index in ``initContainers + containers``, ``j`` the index of the resource among
  the container's sorted request names; count = the container's quantity.
* Long-lived containers (regular containers and sidecars, i.e. init containers with
  ``restartPolicy: Always``) each get their own request. A plain init container first reuses the
  requests of long-lived containers at later indices (it runs before them); only the largest
  remainder over all plain init containers becomes a request.
* Requests are sorted by name. The claim belongs to the pod (controller ownerReference), carries the
  annotation ``resource.kubernetes.io/extended-resource-claim: "true"``, and gets a generated name
  upstream (``<pod>-extended-resources-xxxxx``); we name it ``<pod>-extended-resources``.
* When two classes name the same extended resource, the class created last wins; at equal creation
  times the lexicographically first name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from queueing.api.core import Container, Pod, PodSpec
from queueing.api.resource import DeviceClass, ResourceClaim
from queueing.dra.errors import AllocationError

__all__ = [
    "DEVICE_CLASS_PREFIX",
    "EXTENDED_RESOURCE_CLAIM_ANNOTATION",
    "EXTENDED_RESOURCE_CLAIM_SUFFIX",
    "ExtendedRequestMapping",
    "ImplicitClaim",
    "extended_resource_classes",
    "implicit_claim",
    "implicit_claim_name",
    "is_dra_extended_resource_name",
    "is_extended_resource_claim",
    "pod_extended_requests",
    "spec_extended_requests",
]

DEVICE_CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"
EXTENDED_RESOURCE_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
EXTENDED_RESOURCE_CLAIM_SUFFIX = "-extended-resources"


def is_dra_extended_resource_name(name: str) -> bool:
    """An extended resource name (``domain/name`` outside ``*kubernetes.io/``, not ``requests.*``) or
    an implicit class name ``deviceclass.resource.kubernetes.io/<class>``."""
    if name.startswith(DEVICE_CLASS_PREFIX):
        return True
    if "/" not in name or name.startswith("requests."):
        return False
    domain = name.split("/", 1)[0]
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


def extended_resource_classes(classes: Iterable[DeviceClass]) -> dict[str, str]:
    """Extended resource name -> DeviceClass name, as kube-scheduler resolves it."""
    best: dict[str, DeviceClass] = {}

    def better(a: DeviceClass, b: DeviceClass) -> bool:  # does a win over b?
        ta, tb = a.metadata.creation_timestamp or "", b.metadata.creation_timestamp or ""
        return ta > tb or (ta == tb and a.name < b.name)

    for c in classes:
        names = [DEVICE_CLASS_PREFIX + c.name]
        if c.spec.extended_resource_name:
            names.append(c.spec.extended_resource_name)
        for n in names:
            cur = best.get(n)
            if cur is None or better(c, cur):
                best[n] = c
    return {n: c.name for n, c in sorted(best.items())}


def _container_requests(c: Container) -> dict[str, int | None]:
    """The container's effective requests of extended resources as integers (None: not an integer)."""
    out: dict[str, int | None] = {}
    for name, q in c.requests.items():
        v = q.value
        out[name] = v.numerator if v.denominator == 1 else None
    return out


def _is_sidecar(c: Container) -> bool:
    extra = c.model_extra or {}
    return extra.get("restartPolicy", extra.get("restart_policy")) == "Always"


def pod_extended_requests(pod: Pod, mapping: Mapping[str, str]) -> dict[str, int]:
    """Pod-level requests of resources that a DeviceClass backs (non-zero only), sorted by name.

    Raises ``AllocationError`` for a non-integer quantity (the API server rejects those)."""
    return spec_extended_requests(pod.spec, mapping, f"Pod {pod.key}")


def spec_extended_requests(spec: PodSpec, mapping: Mapping[str, str], obj: str) -> dict[str, int]:
    """``pod_extended_requests`` of a pod of this spec; ``obj`` names the pod in an
    ``AllocationError``."""
    total: dict[str, int] = {}
    init_max: dict[str, int] = {}
    containers = [(f"spec.initContainers[{i}]", c, True) for i, c in enumerate(spec.init_containers or [])]
    containers += [(f"spec.containers[{i}]", c, False) for i, c in enumerate(spec.containers)]
    for path, c, is_init in containers:
        for name, v in _container_requests(c).items():
            if name not in mapping:
                continue
            if v is None:
                raise AllocationError(obj, f"{path}.resources.requests[{name}]", "must be an integer")
            if is_init and not _is_sidecar(c):
                init_max[name] = max(init_max.get(name, 0), v)
            else:
                total[name] = total.get(name, 0) + v
    for name, v in init_max.items():
        total[name] = max(total.get(name, 0), v)
    return {k: v for k, v in sorted(total.items()) if v > 0}


@dataclass(frozen=True, slots=True)
class ExtendedRequestMapping:
    """Which request of the implicit claim serves a container's extended resource (as in
    ``pod.status.extendedResourceClaimStatus.requestMappings``)."""

    container_name: str
    resource_name: str
    request_name: str

    def to_dict(self) -> dict[str, str]:
        return {
            "containerName": self.container_name,
            "resourceName": self.resource_name,
            "requestName": self.request_name,
        }


@dataclass(frozen=True, slots=True)
class ImplicitClaim:
    claim: ResourceClaim
    mappings: tuple[ExtendedRequestMapping, ...]
    resources: tuple[str, ...]  # the extended resource names it serves


def implicit_claim_name(pod: Pod) -> str:
    return f"{pod.name}{EXTENDED_RESOURCE_CLAIM_SUFFIX}"


def is_extended_resource_claim(claim: ResourceClaim) -> bool:
    """A claim kube-scheduler creates for a pod's extended resources (our controller never writes it)."""
    return claim.annotations.get(EXTENDED_RESOURCE_CLAIM_ANNOTATION) == "true"


def implicit_claim(pod: Pod, resources: Iterable[str], mapping: Mapping[str, str]) -> ImplicitClaim | None:
    """The implicit claim for the given extended resources of the pod (those served through DRA on
    the chosen node), or None when no container requests any of them."""
    wanted = sorted(set(resources))
    init = list(pod.spec.init_containers or [])
    containers = init + list(pod.spec.containers)
    n_init = len(init)
    requests: list[tuple[str, str, int]] = []  # name, class, count
    mappings: list[ExtendedRequestMapping] = []

    def own_request(i: int, c: Container, res: str) -> tuple[str, int] | None:
        reqs = _container_requests(c)
        v = reqs.get(res)
        if not v:
            return None
        j = sorted(reqs).index(res)
        return f"container-{i}-request-{j}", v

    for res in wanted:
        cls = mapping.get(res)
        if cls is None:
            continue
        long_lived: dict[int, tuple[str, int]] = {}
        long_maps: list[ExtendedRequestMapping] = []
        for i, c in enumerate(containers):
            if i < n_init and not _is_sidecar(c):
                continue
            got = own_request(i, c, res)
            if got is not None:
                long_lived[i] = got
                long_maps.append(ExtendedRequestMapping(c.name, res, got[0]))
        short_best: tuple[str, int] | None = None
        short_names: set[str] = set()
        short_maps: list[ExtendedRequestMapping] = []
        for i, c in enumerate(containers[:n_init]):
            if _is_sidecar(c):
                continue
            got = own_request(i, c, res)
            if got is None:
                continue
            need = got[1]
            covered = 0
            extra: tuple[str, int] | None = None
            for k in sorted(long_lived):
                if k < i:
                    continue
                covered += long_lived[k][1]
                short_maps.append(ExtendedRequestMapping(c.name, res, long_lived[k][0]))
                if covered >= need:
                    break
            if covered < need:
                extra = (got[0], need - covered)
                short_maps.append(ExtendedRequestMapping(c.name, res, got[0]))
                short_names.add(got[0])
                if short_best is None or short_best[1] < extra[1]:
                    short_best = extra
        if short_best is not None and len(short_names) > 1:
            short_maps = [
                ExtendedRequestMapping(m.container_name, m.resource_name, short_best[0])
                if m.request_name in short_names
                else m
                for m in short_maps
            ]
        if short_best is not None:
            requests.append((short_best[0], cls, short_best[1]))
        requests.extend((name, cls, n) for name, n in long_lived.values())
        mappings.extend(long_maps)
        mappings.extend(short_maps)
    if not requests:
        return None
    requests.sort(key=lambda r: r[0])
    ns = pod.namespace or "default"
    owner = {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": pod.name,
        "uid": pod.metadata.uid or "",
        "controller": True,
    }
    claim = ResourceClaim.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "name": implicit_claim_name(pod),
                "namespace": ns,
                "annotations": {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"},
                "ownerReferences": [owner],
            },
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": name,
                            "exactly": {"deviceClassName": cls, "allocationMode": "ExactCount", "count": n},
                        }
                        for name, cls, n in requests
                    ]
                }
            },
        }
    )
    return ImplicitClaim(claim, tuple(mappings), tuple(r for r in wanted if r in mapping))
