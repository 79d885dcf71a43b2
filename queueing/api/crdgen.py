"""CustomResourceDefinitions generated from the pydantic models (pure: models in, dicts out).

The models in ``queueing.api.v1beta1`` are the single source of truth. This module walks their
fields and produces structural ``apiextensions.k8s.io/v1`` CRDs:

* types from the annotations (``X | None`` is optional, ``list[X]`` an array, ``dict[str, X]`` a map,
  ``Literal[...]`` an enum, ``Quantity`` the usual int-or-string quantity, ``Any`` /
  ``dict[str, Any]`` and foreign opaque types preserve unknown fields);
* ``required`` from fields without a default; ``description`` from ``Field(description=...)`` and the
  class docstring (so ``kubectl explain`` is useful);
* numeric and length bounds from pydantic's constraints (``ge``/``le``/``min_length``/``max_length``);
* extra OpenAPI keywords from :class:`CrdSchema` markers in ``Annotated[...]`` or the field's
  ``json_schema_extra``; CEL rules (``x-kubernetes-validations``) from a model's ``CEL_RULES``;
* names, scope, short names, categories and printer columns from a kind's ``CRD`` (:class:`CrdInfo`).

:func:`structural_problems` checks a schema against the structural-schema rules the API server
enforces, so a generated CRD that the server would reject fails a test here first.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import annotated_types
from pydantic import BaseModel

from queueing.api.base import KubeModel, KubeObject, ObjectMeta
from queueing.api.quantity import Quantity

__all__ = [
    "AGE_COLUMN",
    "QUANTITY_PATTERN",
    "CelRule",
    "CrdInfo",
    "CrdSchema",
    "PrinterColumn",
    "all_crds",
    "crd_for",
    "schema_for_model",
    "structural_problems",
]

# the pattern controller-gen emits for resource.Quantity
QUANTITY_PATTERN = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"


@dataclass(frozen=True)
class CrdSchema:
    """Extra OpenAPI keywords for the CRD schema of an ``Annotated`` type or field.

    Example: ``Annotated[str, CrdSchema(pattern="^[a-z]+$", maxLength=63)]``.
    """

    items: tuple[tuple[str, Any], ...]

    def __init__(self, **keywords: Any) -> None:
        # a tuple, so the marker is hashable (Annotated metadata must be)
        object.__setattr__(self, "items", tuple(keywords.items()))

    @property
    def keywords(self) -> dict[str, Any]:
        return dict(self.items)


@dataclass(frozen=True)
class CelRule:
    """One ``x-kubernetes-validations`` entry (a CEL rule the API server checks)."""

    rule: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"rule": self.rule, "message": self.message}


@dataclass(frozen=True)
class PrinterColumn:
    name: str
    json_path: str
    type: Literal["string", "integer", "number", "boolean", "date"]
    description: str
    priority: int = 0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "type": self.type,
            "description": self.description,
            "jsonPath": self.json_path,
        }
        if self.priority:
            out["priority"] = self.priority
        return out


@dataclass(frozen=True)
class CrdInfo:
    """What a CRD needs besides the schema."""

    plural: str
    scope: Literal["Namespaced", "Cluster"]
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ("queueing",)
    printer_columns: tuple[PrinterColumn, ...] = field(default_factory=tuple)


AGE_COLUMN = PrinterColumn("Age", ".metadata.creationTimestamp", "date", "Time since the object was created")

_STD_DESCRIPTIONS = {
    "apiVersion": (
        "APIVersion defines the versioned schema of this representation of an object. Servers should "
        "convert recognized schemas to the latest internal value, and may reject unrecognized values."
    ),
    "kind": (
        "Kind is a string value representing the REST resource this object represents. Servers may infer "
        "this from the endpoint the client submits requests to. In CamelCase."
    ),
    "metadata": "Standard object metadata.",
}


class SchemaError(TypeError):
    """A model field whose type has no structural OpenAPI form."""


# ------------------------------------------------------------------ schema walking
def _opaque(description: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    if description:
        out["description"] = description
    return out


def _quantity_schema() -> dict[str, Any]:
    return {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": QUANTITY_PATTERN,
        "x-kubernetes-int-or-string": True,
    }


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _apply_metadata(schema: dict[str, Any], metadata: Iterable[Any]) -> None:
    for m in metadata:
        if isinstance(m, CrdSchema):
            schema.update(m.keywords)
            continue
        kind = schema.get("type")
        if isinstance(m, annotated_types.Ge):
            schema["minimum"] = m.ge
        elif isinstance(m, annotated_types.Gt):
            schema["minimum"] = m.gt
            schema["exclusiveMinimum"] = True
        elif isinstance(m, annotated_types.Le):
            schema["maximum"] = m.le
        elif isinstance(m, annotated_types.Lt):
            schema["maximum"] = m.lt
            schema["exclusiveMaximum"] = True
        elif isinstance(m, annotated_types.MinLen):
            key = {"array": "minItems", "object": "minProperties"}.get(str(kind), "minLength")
            schema[key] = m.min_length
        elif isinstance(m, annotated_types.MaxLen):
            key = {"array": "maxItems", "object": "maxProperties"}.get(str(kind), "maxLength")
            schema[key] = m.max_length
        elif hasattr(m, "metadata") and isinstance(getattr(m, "metadata", None), list):
            # a FieldInfo nested inside Annotated: its constraints
            _apply_metadata(schema, m.metadata)


def _schema_for_type(tp: Any, opaque_models: frozenset[type]) -> dict[str, Any]:
    """Schema of a type annotation; ``None`` members of a union are ignored (optional)."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        base, *meta = typing.get_args(tp)
        schema = _schema_for_type(base, opaque_models)
        _apply_metadata(schema, meta)
        return schema
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(members) != 1:
            raise SchemaError(f"union {tp!r} has no structural schema")
        return _schema_for_type(members[0], opaque_models)
    if origin is Literal:
        values = list(typing.get_args(tp))
        if all(isinstance(v, str) for v in values):
            return {"type": "string", "enum": values}
        if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            return {"type": "integer", "enum": values}
        raise SchemaError(f"mixed Literal {tp!r}")
    if origin is list:
        (item,) = typing.get_args(tp)
        return {"type": "array", "items": _schema_for_type(item, opaque_models)}
    if origin is dict:
        key, value = typing.get_args(tp)
        if key is not str and typing.get_origin(key) is not typing.Annotated:
            raise SchemaError(f"map keys must be strings: {tp!r}")
        if value is Any:
            return _opaque()
        return {"type": "object", "additionalProperties": _schema_for_type(value, opaque_models)}
    if tp is Any:
        return {"x-kubernetes-preserve-unknown-fields": True}
    if tp is Quantity:
        return _quantity_schema()
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer", "format": "int64"}
    if tp is float:
        return {"type": "number"}
    if tp is str:
        return {"type": "string"}
    if _is_model(tp):
        if tp in opaque_models or tp is ObjectMeta:
            return _opaque()
        return schema_for_model(tp, opaque_models)
    raise SchemaError(f"no CRD schema for type {tp!r}")


def schema_for_model(model: type[BaseModel], opaque_models: frozenset[type] = frozenset()) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of a pydantic model (nested models inlined)."""
    props: dict[str, Any] = {}
    required: list[str] = []
    for name, info in model.model_fields.items():
        wire = info.alias or name
        schema = _schema_for_type(info.annotation, opaque_models)
        _apply_metadata(schema, info.metadata)
        extra = info.json_schema_extra
        if isinstance(extra, dict):
            schema.update(extra)
        if info.description:  # the field's description wins over the nested type's docstring
            schema = {
                "description": info.description,
                **{k: v for k, v in schema.items() if k != "description"},
            }
        elif wire in _STD_DESCRIPTIONS and issubclass(model, KubeObject):
            schema = {"description": _STD_DESCRIPTIONS[wire], **schema}
        default = info.default
        if (
            not info.is_required()
            and default is not None
            and info.default_factory is None
            and isinstance(default, str | int | bool)
        ):
            schema["default"] = default
        props[wire] = schema
        if info.is_required():
            required.append(wire)
    out: dict[str, Any] = {"type": "object"}
    doc = _doc(model)
    if doc:
        out["description"] = doc
    out["properties"] = props
    if required:
        out["required"] = required
    own_rules: tuple[CelRule, ...] = model.__dict__.get("CEL_RULES", ())
    if own_rules:
        out["x-kubernetes-validations"] = [r.to_dict() for r in own_rules]
    return out


def _doc(model: type) -> str:
    doc = model.__dict__.get("__doc__")
    if not doc or model in (KubeModel, KubeObject):
        return ""
    # first paragraph block, dedented and joined: what `kubectl explain` shows
    lines = [ln.strip().replace("``", "") for ln in doc.strip().splitlines()]
    paragraphs: list[str] = []
    cur: list[str] = []
    for ln in lines:
        if ln:
            cur.append(ln)
        elif cur:
            paragraphs.append(" ".join(cur))
            cur = []
    if cur:
        paragraphs.append(" ".join(cur))
    return "\n\n".join(paragraphs)


# ------------------------------------------------------------------ CRDs
def crd_for(
    kind: type[KubeObject], group: str, version: str, opaque_models: frozenset[type] = frozenset()
) -> dict[str, Any]:
    """The CRD of one kind (a ``KubeObject`` subclass with ``KIND`` and ``CRD``)."""
    info: CrdInfo = getattr(kind, "CRD")  # noqa: B009 - ClassVar declared on the kinds
    schema = schema_for_model(kind, opaque_models)
    # apiVersion / kind / metadata exactly as controller-gen writes them
    props = schema["properties"]
    props["apiVersion"] = {"description": _STD_DESCRIPTIONS["apiVersion"], "type": "string"}
    props["kind"] = {"description": _STD_DESCRIPTIONS["kind"], "type": "string"}
    props["metadata"] = {"type": "object"}
    order = ["apiVersion", "kind", "metadata"]
    schema["properties"] = {k: props[k] for k in order} | {k: v for k, v in props.items() if k not in order}
    singular = kind.KIND.lower()
    names: dict[str, Any] = {
        "kind": kind.KIND,
        "listKind": f"{kind.KIND}List",
        "plural": info.plural,
        "singular": singular,
    }
    if info.short_names:
        names["shortNames"] = list(info.short_names)
    if info.categories:
        names["categories"] = list(info.categories)
    ver: dict[str, Any] = {"name": version, "served": True, "storage": True}
    if info.printer_columns:
        ver["additionalPrinterColumns"] = [c.to_dict() for c in info.printer_columns]
    ver["schema"] = {"openAPIV3Schema": schema}
    if "status" in kind.model_fields:
        ver["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{info.plural}.{group}"},
        "spec": {"group": group, "names": names, "scope": info.scope, "versions": [ver]},
    }


def all_crds() -> list[dict[str, Any]]:
    """Every CRD of the project, in a stable order (by plural name)."""
    from queueing.api import core, v1beta1

    opaque = frozenset({core.PodTemplateSpec})
    crds = [crd_for(k, v1beta1.GROUP, v1beta1.VERSION, opaque) for k in v1beta1.KINDS]
    return sorted(crds, key=lambda c: str(c["metadata"]["name"]))


# ------------------------------------------------------------------ structural check
_ALLOWED_KEYS = {
    "type",
    "format",
    "description",
    "properties",
    "required",
    "items",
    "additionalProperties",
    "enum",
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "uniqueItems",
    "multipleOf",
    "default",
    "nullable",
    "anyOf",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-int-or-string",
    "x-kubernetes-validations",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-embedded-resource",
}
_TYPES = {"object", "array", "string", "integer", "number", "boolean"}
_INT_OR_STRING = [{"type": "integer"}, {"type": "string"}]


def structural_problems(schema: Mapping[str, Any], path: str = "") -> list[str]:
    """Violations of the Kubernetes structural-schema rules (empty when the schema is structural).

    Checked: only known keywords (no ``$ref``, ``title``, ``definitions``, ``allOf``, ...); every node has
    a ``type`` unless it is int-or-string or preserves unknown fields; ``anyOf`` only in the int-or-string
    form; no ``default: null``; ``uniqueItems: true`` is forbidden; ``properties`` and
    ``additionalProperties`` not both; arrays have ``items``; list-map keys are required or defaulted;
    CEL rules carry a rule and a message.
    """
    where = path or "<root>"
    out: list[str] = []
    for key in schema:
        if key not in _ALLOWED_KEYS:
            out.append(f"{where}: keyword {key!r} is not allowed in a structural schema")
    int_or_string = schema.get("x-kubernetes-int-or-string") is True
    preserve = schema.get("x-kubernetes-preserve-unknown-fields") is True
    tp = schema.get("type")
    if tp is None and not (int_or_string or preserve):
        out.append(f"{where}: missing type")
    if tp is not None and tp not in _TYPES:
        out.append(f"{where}: unknown type {tp!r}")
    if "anyOf" in schema and not (int_or_string and schema["anyOf"] == _INT_OR_STRING):
        out.append(f"{where}: anyOf is only allowed as the int-or-string pattern")
    if int_or_string and tp is not None:
        out.append(f"{where}: x-kubernetes-int-or-string must not have a type")
    if "default" in schema and schema["default"] is None:
        out.append(f"{where}: default must not be null")
    if schema.get("uniqueItems") is True:
        out.append(f"{where}: uniqueItems: true is not allowed")
    if "properties" in schema and "additionalProperties" in schema:
        out.append(f"{where}: properties and additionalProperties are mutually exclusive")
    if tp == "array" and "items" not in schema:
        out.append(f"{where}: array without items")
    if tp != "object" and ("properties" in schema or "additionalProperties" in schema):
        out.append(f"{where}: properties on a non-object")
    if tp != "array" and "items" in schema:
        out.append(f"{where}: items on a non-array")
    if "enum" in schema and tp == "string" and not all(isinstance(v, str) for v in schema["enum"]):
        out.append(f"{where}: enum values must match the type")
    for rule in schema.get("x-kubernetes-validations", []):
        if not rule.get("rule") or not rule.get("message"):
            out.append(f"{where}: a validation rule needs rule and message")
    props = schema.get("properties", {})
    for req in schema.get("required", []):
        if req not in props:
            out.append(f"{where}: required field {req!r} is not a property")
    for name, sub in props.items():
        out.extend(structural_problems(sub, f"{path}.{name}" if path else name))
    add = schema.get("additionalProperties")
    if isinstance(add, Mapping):
        out.extend(structural_problems(add, f"{where}[*]"))
    items = schema.get("items")
    if isinstance(items, Mapping):
        if schema.get("x-kubernetes-list-type") == "map":
            item_props = items.get("properties", {})
            item_req = set(items.get("required", []))
            for key in schema.get("x-kubernetes-list-map-keys", []):
                if key not in item_props:
                    out.append(f"{where}: list-map key {key!r} is not a property of the items")
                elif key not in item_req and "default" not in item_props[key]:
                    out.append(f"{where}: list-map key {key!r} must be required or defaulted")
        out.extend(structural_problems(items, f"{where}[]"))
    return out
