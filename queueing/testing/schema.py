"""Structural-schema handling of CRD ``openAPIV3Schema``: defaulting, pruning and validation.

Supported: ``type``, ``properties``, ``required``, ``enum``, ``minimum``/``maximum`` (and
``exclusiveMinimum``/``exclusiveMaximum``), ``minLength``/``maxLength``, ``pattern``,
``minItems``/``maxItems``, ``minProperties``/``maxProperties``, ``items``, ``additionalProperties``
(bool or schema), ``nullable``, ``default``, ``anyOf``/``allOf``/``oneOf``,
``x-kubernetes-preserve-unknown-fields``, ``x-kubernetes-int-or-string``,
``x-kubernetes-embedded-resource``. Not evaluated: ``x-kubernetes-validations`` (CEL rules),
``format``. ``x-kubernetes-list-type: map|set`` duplicates are rejected.

Error messages follow the API server's wording (``spec.count: Invalid value: -1: spec.count in body
should be greater than or equal to 0``) and each error carries the reason used in ``Status.details.causes``.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["FieldError", "apply_defaults", "prune", "validate"]


@dataclass(frozen=True)
class FieldError:
    field: str
    reason: str  # FieldValueRequired, FieldValueInvalid, FieldValueNotSupported, FieldValueTypeInvalid
    message: str  # the full "field: ..." text

    def to_cause(self) -> dict[str, str]:
        return {"reason": self.reason, "message": self.message.split(": ", 1)[-1], "field": self.field}


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _fmt(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def _type_ok(value: Any, typ: str) -> bool:
    if typ == "object":
        return isinstance(value, dict)
    if typ == "array":
        return isinstance(value, list)
    if typ == "string":
        return isinstance(value, str)
    if typ == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if typ == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if typ == "boolean":
        return isinstance(value, bool)
    return True


def _preserves(schema: dict[str, Any]) -> bool:
    return bool(schema.get("x-kubernetes-preserve-unknown-fields")) or bool(
        schema.get("x-kubernetes-embedded-resource")
    )


def apply_defaults(value: Any, schema: dict[str, Any]) -> Any:
    """Fill ``default`` values of missing properties, recursively (mutates and returns ``value``)."""
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for key, sub in props.items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
        for key, item in value.items():
            if key in props:
                value[key] = apply_defaults(item, props[key])
            elif isinstance(schema.get("additionalProperties"), dict):
                value[key] = apply_defaults(item, schema["additionalProperties"])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            value[i] = apply_defaults(item, schema["items"])
    return value


def prune(
    value: Any, schema: dict[str, Any], root: bool = False, path: str = "", pruned: list[str] | None = None
) -> Any:
    """Drop fields the schema does not specify (as the API server does), recursively; the paths of
    dropped fields are appended to ``pruned``."""
    if isinstance(value, dict):
        if _preserves(schema) and "properties" not in schema:
            return value
        props = schema.get("properties") or {}
        addl = schema.get("additionalProperties")
        for key in list(value):
            if root and key in ("apiVersion", "kind", "metadata"):
                continue
            sub = _join(path, key)
            if key in props:
                value[key] = prune(value[key], props[key], path=sub, pruned=pruned)
            elif isinstance(addl, dict):
                value[key] = prune(value[key], addl, path=sub, pruned=pruned)
            elif addl is True or _preserves(schema):
                continue
            else:
                del value[key]
                if pruned is not None:
                    pruned.append(sub)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            value[i] = prune(item, schema["items"], path=f"{path}[{i}]", pruned=pruned)
    return value


def validate(
    value: Any, schema: dict[str, Any], path: str = "", passed: dict[str, Any] | None = None
) -> list[FieldError]:
    """The errors of ``value`` against ``schema``. ``passed``: an object that validated against this
    very schema without errors (the stored one, on update); the root's properties equal to its are
    not walked again, as they cannot give an error (a property's errors depend on its value alone)."""
    errs: list[FieldError] = []
    _validate(value, schema, path, errs, passed)
    return errs


def _invalid(errs: list[FieldError], path: str, value: Any, detail: str) -> None:
    errs.append(FieldError(path, "FieldValueInvalid", f"{path}: Invalid value: {_fmt(value)}: {detail}"))


def _validate(
    value: Any, schema: dict[str, Any], path: str, errs: list[FieldError], passed: Any = None
) -> None:
    if value is None:
        if schema.get("nullable"):
            return
        if "type" in schema and not schema.get("x-kubernetes-int-or-string"):
            errs.append(
                FieldError(
                    path,
                    "FieldValueTypeInvalid",
                    f'{path}: Invalid value: "null": {path} in body must be of type {schema["type"]}: "null"',
                )
            )
        return
    if schema.get("x-kubernetes-int-or-string"):
        if not (isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))):
            errs.append(
                FieldError(
                    path,
                    "FieldValueTypeInvalid",
                    f"{path}: Invalid value: {_fmt(value)}: {path} in body must be of type integer or string",
                )
            )
            return
    else:
        typ = schema.get("type")
        if typ and not _type_ok(value, typ):
            got = type(value).__name__
            got = {
                "dict": "object",
                "list": "array",
                "str": "string",
                "int": "integer",
                "float": "number",
            }.get(got, got)
            errs.append(
                FieldError(
                    path,
                    "FieldValueTypeInvalid",
                    f'{path}: Invalid value: "{got}": {path} in body must be of type {typ}: "{got}"',
                )
            )
            return
        for combinator in ("anyOf", "oneOf"):
            if combinator in schema:
                oks = sum(1 for s in schema[combinator] if not validate(value, s, path))
                if oks == 0 or (combinator == "oneOf" and oks > 1):
                    _invalid(errs, path, value, f"{path} in body must match {combinator} schemas")
        for sub in schema.get("allOf", []):
            _validate(value, sub, path, errs)

    if "enum" in schema and value not in schema["enum"]:
        supported = ", ".join(_fmt(v) for v in schema["enum"])
        errs.append(
            FieldError(
                path,
                "FieldValueNotSupported",
                f"{path}: Unsupported value: {_fmt(value)}: supported values: {supported}",
            )
        )
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema:
            lo = schema["minimum"]
            if schema.get("exclusiveMinimum") is True and value <= lo:
                _invalid(errs, path, value, f"{path} in body should be greater than {lo}")
            elif value < lo:
                _invalid(errs, path, value, f"{path} in body should be greater than or equal to {lo}")
        if "maximum" in schema:
            hi = schema["maximum"]
            if schema.get("exclusiveMaximum") is True and value >= hi:
                _invalid(errs, path, value, f"{path} in body should be less than {hi}")
            elif value > hi:
                _invalid(errs, path, value, f"{path} in body should be less than or equal to {hi}")
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            _invalid(errs, path, value, f"{path} in body should be at least {schema['minLength']} chars long")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errs.append(
                FieldError(
                    path,
                    "FieldValueTooLong",
                    f"{path}: Too long: may not be more than {schema['maxLength']} bytes",
                )
            )
        if "pattern" in schema and not re.search(schema["pattern"], value):
            _invalid(errs, path, value, f"{path} in body should match '{schema['pattern']}'")
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            _invalid(errs, path, value, f"{path} in body should have at least {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errs.append(
                FieldError(
                    path,
                    "FieldValueTooMany",
                    f"{path}: Too many: {len(value)}: must have at most {schema['maxItems']} items",
                )
            )
        list_type = schema.get("x-kubernetes-list-type")
        if list_type in ("map", "set"):
            seen: set[str] = set()
            for i, item in enumerate(value):
                if list_type == "map" and isinstance(item, dict):
                    ident = {k: item.get(k) for k in schema.get("x-kubernetes-list-map-keys") or []}
                else:
                    ident = item
                token = json.dumps(ident, sort_keys=True)
                if token in seen:
                    sub = f"{path}[{i}]"
                    errs.append(
                        FieldError(sub, "FieldValueDuplicate", f"{sub}: Duplicate value: {_fmt(ident)}")
                    )
                seen.add(token)
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                _validate(item, items, f"{path}[{i}]", errs)
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for req in schema.get("required", []):
            if req not in value:
                sub = _join(path, req)
                errs.append(FieldError(sub, "FieldValueRequired", f"{sub}: Required value"))
        if "minProperties" in schema and len(value) < schema["minProperties"]:
            _invalid(
                errs, path, value, f"{path} in body should have at least {schema['minProperties']} properties"
            )
        if "maxProperties" in schema and len(value) > schema["maxProperties"]:
            _invalid(
                errs, path, value, f"{path} in body should have at most {schema['maxProperties']} properties"
            )
        addl = schema.get("additionalProperties")
        for key, item in value.items():
            if not path and key in ("apiVersion", "kind", "metadata"):
                continue
            if isinstance(passed, dict) and key in passed and passed[key] == item:
                continue
            if key in props:
                _validate(item, props[key], _join(path, key), errs)
            elif isinstance(addl, dict):
                _validate(item, addl, _join(path, key), errs)
