"""The API server's update rules for the built-in kinds the controller writes, so that a write a real
cluster would refuse is refused by the emulator too.

* Pod create: ``spec.nodeName`` cannot be set together with ``spec.schedulingGates``.
* Pod update: the spec is immutable except container/initContainer images, ``activeDeadlineSeconds``,
  ``terminationGracePeriodSeconds``, additions to ``tolerations``, removal of ``schedulingGates``, and —
  while the pod still has scheduling gates — additions to ``nodeSelector`` and changes of ``affinity``
  (the "mutable scheduling directives" of gated pods). ``spec.nodeName`` is set through the
  ``pods/binding`` subresource only.
* Job create and update: the template's ``restartPolicy`` is ``OnFailure`` or ``Never``
  (``queueing.testing.defaults``, which also holds the Job defaulting and selector generation).
* Job update: ``selector``, ``completions`` and ``completionMode`` are immutable; ``spec.template`` is
  immutable except, for a suspended Job that never started (no ``status.startTime``), its labels,
  annotations, ``nodeSelector``, ``affinity``, ``tolerations`` and ``schedulingGates``.
* resource.k8s.io kinds (create and update): the API server's validation as the ``queueing.api`` models
  apply it (names, list limits, attribute typing, non-negative capacities, ``count`` >= 1, ...), and
  CEL selectors that do not compile or whose estimated cost is over the API server's limit
  (``queueing.dra.cel_cost``). ``Store.api_validation = False`` turns this off (and CRD rules).
* ResourceClaim / ResourceClaimTemplate: ``spec`` is immutable; a claim's ``status.allocation``, once
  set, cannot be replaced by a different one (it can be removed).
"""

from __future__ import annotations

import copy
import functools
import json
from typing import Any

from queueing.testing.defaults import validate_job
from queueing.testing.resources import ResourceType
from queueing.testing.schema import FieldError

__all__ = ["validate_create", "validate_resource_object", "validate_update"]

POD_UPDATE_MESSAGE = (
    "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,"
    "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative); "
    "`spec.nodeSelector` and `spec.affinity` may change only while the pod has scheduling gates; "
    "set `spec.nodeName` through the pods/binding subresource"
)


def _fmt(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _immutable(path: str, value: Any) -> FieldError:
    return FieldError(path, "FieldValueInvalid", f"{path}: Invalid value: {_fmt(value)}: field is immutable")


def _forbidden(path: str, detail: str) -> FieldError:
    return FieldError(path, "FieldValueForbidden", f"{path}: Forbidden: {detail}")


def validate_create(rt: ResourceType, obj: dict[str, Any]) -> list[FieldError]:
    if rt.key == "batch/jobs":
        return validate_job(obj)
    if rt.key == "/pods":
        spec = obj.get("spec") or {}
        if spec.get("schedulingGates") and spec.get("nodeName"):
            return [_forbidden("spec.nodeName", "cannot be set until all schedulingGates have been cleared")]
    return []


def validate_update(
    rt: ResourceType, old: dict[str, Any], new: dict[str, Any], subresource: str
) -> list[FieldError]:
    if rt.key == "/pods" and not subresource:
        return _pod_update(old.get("spec") or {}, new.get("spec") or {})
    if rt.key == "batch/jobs" and not subresource:
        return validate_job(new) + _job_update(old, new)
    if rt.key in ("resource.k8s.io/resourceclaims", "resource.k8s.io/resourceclaimtemplates"):
        errs = []
        if (old.get("spec") or {}) != (new.get("spec") or {}):
            errs.append(_immutable("spec", new.get("spec")))
        if rt.key.endswith("resourceclaims"):
            before = (old.get("status") or {}).get("allocation")
            after = (new.get("status") or {}).get("allocation")
            if before is not None and after is not None and before != after:
                errs.append(_immutable("status.allocation", after))
        return errs
    return []


def _names(items: list[dict[str, Any]] | None) -> list[str]:
    return [i.get("name", "") for i in items or [] if isinstance(i, dict)]


def _pod_update(old: dict[str, Any], new: dict[str, Any]) -> list[FieldError]:
    if old == new:  # a status or metadata write: nothing below can differ
        return []
    errs: list[FieldError] = []
    old_gates, new_gates = _names(old.get("schedulingGates")), _names(new.get("schedulingGates"))
    added = [g for g in new_gates if g not in old_gates]
    if added:
        errs.append(
            _forbidden(
                "spec.schedulingGates",
                f"only deletion is allowed, but found new scheduling gate '{added[0]}'",
            )
        )
    gated = bool(old_gates)
    a, b = copy.deepcopy(old), copy.deepcopy(new)
    for field in ("containers", "initContainers"):
        for x, y in zip(a.get(field) or [], b.get(field) or [], strict=False):
            if isinstance(x, dict) and isinstance(y, dict):
                y["image"] = x.get("image")
                if "image" not in x:
                    y.pop("image", None)
    for k in ("activeDeadlineSeconds", "terminationGracePeriodSeconds", "schedulingGates"):
        a.pop(k, None)
        b.pop(k, None)
    old_tols, new_tols = a.pop("tolerations", None) or [], b.pop("tolerations", None) or []
    if any(t not in new_tols for t in old_tols):
        errs.append(
            _forbidden(
                "spec.tolerations", "existing toleration can not be modified except its tolerationSeconds"
            )
        )
    if gated:
        old_sel, new_sel = a.pop("nodeSelector", None) or {}, b.pop("nodeSelector", None) or {}
        changed = {k for k, v in old_sel.items() if new_sel.get(k) != v}
        if changed:
            errs.append(
                _forbidden("spec.nodeSelector", f"only additions are allowed (changed: {sorted(changed)})")
            )
        a.pop("affinity", None)
        b.pop("affinity", None)
    if a != b:
        errs.append(_forbidden("spec", POD_UPDATE_MESSAGE))
    return errs


_TEMPLATE_MUTABLE_WHEN_SUSPENDED = ("nodeSelector", "affinity", "tolerations", "schedulingGates")


def _job_update(old: dict[str, Any], new: dict[str, Any]) -> list[FieldError]:
    errs: list[FieldError] = []
    os_, ns_ = old.get("spec") or {}, new.get("spec") or {}
    for k in ("selector", "completions", "completionMode"):
        if os_.get(k) != ns_.get(k):
            errs.append(_immutable(f"spec.{k}", ns_.get(k)))
    if (os_.get("template") or {}) == (ns_.get("template") or {}):
        return errs
    # shallow copies: only their first two levels lose keys (the templates are read, never changed)
    ot, nt = dict(os_.get("template") or {}), dict(ns_.get("template") or {})
    never_started = bool(os_.get("suspend")) and not (old.get("status") or {}).get("startTime")
    if never_started:
        for t in (ot, nt):
            meta = dict(t.get("metadata") or {})
            meta.pop("labels", None)
            meta.pop("annotations", None)
            t["metadata"] = meta
            spec = dict(t.get("spec") or {})
            for k in _TEMPLATE_MUTABLE_WHEN_SUSPENDED:
                spec.pop(k, None)
            t["spec"] = spec
    if ot != nt:
        errs.append(_immutable("spec.template", ns_.get("template")))
    return errs


def validate_resource_object(rt: ResourceType, obj: dict[str, Any]) -> list[FieldError]:
    """A resource.k8s.io object as kube-apiserver validates it (the one copy of those rules is the
    ``queueing.api`` models; selectors through ``queueing.dra.cel_cost``)."""
    from queueing.api.registry import ObjectError, model_for, parse_object

    if model_for(f"{rt.group}/{rt.version}", rt.kind) is None:
        return []
    body = dict(obj, apiVersion=f"{rt.group}/{rt.version}", kind=rt.kind)
    try:
        parsed = parse_object(body)
    except ObjectError as e:
        return [_invalid(p) for p in e.problems]
    except RecursionError:
        return [_invalid("<root>: nested too deeply")]
    out = []
    for path, expression, _hint in _selector_paths(parsed):
        problem = _selector_problem(expression)
        if problem:
            out.append(
                FieldError(path, "FieldValueInvalid", f"{path}: Invalid value: {_fmt(expression)}: {problem}")
            )
    return out


def _invalid(problem: str) -> FieldError:
    path, _, msg = problem.partition(": ")
    return FieldError(path, "FieldValueInvalid", f"{path}: Invalid value: {msg}")


def _selector_paths(obj: Any) -> list[tuple[str, str, str | None]]:
    from queueing.dra.cel_cost import selector_expressions

    return selector_expressions(obj)


@functools.lru_cache(maxsize=4096)
def _selector_problem(expression: str) -> str | None:
    from queueing.dra.cel import CELCompileError, CELCostError
    from queueing.dra.cel_cost import check_selector_cost

    try:
        check_selector_cost(expression)
    except (CELCompileError, CELCostError) as e:
        return e.message
    return None
