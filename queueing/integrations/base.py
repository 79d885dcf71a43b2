"""The protocol every workload source adapter follows (Kueue's ``jobframework.GenericJob``).

An adapter wraps one object of an integrated kind (queueing/integrations/registry.py lists them) and
answers what the controller needs, without I/O:

* ``workload``: the Workload to create (None: not queued), with its pod sets (templates, counts,
  ``minCount`` for partial admission), queue, priority, name and controller owner reference;
* ``is_suspended`` / ``suspend_patch``: whether it waits for an admission, and the write that stops
  it (None: it is stopped by deleting its pods, as a pod group is);
* ``start_patch`` (kinds held by suspend): the one write that starts it for an admission, given per
  pod set what plan binding needs (:class:`PodSetStart`: the labels our pods informer selects, the
  planned node, the placement gate, the admitted count);
* ``finished``: (finished, succeeded);
* ``owns``: which pods are its own.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from queueing.api.base import KubeObject
from queueing.api.core import Pod
from queueing.api.v1beta1 import (
    GATE_PLACEMENT,
    HOSTNAME_LABEL,
    PodSet,
    Workload,
)

__all__ = [
    "GenericJob",
    "PodSetStart",
    "StartPatch",
    "SuspendableJob",
    "apply_start",
    "copy_spec",
    "replace_spec",
    "strip_start",
]


@dataclass(frozen=True)
class PodSetStart:
    """What an admission writes into one pod set's pod template when it starts the object.

    ``labels``: added to the template (the Workload UID and pod set our pods informer selects);
    ``node``: the planned node when every pod of the pod set has the same one (None: none to pin);
    ``keep_hostname``: the Workload's own template pins a node (a previous admission's pin is removed
    otherwise); ``gate``: the pods wait for plan binding behind ``gate_name``; ``count``: the
    admitted count (lower than the pod set's for a partial admission; None: as asked)."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    node: str | None = None
    keep_hostname: bool = False
    gate: bool = False
    gate_name: str = GATE_PLACEMENT
    count: int | None = None


@dataclass(frozen=True)
class StartPatch:
    """The write that starts an object: a patch body and its type (``merge``, ``strategic``, or
    ``json`` for a list of JSON patch operations)."""

    body: dict[str, Any] | list[dict[str, Any]]
    patch_type: str = "merge"


def apply_start(template: dict[str, Any], start: PodSetStart) -> None:
    """Write ``start`` into a raw pod template in place (the kinds that patch their whole spec):
    labels added, the planned node pinned (or a previous admission's pin removed), the placement gate
    present exactly when asked for."""
    meta = template.setdefault("metadata", {})
    meta["labels"] = {**(meta.get("labels") or {}), **start.labels}
    spec = template.setdefault("spec", {})
    selector = dict(spec.get("nodeSelector") or {})
    if start.node is not None:
        selector[HOSTNAME_LABEL] = start.node
    elif not start.keep_hostname:
        selector.pop(HOSTNAME_LABEL, None)
    if selector:
        spec["nodeSelector"] = selector
    else:
        spec.pop("nodeSelector", None)
    gates = [g for g in spec.get("schedulingGates") or [] if g.get("name") != start.gate_name]
    if start.gate:
        gates.append({"name": start.gate_name})
    if gates:
        spec["schedulingGates"] = gates
    else:
        spec.pop("schedulingGates", None)


def strip_start(template: dict[str, Any], labels: Iterable[str], gate_name: str) -> None:
    """Take an admission's marks out of a raw pod template in place (on suspension): its labels and
    the placement gate (the planned node is replaced at the next start)."""
    meta = template.get("metadata") or {}
    if meta.get("labels"):
        meta["labels"] = {k: v for k, v in meta["labels"].items() if k not in set(labels)}
    spec = template.get("spec") or {}
    if spec.get("schedulingGates"):
        gates = [g for g in spec["schedulingGates"] if g.get("name") != gate_name]
        if gates:
            spec["schedulingGates"] = gates
        else:
            spec.pop("schedulingGates")


def replace_spec(
    obj: KubeObject, spec: dict[str, Any], annotations: Mapping[str, str | None] | None = None
) -> list[dict[str, Any]]:
    """A JSON patch that replaces the object's whole ``spec`` (a merge patch would keep the keys a
    start or a suspension takes out of a pod template) and sets (None: removes) ``annotations``."""
    ops: list[dict[str, Any]] = [{"op": "replace", "path": "/spec", "value": spec}]
    if annotations:
        have = dict(obj.annotations)
        want = {k: v for k, v in {**have, **annotations}.items() if v is not None}
        if want != have:
            ops.append({"op": "add", "path": "/metadata/annotations", "value": want})
    return ops


def copy_spec(obj: KubeObject) -> dict[str, Any]:
    """A deep copy of an object's raw ``spec`` (every field kept: the models allow extra fields)."""
    return copy.deepcopy(obj.to_dict().get("spec") or {})


class GenericJob(Protocol):
    """One workload of some kind (a batch/v1 Job, a pod group, a RayJob, ...) as the controller
    handles it."""

    @property
    def object(self) -> KubeObject:
        """The object Events and messages name (the Job; a pod group's first pod)."""
        ...

    @property
    def key(self) -> str:
        """``namespace/name`` of the workload source (unique per kind)."""
        ...

    def workload(
        self, workload_priority_classes: Mapping[str, int], priority_classes: Mapping[str, int]
    ) -> Workload | None:
        """The Workload to create for it (None: not queued); raises ``WorkloadError`` for bad input,
        naming the object and field."""
        ...

    def pod_sets(self) -> list[PodSet]:
        """Its pod sets with their templates and counts (as the Workload carries them; ``minCount``
        when it may be admitted partially)."""
        ...

    def is_suspended(self) -> bool:
        """Whether it waits for an admission (suspended, or its pods gated)."""
        ...

    def suspend_patch(self) -> dict[str, Any] | list[dict[str, Any]] | None:
        """The write that suspends it: a merge patch, or a JSON patch (a list of operations); None:
        it is stopped by deleting its pods. A partial admission's lowered counts are given back in
        the same write."""
        ...

    def finished(self) -> tuple[bool, bool]:
        """(finished, succeeded)."""
        ...

    def owns(self, pods: Iterable[Pod]) -> list[Pod]:
        """The pods among ``pods`` that belong to it."""
        ...


class SuspendableJob(GenericJob, Protocol):
    """A kind held by ``spec.suspend`` (Job, RayJob, RayCluster, JobSet): started by one write."""

    def start_patch(self, starts: Mapping[str, PodSetStart]) -> StartPatch:
        """The write that unsuspends it with each pod set's :class:`PodSetStart` applied."""
        ...
