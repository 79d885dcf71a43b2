"""CRD validation rules (``x-kubernetes-validations``) evaluated as kube-apiserver does, for the emulator.

Each rule of a schema node is compiled once (in the CEL environment of ``queueing.dra.cel`` with the
Kubernetes libraries, ``self`` and ``oldSelf`` of the dynamic type) and evaluated with ``self`` bound
to the node's value. A rule that mentions ``oldSelf`` is a transition rule: evaluated on update only,
where the old object has a value at the same place (properties by name, ``x-kubernetes-list-type: map``
items by their keys). A rule that evaluates to false gives the API server's error::

    spec.resourceGroups[0].flavors[0].resources[0]: Invalid value: "object": nominalQuota must be non-negative

A rule that does not compile is refused when the CRD is created (as kube-apiserver does), so a CRD whose
rules use a function the API server does not have never loads. A rule whose evaluation fails reports
the failure as the error of that field; an evaluation that exceeds the runtime's cost budget likewise
(kube-apiserver: ``validation failed due to running out of cost budget``).
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from queueing.dra.verify import VerifyError
from queueing.testing.schema import FieldError

__all__ = ["compile_errors", "validate_rules"]

_VARIABLES = ("self", "oldSelf")


@cache
def _env() -> Any:
    from queueing.dra.cel import rule_environment

    return rule_environment(_VARIABLES)


@cache
def _program(rule: str) -> Any:
    """The compiled rule; raises RuntimeError (the engine's message) when it does not compile."""
    return _env().compile(rule)


def _type_name(value: Any) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "string"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def compile_errors(schema: dict[str, Any], path: str = "") -> list[str]:
    """``path: rule: message`` for every rule of ``schema`` (recursively) that does not compile."""
    out: list[str] = []
    for i, r in enumerate(schema.get("x-kubernetes-validations") or []):
        rule = r.get("rule") if isinstance(r, dict) else None
        if not isinstance(rule, str):
            continue
        try:
            _program(rule)
        except RuntimeError as e:
            out.append(f"{path or '<root>'}.x-kubernetes-validations[{i}].rule: {_one_line(str(e))}")
    for key, sub in (schema.get("properties") or {}).items():
        if isinstance(sub, dict):
            out.extend(compile_errors(sub, f"{path}.properties[{key}]" if path else f"properties[{key}]"))
    for key in ("items", "additionalProperties"):
        sub = schema.get(key)
        if isinstance(sub, dict):
            out.extend(compile_errors(sub, f"{path}.{key}" if path else key))
    return out


def validate_rules(
    value: Any, schema: dict[str, Any], old: Any = None, path: str = "", verify: bool = False
) -> list[FieldError]:
    """The rules of ``schema`` that ``value`` breaks (``old``: the stored object on update).
    ``verify``: also walk without shortcuts (no skipping of unchanged parts, each rule evaluated on
    the whole values in an activation of its own); VerifyError if the errors differ."""
    errs: list[FieldError] = []
    _walk(value, schema, old, path, errs, root=True)
    if verify:
        whole: list[FieldError] = []
        _walk(value, schema, old, path, whole, root=True, skip=False)
        if [e.message for e in whole] != [e.message for e in errs]:
            raise VerifyError(
                "CRD rules with shortcuts (unchanged values, shared activations)", errs, whole, path
            )
    return errs


# id(schema node) -> (the node, kept so that its id stays its own; whether a walk may evaluate a rule
# below it when the value equals the old one)
_EVALUATES_WHEN_EQUAL: dict[int, tuple[dict[str, Any], bool]] = {}


def _evaluates_when_equal(schema: dict[str, Any]) -> bool:
    """Whether walking a value equal to its old value under ``schema`` can evaluate any rule (and so
    fail): a transition rule (``oldSelf``) anywhere below, or any rule below the items of a list that
    is not ``x-kubernetes-list-type: map`` (those items have no old value to ratchet against). Every
    other rule of such a walk is skipped by ratcheting, so the walk itself can be skipped."""
    got = _EVALUATES_WHEN_EQUAL.get(id(schema))
    if got is not None and got[0] is schema:
        return got[1]
    out = any(
        isinstance(r, dict) and isinstance(r.get("rule"), str) and "oldSelf" in r["rule"]
        for r in schema.get("x-kubernetes-validations") or []
    )
    subs = [s for s in (schema.get("properties") or {}).values() if isinstance(s, dict)]
    if isinstance(schema.get("additionalProperties"), dict):
        subs.append(schema["additionalProperties"])
    out = out or any(_evaluates_when_equal(s) for s in subs)
    items = schema.get("items")
    if not out and isinstance(items, dict):
        if schema.get("x-kubernetes-list-type") == "map" and schema.get("x-kubernetes-list-map-keys"):
            out = _evaluates_when_equal(items)
        else:
            out = _has_rules(items)
    _EVALUATES_WHEN_EQUAL[id(schema)] = (schema, out)
    return out


def _has_rules(schema: dict[str, Any]) -> bool:
    if schema.get("x-kubernetes-validations"):
        return True
    subs = [s for s in (schema.get("properties") or {}).values() if isinstance(s, dict)]
    subs += [schema[k] for k in ("items", "additionalProperties") if isinstance(schema.get(k), dict)]
    return any(_has_rules(s) for s in subs)


def _walk(
    value: Any,
    schema: dict[str, Any],
    old: Any,
    path: str,
    errs: list[FieldError],
    root: bool,
    skip: bool = True,
) -> None:
    if value is None:
        return
    if skip and not root and old is not None and value == old and not _evaluates_when_equal(schema):
        return  # unchanged: every rule below would be ratcheted (see _check)
    rules = [
        r
        for r in schema.get("x-kubernetes-validations") or []
        if isinstance(r, dict) and isinstance(r.get("rule"), str)
    ]
    if rules:
        node = _Node(value, old, rules, verify=not skip)
        for r in rules:
            _check(r, node, path, errs)
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        addl = schema.get("additionalProperties")
        for key, item in value.items():
            if root and key in ("apiVersion", "kind", "metadata"):
                continue
            sub = props.get(key) if key in props else (addl if isinstance(addl, dict) else None)
            if isinstance(sub, dict):
                prev = old.get(key) if isinstance(old, dict) else None
                _walk(item, sub, prev, f"{path}.{key}" if path else key, errs, root=False, skip=skip)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        items = schema["items"]
        keys = (
            schema.get("x-kubernetes-list-map-keys")
            if schema.get("x-kubernetes-list-type") == "map"
            else None
        )
        olds: dict[str, Any] = {}
        if keys and isinstance(old, list):
            for o in old:
                if isinstance(o, dict):
                    olds[repr([o.get(k) for k in keys])] = o
        for i, item in enumerate(value):
            prev = olds.get(repr([item.get(k) for k in keys])) if keys and isinstance(item, dict) else None
            _walk(item, items, prev, f"{path}[{i}]", errs, root=False, skip=skip)


_SELF = re.compile(r"\b(self|oldSelf)\b")
_FIELD = re.compile(r"\s*\.\s*([A-Za-z_][A-Za-z0-9_]*)(\s*\()?")


@cache
def _fields(rule: str) -> frozenset[str] | None:
    """The fields of ``self``/``oldSelf`` that ``rule`` selects (``self.spec``, ``has(oldSelf.status)``),
    or None when the rule uses either in any other way (as a whole, an index, an optional or quoted
    field, a macro or function called on it, a macro variable of that name): then it needs the
    whole value. A name inside a string
    literal only adds a field or makes it None: never fewer fields than the rule reads."""
    out = set()
    for m in _SELF.finditer(rule):
        f = _FIELD.match(rule, m.end())
        if f is None or f.group(2):  # not a field: a macro or function on the whole value
            return None
        out.add(f.group(1))
    return frozenset(out)


def _project(value: Any, fields: frozenset[str] | None) -> Any:
    """``value`` with only ``fields`` (a dict's other keys are never read by the rules)."""
    if fields is None or not isinstance(value, dict):
        return value
    return {k: value[k] for k in fields if k in value}


class _Node:
    """The bindings of one schema node's rules: one CEL activation for all of them (the engine
    converts a value to CEL once per activation, and that conversion is most of an evaluation's
    cost), holding only the fields of ``self`` and ``oldSelf`` the rules select. ``verify``: the
    walk without shortcuts, which evaluates every rule in an activation of its own with the whole
    values (``validate_rules`` compares the errors of both walks)."""

    def __init__(self, value: Any, old: Any, rules: list[dict[str, Any]], verify: bool = False) -> None:
        self.value, self.old, self.verify = value, old, verify
        self._rules = rules
        self._act: Any = None

    def activation(self) -> Any:
        if self.verify:
            return _env().Activation({"self": self.value, "oldSelf": self.old})
        if self._act is None:
            fields: frozenset[str] | None = frozenset()
            for r in self._rules:
                f = _fields(r["rule"])
                fields = None if f is None or fields is None else fields | f
            self._act = _env().Activation(
                {"self": _project(self.value, fields), "oldSelf": _project(self.old, fields)}
            )
        return self._act


def _check(r: dict[str, Any], node: _Node, path: str, errs: list[FieldError]) -> None:
    rule: str = r["rule"]
    value, old = node.value, node.old
    transition = "oldSelf" in rule
    if transition and old is None:
        return
    if not transition and old is not None and value == old:
        # validation ratcheting (CRDValidationRatcheting, GA in 1.33): an update that leaves a value as
        # it was is not refused for that value's rules (a status write to an object stored before a
        # rule existed, or with validation off, still goes through)
        return
    field = path or "<nil>"
    detail = r.get("message") or f"failed rule: {rule}"
    try:
        result = _program(rule).eval(node.activation())
        ok = result.value()
        if ok is not True and ok is not False:
            detail = f"failed to evaluate rule {rule!r}: {_one_line(str(ok))}"
    except RuntimeError as e:  # the runtime's budget or an internal error
        text = _one_line(str(e))
        if "budget" in text.lower():
            detail = (
                "validation failed due to running out of cost budget, no further validation rules will "
                f"be run ({text})"
            )
        else:
            detail = f"failed to evaluate rule {rule!r}: {text}"
        ok = False
    except (TypeError, ValueError, OverflowError) as e:  # a value the engine cannot take (e.g. > int64)
        detail = f"failed to evaluate rule {rule!r}: {e}"
        ok = False
    if ok is True:
        return
    reason = r.get("reason") or "FieldValueInvalid"
    at = r.get("fieldPath")
    if isinstance(at, str) and at:
        field = f"{path}{at}" if at.startswith(".") or at.startswith("[") else f"{path}.{at}"
    errs.append(FieldError(field, reason, f'{field}: Invalid value: "{_type_name(value)}": {detail}'))
