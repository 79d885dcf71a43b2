"""apiVersion/kind -> model, and parsing of any object we model (used by the CLIs and loaders).

    model_for("queueing.dra.io/v1beta1", "ClusterQueue") -> ClusterQueue
    parse_object({"apiVersion": ..., "kind": ..., ...})  -> KubeObject  (ObjectError on bad input)

Kinds are found in ``queueing.api.v1beta1`` (ours), ``queueing.api.resource`` (resource.k8s.io) and
``queueing.api.core`` (core, batch, scheduling, coordination); each module is imported only when first
needed and skipped if it does not exist.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from pydantic import ValidationError

from queueing.api.base import KubeObject, format_errors

__all__ = ["ObjectError", "format_errors", "known_kinds", "model_for", "parse_object"]

_MODULES = ("queueing.api.v1beta1", "queueing.api.resource", "queueing.api.core", "queueing.api.apps")


class ObjectError(ValueError):
    """An object that is not a valid instance of its kind; the message names object and field."""

    def __init__(self, ref: str, problems: list[str]) -> None:
        super().__init__("; ".join(f"{ref}: {p}" for p in problems))
        self.ref = ref
        self.problems = problems


@functools.cache
def _kinds_of(module_name: str) -> Mapping[tuple[str, str], type[KubeObject]]:
    """The kinds a module defines, read once: its classes are fixed when it is imported (every
    ``parse_object`` -- each object the emulator stores, each document a scenario loads -- asked
    this of the four modules, ~10 us each)."""
    try:
        mod = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name == module_name:
            return MappingProxyType({})
        raise
    out: dict[tuple[str, str], type[KubeObject]] = {}
    for value in vars(mod).values():
        if (
            isinstance(value, type)
            and issubclass(value, KubeObject)
            and value.__module__ == module_name
            and value.KIND
            and value.API_VERSION
        ):
            out[(value.API_VERSION, value.KIND)] = value
    return MappingProxyType(out)


def known_kinds() -> dict[tuple[str, str], type[KubeObject]]:
    """Every modelled kind by ``(apiVersion, kind)``."""
    out: dict[tuple[str, str], type[KubeObject]] = {}
    for m in _MODULES:
        out.update(_kinds_of(m))
    return out


def model_for(api_version: str, kind: str) -> type[KubeObject] | None:
    """The model of an ``apiVersion``/``kind``, or ``None`` if we do not model it."""
    for m in _MODULES:
        found = _kinds_of(m).get((api_version, kind))
        if found is not None:
            return found
    return None


def parse_object(obj: Any) -> KubeObject:
    """Parse a dict (as read from YAML/JSON or the API) into the model of its apiVersion/kind.

    Raises :class:`ObjectError` (``Kind name: field.path: message``) for an unknown kind or invalid fields.
    """
    if not isinstance(obj, dict):
        raise ObjectError("<object>", [f"expected a mapping, got {type(obj).__name__}"])
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    raw_meta = obj.get("metadata")
    meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    name = meta.get("name") or meta.get("generateName") or "<unnamed>"
    ns = meta.get("namespace")
    ref = f"{kind or '<no kind>'} {f'{ns}/' if ns else ''}{name}"
    if not isinstance(api_version, str) or not isinstance(kind, str):
        raise ObjectError(ref, ["apiVersion and kind must be set"])
    model = model_for(api_version, kind)
    if model is None:
        raise ObjectError(ref, [f"unknown kind {kind!r} in apiVersion {api_version!r}"])
    try:
        return model.model_validate(obj)
    except ValidationError as e:
        raise ObjectError(ref, format_errors(e)) from None
