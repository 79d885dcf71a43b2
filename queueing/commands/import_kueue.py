"""``queueing import-kueue``: Kueue's queue objects as queueing's, and what could not be converted.

    queueing import-kueue -f FILE|DIR [-f ...] [--device-class-mapping NAME=CLASS[,CLASS...]] [-o yaml|json]

Reads ``kueue.x-k8s.io`` ``v1beta1`` and ``v1beta2`` objects (YAML or JSON, multi-document, Lists,
directories) and prints them as ``queueing.dra.io/v1beta1`` on stdout: ResourceFlavor, Cohort,
ClusterQueue, LocalQueue, WorkloadPriorityClass and Topology. ``v1beta1`` is converted as Kueue converts it
(``spec.cohort`` -> ``spec.cohortName``, ``flavorFungibility`` ``Borrow``/``Preempt`` ->
``MayStopSearch``, ``admissionChecks`` -> ``admissionChecksStrategy``). Status and server-set metadata
are dropped.

Devices: Kueue counts DRA devices under a logical resource name that its Configuration's
``resources.deviceClassMappings`` maps to DeviceClasses; queueing's quota names the DeviceClass
itself. The mappings come from a Kueue ``Configuration`` among the input files (also inside the
``kueue-manager-config`` ConfigMap) and from ``--device-class-mapping``; a ClusterQueue or Cohort
resource with a mapping to one DeviceClass is renamed to it (in ``coveredResources`` too). A mapping
to several DeviceClasses cannot be carried over (queueing's quota is per DeviceClass): that resource
is left out, with a note.

Every field queueing does not have (Kueue features it does not implement, e.g. admission checks)
is left out of the object with a note naming the object, the field and
why, as the API would reject it; kinds that have no counterpart (Workload, AdmissionCheck,
MultiKueue, ...) are left out with a note. Notes go to stderr. Objects of other API groups pass
through unchanged, except that a Job's (and its pod template's) ``kueue.x-k8s.io/queue-name`` and
``kueue.x-k8s.io/priority-class`` labels become queueing's.

Exit codes: 0 everything converted; 1 converted, but something was left out (the notes say what);
2 the input could not be read.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

HELP = "Convert Kueue's queue objects (kueue.x-k8s.io v1beta1/v1beta2) into queueing's."

__all__ = ["Conversion", "convert"]

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSIONS = ("v1beta1", "v1beta2")
CONFIG_GROUP = "config.kueue.x-k8s.io"
OURS = "queueing.dra.io/v1beta1"
KINDS = ("ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue", "WorkloadPriorityClass", "Topology")
NOT_CONVERTED = {
    "Workload": "Workloads are created by the controller from their Jobs: relabel the Jobs instead",
    "AdmissionCheck": "admission checks are not implemented",
    "ProvisioningRequestConfig": "admission checks are not implemented",
    "MultiKueueConfig": "MultiKueue is not implemented",
    "MultiKueueCluster": "MultiKueue is not implemented",
}
LABELS = {
    "kueue.x-k8s.io/queue-name": "queueing.dra.io/queue-name",
    "kueue.x-k8s.io/priority-class": "queueing.dra.io/priority-class",
}
SERVER_METADATA = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields",
                   "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds", "ownerReferences",
                   "finalizers")  # fmt: skip
_UNKNOWN = re.compile(r"^(?:Value error, )?([A-Za-z0-9_.\[\]]+): unknown field \"[^\"]*\"(?::\s*(.*))?$")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-f", "--filename", action="append", required=True, metavar="FILE|DIR",
        help="Kueue objects: a file, a directory or - (stdin); repeatable",
    )  # fmt: skip
    parser.add_argument(
        "--device-class-mapping", action="append", default=[], metavar="NAME=CLASS[,CLASS]",
        help="a Kueue deviceClassMappings entry: the logical resource NAME counts devices of CLASS",
    )  # fmt: skip
    parser.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")


@dataclass
class Conversion:
    objects: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what was left out, and why


def _ref(doc: dict[str, Any]) -> str:
    meta = doc.get("metadata") or {}
    name = f"{meta['namespace']}/{meta.get('name')}" if meta.get("namespace") else str(meta.get("name"))
    return f"{doc.get('kind')} {name}"


def device_class_mappings(docs: Iterable[dict[str, Any]], flags: Sequence[str]) -> dict[str, list[str]]:
    """Kueue's ``resources.deviceClassMappings`` (logical name -> DeviceClasses) from Configuration
    objects (or the ConfigMap carrying one) among ``docs`` and from ``NAME=CLASS[,CLASS]`` flags."""
    out: dict[str, list[str]] = {}

    def take(cfg: Any) -> None:
        if not isinstance(cfg, dict):
            return
        for m in ((cfg.get("resources") or {}).get("deviceClassMappings")) or []:
            if isinstance(m, dict) and m.get("name"):
                out[str(m["name"])] = [str(c) for c in m.get("deviceClassNames") or []]

    for doc in docs:
        group = str(doc.get("apiVersion", "")).rpartition("/")[0]
        if doc.get("kind") == "Configuration" and group == CONFIG_GROUP:
            take(doc)
        elif doc.get("kind") == "ConfigMap":
            for text in (doc.get("data") or {}).values():
                try:
                    cfg = yaml.safe_load(text)
                except yaml.YAMLError:
                    continue
                if isinstance(cfg, dict) and str(cfg.get("apiVersion", "")).startswith(CONFIG_GROUP + "/"):
                    take(cfg)
    for flag in flags:
        name, eq, classes = flag.partition("=")
        if not eq or not name or not classes:
            raise ValueError(f"--device-class-mapping {flag!r}: expected NAME=CLASS[,CLASS...]")
        out[name] = [c for c in classes.split(",") if c]
    return out


def _v1beta1(kind: str, spec: dict[str, Any], ref: str, notes: list[str]) -> None:
    """Kueue's own v1beta1 -> v1beta2 conversion (apis/kueue/v1beta1/*_conversion.go)."""
    if kind != "ClusterQueue":
        return
    if "cohort" in spec:
        spec["cohortName"] = spec.pop("cohort")
    checks = spec.pop("admissionChecks", None)
    if checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
    ff = spec.get("flavorFungibility")
    if isinstance(ff, dict):
        if ff.get("whenCanPreempt") == "Preempt":
            ff["whenCanPreempt"] = "MayStopSearch"
        if ff.get("whenCanBorrow") == "Borrow":
            ff["whenCanBorrow"] = "MayStopSearch"


def _devices(spec: dict[str, Any], mappings: dict[str, list[str]], ref: str, notes: list[str]) -> None:
    """Resource names a deviceClassMapping defines -> the DeviceClass name (quota per DeviceClass)."""
    for gi, group in enumerate(spec.get("resourceGroups") or []):
        if not isinstance(group, dict):
            continue
        drop: set[str] = set()
        rename: dict[str, str] = {}
        for r in group.get("coveredResources") or []:
            classes = mappings.get(r)
            if classes is None:
                continue
            if len(classes) == 1:
                rename[r] = classes[0]
            else:
                drop.add(r)
                notes.append(
                    f"{ref}: spec.resourceGroups[{gi}]: resource {r} left out: its deviceClassMapping names "
                    f"{len(classes)} DeviceClasses ({', '.join(classes) or 'none'}) and queueing's quota is per "
                    "DeviceClass: give each class its share of the quota by hand"
                )
        group["coveredResources"] = [
            rename.get(r, r) for r in group.get("coveredResources") or [] if r not in drop
        ]
        for fl in group.get("flavors") or []:
            res = [x for x in fl.get("resources") or [] if x.get("name") not in drop]
            for x in res:
                x["name"] = rename.get(x.get("name"), x.get("name"))
            fl["resources"] = res
    if spec.get("resourceGroups"):
        spec["resourceGroups"] = [
            g for g in spec["resourceGroups"] if not isinstance(g, dict) or g.get("coveredResources")
        ]


def _remove(doc: Any, path: Sequence[Any]) -> bool:
    for p in path[:-1]:
        try:
            doc = doc[p]
        except (KeyError, IndexError, TypeError):
            return False
    if isinstance(doc, dict) and path and path[-1] in doc:
        del doc[path[-1]]
        return True
    return False


def _field_path(loc: Sequence[Any]) -> str:
    out = ""
    for p in loc:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _validate(obj: dict[str, Any], model: Any, ref: str, notes: list[str]) -> str | None:
    """Validate with our model, leaving out each field it does not have (with a note); returns why the
    object cannot be converted at all, or None."""
    from pydantic import ValidationError

    from queueing.api.base import format_validation_error

    for _ in range(100):
        try:
            model.model_validate(obj)
            return None
        except ValidationError as e:
            removed = False
            for err in e.errors():
                loc = [p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-"))]
                if err["type"] == "extra_forbidden":
                    path, why = list(loc), "queueing has no such field"
                else:
                    m = _UNKNOWN.match(err["msg"])
                    if m is None:
                        continue
                    rel = [int(s) if s.isdigit() else s for s in re.split(r"\.|\[|\]", m.group(1)) if s]
                    path, why = [*loc, *rel], (m.group(2) or "queueing has no such field")
                    why = why.split(" (see docs/")[0]
                if _remove(obj, path):
                    notes.append(f"{ref}: {_field_path(path)}: left out: {why}")
                    removed = True
                    break
            if not removed:
                return format_validation_error(e, ref)
    return f"{ref}: too many fields queueing does not have"


def _relabel(labels: dict[str, Any] | None) -> bool:
    changed = False
    for k, ours in LABELS.items():
        if labels is not None and k in labels:
            labels.setdefault(ours, labels.pop(k))
            changed = True
    return changed


def convert(docs: Sequence[tuple[dict[str, Any], str]], mapping_flags: Sequence[str] = ()) -> Conversion:
    """Convert the documents (``(object, where)`` as ``queueing.manifests.read_documents`` gives)."""
    from queueing.api import v1beta1 as api

    models = {k: getattr(api, k) for k in KINDS}
    out = Conversion()
    mappings = device_class_mappings((d for d, _ in docs), mapping_flags)
    for doc, where in docs:
        group, _, version = str(doc.get("apiVersion", "")).rpartition("/")
        kind = str(doc.get("kind", ""))
        ref = _ref(doc)
        if group == CONFIG_GROUP:
            continue  # read for its deviceClassMappings; the configuration itself: docs/migrating-from-kueue.md
        if group != KUEUE_GROUP:
            other = copy.deepcopy(doc)
            if kind == "Job" and group == "batch":
                relabelled = _relabel((other.get("metadata") or {}).get("labels"))
                tmpl = ((other.get("spec") or {}).get("template") or {}).get("metadata") or {}
                relabelled = _relabel(tmpl.get("labels")) or relabelled
                if relabelled:
                    out.notes.append(f"{ref}: Kueue's queue labels renamed to queueing's")
            if kind == "ConfigMap" and any(
                isinstance(v, str) and CONFIG_GROUP in v for v in (doc.get("data") or {}).values()
            ):
                continue  # Kueue's configuration
            out.objects.append(other)
            continue
        if version not in KUEUE_VERSIONS:
            out.notes.append(f"{ref} ({where}): not converted: {group}/{version} (only v1beta1 and v1beta2)")
            continue
        if kind not in models:
            why = NOT_CONVERTED.get(kind, "queueing has no such kind")
            out.notes.append(f"{ref}: not converted: {why}")
            continue
        meta = {k: v for k, v in (doc.get("metadata") or {}).items() if k not in SERVER_METADATA}
        if isinstance(meta.get("annotations"), dict):
            meta["annotations"].pop("kubectl.kubernetes.io/last-applied-configuration", None)
            if not meta["annotations"]:
                del meta["annotations"]
        obj: dict[str, Any] = {"apiVersion": OURS, "kind": kind, "metadata": meta}
        if kind == "WorkloadPriorityClass":
            for k in ("value", "description"):
                if k in doc:
                    obj[k] = doc[k]
        else:
            spec = copy.deepcopy(doc.get("spec") or {})
            if version == "v1beta1":
                _v1beta1(kind, spec, ref, out.notes)
            if kind in ("ClusterQueue", "Cohort"):
                _devices(spec, mappings, ref, out.notes)
            obj["spec"] = spec
        invalid = _validate(obj, models[kind], ref, out.notes)
        if invalid is not None:
            out.notes.append(f"not converted: {invalid}")
            continue
        out.objects.append(obj)
    return out


def run(args: argparse.Namespace) -> int:
    from queueing.manifests import ManifestError, read_documents

    try:
        docs = read_documents(args.filename)
        result = convert(docs, args.device_class_mapping)
    except (ManifestError, ValueError) as e:
        print(f"queueing import-kueue: {e}", file=sys.stderr)
        return 2
    if args.output == "json":
        sys.stdout.write(
            json.dumps({"apiVersion": "v1", "kind": "List", "items": result.objects}, indent=2) + "\n"
        )
    else:
        sys.stdout.write(yaml.safe_dump_all(result.objects, sort_keys=False))
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    left_out = [n for n in result.notes if "renamed to queueing's" not in n]
    if left_out:
        print(
            f"queueing import-kueue: {len(left_out)} thing(s) not converted (see the notes above)",
            file=sys.stderr,
        )
        return 1
    return 0
