"""``queueing allocate``: would these ResourceClaims fit, and on which devices? (resource.k8s.io/v1)

Contract (other checks depend on it):
    queueing allocate -f FILE [-f FILE ...] [--node NAME] [-o json|yaml] [--feature-gates Name=bool,...]

Reads Node, ResourceSlice, DeviceClass and ResourceClaim objects (YAML or JSON, multi-document,
``kind: List`` expanded; other kinds are ignored with a warning). Claims with ``status.allocation``
are in use; the others are allocated together for one pod on one node, all or nothing. Candidate
nodes: ``--node`` or every Node plus every nodeName a slice names, by name; the first fit wins.

Exit 0: allocated; 1: cannot be allocated; 2: invalid input or an error that aborts allocation,
with one line on stderr naming the object and the field.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import yaml
from pydantic import ValidationError

from queueing.api.base import KubeObject, format_validation_error
from queueing.api.core import Node
from queueing.api.resource import DeviceClass, ResourceClaim, ResourceSlice

HELP = "Allocate DRA devices for ResourceClaims on one node, as the Kubernetes scheduler would."

KINDS: dict[str, type[KubeObject]] = {
    "Node": Node,
    "ResourceSlice": ResourceSlice,
    "DeviceClass": DeviceClass,
    "ResourceClaim": ResourceClaim,
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
        help="YAML or JSON file with Nodes, ResourceSlices, DeviceClasses and ResourceClaims (repeatable; - is stdin)",
    )
    parser.add_argument("--node", metavar="NAME", help="only try this node")
    parser.add_argument("-o", "--output", choices=("json", "yaml"), default="json", help="output format")
    parser.add_argument(
        "--feature-gates",
        default="",
        metavar="Name=bool,...",
        help="DRA feature gates (DRAPrioritizedList, DRAAdminAccess, DRAPartitionableDevices, "
        "DRAConsumableCapacity, DRADeviceTaints, DRADeviceBindingConditions); all on by default",
    )


def _documents(path: str) -> list[Any]:
    try:
        text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()  # noqa: SIM115
    except OSError as e:
        raise InputError(f"{path}: {e.strerror or e}") from None
    try:
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e)
        raise InputError(f"{path}:{where}: not valid YAML/JSON: {problem}") from None


def _expand(doc: Any, path: str, where: str) -> list[tuple[dict[str, Any], str]]:
    if not isinstance(doc, dict):
        raise InputError(f"{path}: {where}: expected an object, got {type(doc).__name__}")
    kind = doc.get("kind")
    if isinstance(kind, str) and kind.endswith("List") and isinstance(doc.get("items"), list):
        out = []
        for i, item in enumerate(doc["items"]):
            out.extend(_expand(item, path, f"{where}.items[{i}]"))
        return out
    return [(doc, where)]


def load_objects(paths: list[str]) -> tuple[list[KubeObject], list[str]]:
    """Parse all objects; returns (objects, warnings). Raises InputError on bad input."""
    objects: list[KubeObject] = []
    warnings: list[str] = []
    for path in paths:
        for n, doc in enumerate(_documents(path)):
            for obj, where in _expand(doc, path, f"document {n + 1}"):
                kind = obj.get("kind")
                meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
                name = meta.get("name") if isinstance(meta, dict) else None
                ns = meta.get("namespace") if isinstance(meta, dict) else None
                ref = f"{kind or '<no kind>'} {f'{ns}/' if ns else ''}{name or '<no name>'}"
                model = KINDS.get(kind) if isinstance(kind, str) else None
                if model is None:
                    warnings.append(
                        f"warning: {path}: {where}: ignoring {ref} (allocate reads {', '.join(KINDS)})"
                    )
                    continue
                try:
                    parsed = model.model_validate(obj)
                except ValidationError as e:
                    first = format_validation_error(e, ref).split("; ")[0]
                    raise InputError(first) from None
                if not parsed.name:
                    raise InputError(f"{ref}: metadata.name: required")
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
