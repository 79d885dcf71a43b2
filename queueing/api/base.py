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

from collections.abc import Callable
from typing import Any, ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from queueing.api.validation import check_dns_label, check_dns_subdomain, check_job_name

__all__ = [
    "FieldError",
    "KubeModel",
    "KubeObject",
    "ObjectMeta",
    "OwnerReference",
    "ValidationError",
    "format_errors",
    "format_validation_error",
]


class FieldError(ValueError):
    """A rule on a field broke; ``path`` is relative to the model that raised it (camelCase).
    :func:`format_errors` joins it to the location pydantic reports."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


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


#: ``KubeObject.NAME_RULE`` -> the check of ``metadata.name``
_NAME_CHECKS: dict[str, Callable[[str], str]] = {
    "subdomain": check_dns_subdomain,
    "label": check_dns_label,
    "job": check_job_name,
}


class KubeObject(KubeModel):
    """A top-level object with apiVersion/kind/metadata."""

    API_VERSION: ClassVar[str] = ""
    KIND: ClassVar[str] = ""
    #: the API server's rule for ``metadata.name`` (``queueing.api.validation``): most kinds take a DNS
    #: subdomain; Namespace a DNS label, Job a subdomain of at most 63 characters
    NAME_RULE: ClassVar[Literal["subdomain", "label", "job"]] = "subdomain"

    api_version: str | None = None
    kind: str | None = None
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)

    @model_validator(mode="after")
    def _check_names(self) -> Self:
        meta = self.metadata
        name, namespace = meta.name, meta.namespace
        if isinstance(name, str) and name:
            try:
                _NAME_CHECKS[self.NAME_RULE](name)
            except ValueError as e:
                raise FieldError("metadata.name", str(e)) from None
        if isinstance(namespace, str) and namespace:
            try:
                check_dns_label(namespace)
            except ValueError as e:
                raise FieldError("metadata.namespace", str(e)) from None
        return self

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


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not out:
            out = str(part)
        else:
            out += f".{part}"
    return out


def format_errors(err: ValidationError) -> list[str]:
    """One ``field.path: message`` per problem, with paths in wire (camelCase) names
    (``spec.devices.requests[0].exactly.count``); a :class:`FieldError` adds its own path."""
    problems = []
    for e in err.errors():
        path = _path(tuple(e["loc"]))
        msg = e["msg"]
        cause = (e.get("ctx") or {}).get("error")
        if isinstance(cause, FieldError):
            if cause.path:
                path = f"{path}.{cause.path}" if path else cause.path
            msg = cause.reason
        elif msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        problems.append(f"{path or '<root>'}: {msg}")
    return problems


def format_validation_error(err: ValidationError, obj_ref: str) -> str:
    """All problems on one line: ``<kind/name>: field.path: message; ...``."""
    return "; ".join(f"{obj_ref}: {p}" for p in format_errors(err))
