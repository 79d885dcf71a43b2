"""Shared pydantic v2 base for every Kubernetes object we model.

Conventions (every model in ``queueing.api`` follows them):

* Python attribute names are snake_case; the wire names are Kubernetes' camelCase (``alias``).
  Both are accepted on input (``populate_by_name``).
* Unknown fields are kept, not dropped (``extra="allow"``), so an object read from the cluster and
  written back loses nothing; the specs of our own kinds reject them instead (``v1beta1.SpecModel``,
  as ``kubectl --validate=strict``).
* ``to_dict()`` serialises back to exactly what was given: only fields that were set, camelCase,
  JSON-compatible values. ``parse(obj)`` == ``parse(parse(obj).to_dict())`` and
  ``parse(obj).to_dict() == obj`` for any valid input.
"""

from __future__ import annotations

from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

__all__ = [
    "KubeModel",
    "KubeObject",
    "ObjectMeta",
    "OwnerReference",
    "ValidationError",
    "format_validation_error",
]


class KubeModel(BaseModel):
    """Base of every nested Kubernetes structure."""

    model_config = ConfigDict(
        extra="allow",
        populate_by_name=True,
        alias_generator=to_camel,
        frozen=False,
        ser_json_inf_nan="constants",
    )

    def to_dict(self) -> dict[str, Any]:
        """The wire form: camelCase, only fields that were set, JSON-compatible."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)

    @classmethod
    def parse(cls, obj: dict[str, Any]) -> Self:
        return cls.model_validate(obj)


class OwnerReference(KubeModel):
    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(KubeModel):
    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    owner_references: list[OwnerReference] | None = None
    finalizers: list[str] | None = None


class KubeObject(KubeModel):
    """A top-level object with apiVersion/kind/metadata."""

    API_VERSION: ClassVar[str] = ""
    KIND: ClassVar[str] = ""

    api_version: str | None = None
    kind: str | None = None
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)

    @property
    def name(self) -> str:
        return self.metadata.name or ""

    @property
    def namespace(self) -> str | None:
        return self.metadata.namespace

    @property
    def key(self) -> str:
        """``namespace/name`` for namespaced objects, ``name`` otherwise."""
        ns = self.metadata.namespace
        return f"{ns}/{self.name}" if ns else self.name

    @property
    def labels(self) -> dict[str, str]:
        return self.metadata.labels or {}

    @property
    def annotations(self) -> dict[str, str]:
        return self.metadata.annotations or {}


def format_validation_error(err: ValidationError, obj_ref: str) -> str:
    """One readable line per problem: ``<kind/name>: field.path: message``."""
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "<root>"
        lines.append(f"{obj_ref}: {loc}: {e['msg']}")
    return "; ".join(lines)
