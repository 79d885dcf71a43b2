"""``queueing allocate``: would these ResourceClaims fit, and on which devices? (resource.k8s.io/v1)

Contract (other checks depend on it):
    queueing allocate -f FILE [-f FILE ...] [--node NAME] [-o json|yaml] [--feature-gates Name=bool,...]

Reads Node, ResourceSlice, DeviceClass and ResourceClaim objects (YAML or JSON, multi-document,
``kind: List`` expanded; other kinds are ignored with a warning). Claims with ``status.allocation``
are in use; the others are allocated together for one pod on one node, all or nothing. Candidate
nodes: ``--node`` or every Node plus every nodeName a slice names, by name; the first fit wins.

Pods too: Pod (and Job, as ``parallelism`` pods ``<job>-<i>`` of its template) and
ResourceClaimTemplate objects are read as well. Pods with ``spec.nodeName`` run there (they use node
allocatable); the others are placed together as a gang (all or nothing) with their claims (from
templates: one per pod, ``<pod>-<podClaimName>``; referenced claims: shared, allocated once) and,
for extended resources a DeviceClass backs (``spec.extendedResourceName`` or
``deviceclass.resource.kubernetes.io/<class>``) on nodes that do not publish them, an implicit claim
``<pod>-extended-resources`` (annotation ``resource.kubernetes.io/extended-resource-claim``). The JSON
then also has ``pods``: ``[{namespace, name, node, claims: [names], extendedResourceClaimStatus}]``.
Without pods to place (or when no pod references a claim or requests an extended resource: those
pods are ignored with a warning) the output is exactly as above.

Exit 0: allocated; 1: cannot be allocated; 2: invalid input or an error that aborts allocation,
with one line on stderr naming the object and the field.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import ValidationError

from queueing.api.base import KubeObject
from queueing.api.core import FINISHED_POD_PHASES, Job, Node, Pod
from queueing.api.registry import format_errors
from queueing.api.resource import DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice
from queueing.manifests import ManifestError, read_documents

if TYPE_CHECKING:
    from queueing.dra.features import Features

HELP = "Allocate DRA devices for ResourceClaims on one node, as the Kubernetes scheduler would."

KINDS: dict[str, type[KubeObject]] = {
    "Node": Node,
    "ResourceSlice": ResourceSlice,
    "DeviceClass": DeviceClass,
    "ResourceClaim": ResourceClaim,
    "ResourceClaimTemplate": ResourceClaimTemplate,
    "Pod": Pod,
    "Job": Job,
}


class InputError(Exception):
    """Bad input: one line naming the object (or file) and the field."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-f",
        "--filename",
        dest="files",
        action="append",
        required=True,
        metavar="FILE",
        help="YAML or JSON file with Nodes, ResourceSlices, DeviceClasses, ResourceClaims "
        "(and optionally ResourceClaimTemplates, Pods, Jobs) (repeatable; - is stdin)",
    )
    parser.add_argument("--node", metavar="NAME", help="only try this node")
    parser.add_argument("-o", "--output", choices=("json", "yaml"), default="json", help="output format")
    parser.add_argument(
        "--feature-gates",
        default="",
        metavar="Name=bool,...",
        help="DRA feature gates (DRAPrioritizedList, DRAAdminAccess, DRAPartitionableDevices, "
        "DRAConsumableCapacity, DRADeviceTaints, DRADeviceBindingConditions, DRAExtendedResource); "
        "all on by default",
    )


def load_objects(paths: list[str]) -> tuple[list[KubeObject], list[str]]:
    """Parse all objects; returns (objects, warnings). Raises InputError on bad input."""
    from queueing.dra.cel_cost import selector_problems

    objects: list[KubeObject] = []
    warnings: list[str] = []
    try:
        documents = read_documents(paths)
    except ManifestError as e:
        raise InputError(str(e)) from None
    for obj, where in documents:
        kind = obj.get("kind")
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        name = meta.get("name") if isinstance(meta, dict) else None
        ns = meta.get("namespace") if isinstance(meta, dict) else None
        ref = f"{kind or '<no kind>'} {f'{ns}/' if ns else ''}{name or '<no name>'}"
        model = KINDS.get(kind) if isinstance(kind, str) else None
        if model is None:
            warnings.append(f"warning: {where}: ignoring {ref} (allocate reads {', '.join(KINDS)})")
            continue
        try:
            parsed = model.model_validate(obj)
        except ValidationError as e:
            raise InputError(f"{ref}: {format_errors(e)[0]}") from None
        if not parsed.name:
            raise InputError(f"{ref}: metadata.name: required")
        problems = selector_problems(parsed)  # what the API server refuses: compile errors, cost
        if problems:
            raise InputError(f"{ref}: {problems[0]}")
        objects.append(parsed)
    return objects, warnings


def _emit(result: dict[str, Any], fmt: str) -> None:
    if fmt == "yaml":
        sys.stdout.write(yaml.safe_dump(result, sort_keys=False))
    else:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")


def run(args: argparse.Namespace) -> int:
    # the cores are imported here so `queueing --help` stays light
    from queueing.dra.allocator import Allocator
    from queueing.dra.errors import AllocationError
    from queueing.dra.features import Features
    from queueing.dra.inventory import Inventory

    try:
        features = Features.parse(args.feature_gates or "")
    except ValueError as e:
        print(f"error: --feature-gates: {e}", file=sys.stderr)
        return 2
    try:
        objects, warnings = load_objects(args.files)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for w in warnings:
        print(w, file=sys.stderr)

    nodes = {o.name: o for o in objects if isinstance(o, Node)}
    slices = [o for o in objects if isinstance(o, ResourceSlice)]
    classes = {o.name: o for o in objects if isinstance(o, DeviceClass)}
    claims = [o for o in objects if isinstance(o, ResourceClaim)]
    in_use = [c for c in claims if c.status.allocation is not None]
    pending = [c for c in claims if c.status.allocation is None]
    seen: set[str] = set()
    for c in claims:
        if c.key in seen:
            print(f"error: ResourceClaim {c.key}: metadata.name: given twice", file=sys.stderr)
            return 2
        seen.add(c.key)
    templates = [o for o in objects if isinstance(o, ResourceClaimTemplate)]
    all_pods = [o for o in objects if isinstance(o, Pod)]
    for job in (o for o in objects if isinstance(o, Job)):
        all_pods.extend(_job_pods(job))
    to_place = [p for p in all_pods if not p.spec.node_name and p.status.phase not in FINISHED_POD_PHASES]
    if to_place and not any(_uses_devices(p) for p in to_place):
        for p in to_place:  # nothing for the allocator to decide: the claim-only contract applies
            print(
                f"warning: ignoring Pod {p.key}: it uses no ResourceClaims and no extended resources",
                file=sys.stderr,
            )
        to_place = []
    if to_place:
        return _place_pods(args, features, nodes, slices, classes, claims, templates, all_pods, to_place)

    try:
        inventory = Inventory(slices, partitionable_devices=features.partitionable_devices)
        allocator = Allocator(inventory, classes, features=features)
        if args.node:
            candidates: list[Node | None] = [
                nodes.get(args.node) or Node.model_validate({"metadata": {"name": args.node}})
            ]
        else:
            names = sorted(set(nodes) | set(inventory.node_names()))
            candidates = [nodes.get(n) or Node.model_validate({"metadata": {"name": n}}) for n in names]
            if not candidates:
                candidates = [None]  # only network-attached devices: no node to name
        usage = inventory.usage(in_use)
        prepared = allocator.prepare(pending)
        outcome = allocator.allocate(prepared, candidates, usage)
    except AllocationError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    if outcome.allocated:
        result: dict[str, Any] = {
            "allocated": True,
            "node": outcome.node,
            "claims": [
                {"namespace": ca.namespace, "name": ca.name, "allocation": ca.allocation.to_dict()}
                for ca in outcome.claims
            ],
        }
        _emit(result, args.output)
        return 0
    _emit({"allocated": False, "node": None, "claims": [], "reason": outcome.reason()}, args.output)
    return 1


def _uses_devices(pod: Pod) -> bool:
    """The pod references claims or requests extended resources (``domain/name``)."""
    from queueing.dra.extended import is_dra_extended_resource_name

    if pod.spec.resource_claims:
        return True
    cs = list(pod.spec.containers) + list(pod.spec.init_containers or [])
    return any(is_dra_extended_resource_name(r) for c in cs for r in c.requests)


def _job_pods(job: Job) -> list[Pod]:
    """The pods a Job would start at once: ``parallelism`` (at most ``completions``) copies of its
    template, named ``<job>-<index>``."""
    n = job.spec.parallelism if job.spec.parallelism is not None else 1
    if job.spec.completions is not None:
        n = min(n, job.spec.completions)
    tmpl = job.spec.template
    meta = dict(tmpl.metadata or {})
    out = []
    for i in range(n):
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "labels": meta.get("labels") or {},
                "annotations": meta.get("annotations") or {},
                "name": f"{job.name}-{i}",
                "namespace": job.namespace or "default",
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": job.name,
                        "uid": job.metadata.uid or "",
                        "controller": True,
                    }
                ],
            },
            "spec": tmpl.spec.to_dict(),
        }
        out.append(Pod.model_validate(body))
    return out


def _place_pods(
    args: argparse.Namespace,
    features: Features,
    nodes: dict[str, Node],
    slices: list[ResourceSlice],
    classes: dict[str, DeviceClass],
    claims: list[ResourceClaim],
    templates: list[ResourceClaimTemplate],
    all_pods: list[Pod],
    to_place: list[Pod],
) -> int:
    from queueing.dra.errors import AllocationError
    from queueing.dra.gang import ClusterState, place_gang
    from queueing.dra.inventory import Inventory

    keys: set[str] = set()
    for p in all_pods:
        if p.key in keys:
            print(f"error: Pod {p.key}: metadata.name: given twice", file=sys.stderr)
            return 2
        keys.add(p.key)
    referenced = {
        f"{p.namespace or 'default'}/{prc.resource_claim_name}"
        for p in all_pods
        for prc in p.spec.resource_claims or []
        if prc.resource_claim_name
    }
    for c in claims:
        if c.status.allocation is None and c.key not in referenced:
            print(f"warning: ResourceClaim {c.key}: not used by any pod; not allocated", file=sys.stderr)
    running = [p for p in all_pods if p.spec.node_name]
    try:
        if args.node:
            node_list = [nodes.get(args.node) or Node.model_validate({"metadata": {"name": args.node}})]
        else:
            inv = Inventory(slices, partitionable_devices=features.partitionable_devices)
            names = sorted(set(nodes) | set(inv.node_names()))
            node_list = [nodes.get(n) or Node.model_validate({"metadata": {"name": n}}) for n in names]
        state = ClusterState(node_list, slices, classes, claims, templates, running, features=features)
        result = place_gang(to_place, state)
    except AllocationError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not result.placed:
        reason = result.explanation.message if result.explanation is not None else "does not fit"
        _emit({"allocated": False, "node": None, "claims": [], "reason": reason}, args.output)
        return 1
    pods_out: list[dict[str, Any]] = []
    claims_out: list[dict[str, Any]] = []
    for pl in result.placements:
        ns, _, name = pl.pod.partition("/")
        entry: dict[str, Any] = {
            "namespace": ns,
            "name": name,
            "node": pl.node,
            "claims": [ca.name for ca in pl.claims if ca.claim.key not in pl.shared]
            + [k.partition("/")[2] for k in pl.shared],
        }
        if pl.extended is not None:
            entry["extendedResourceClaimStatus"] = {
                "resourceClaimName": pl.extended.name,
                "requestMappings": [m.to_dict() for m in pl.extended_mappings],
            }
        pods_out.append(entry)
        claims_out.extend(
            {"namespace": ca.namespace, "name": ca.name, "allocation": ca.allocation.to_dict()}
            for ca in pl.claims
        )
    out = {
        "allocated": True,
        "node": result.placements[0].node if result.placements else None,
        "claims": claims_out,
        "pods": pods_out,
    }
    _emit(out, args.output)
    return 0
