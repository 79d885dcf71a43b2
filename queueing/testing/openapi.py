"""The OpenAPI v3 documents the emulator serves at ``/openapi/v3/apis/<group>/<version>``.

* every kind gets one PATCH operation tagged with its ``x-kubernetes-group-version-kind`` that lists the
  ``fieldValidation`` parameter, so kubectl validates server-side and builds strategic merge patches of
  built-in kinds from its compiled-in types;
* every custom resource gets its schema, as the apiextensions-apiserver publishes it: the CRD's
  ``openAPIV3Schema`` under ``components.schemas["<reversed group>.<version>.<Kind>"]`` with
  ``x-kubernetes-group-version-kind``, ``metadata`` referring to ``ObjectMeta``, and a ``<Kind>List``
  schema, so that ``kubectl explain workloads.spec.podSets`` works. Built-in kinds have no schemas
  (``kubectl explain pods`` does not work).
"""

from __future__ import annotations

import copy
from typing import Any

from queueing.testing.resources import ResourceType

__all__ = ["openapi_v3", "schema_name"]

_META = "io.k8s.apimachinery.pkg.apis.meta.v1"


def schema_name(group: str, version: str, kind: str) -> str:
    """``queueing.dra.io``, ``v1beta1``, ``Workload`` -> ``io.dra.queueing.v1beta1.Workload``."""
    return (
        ".".join([*reversed(group.split(".")), version, kind])
        if group
        else f"io.k8s.api.core.{version}.{kind}"
    )


def _ref(name: str, description: str) -> dict[str, Any]:
    return {"allOf": [{"$ref": f"#/components/schemas/{name}"}], "description": description}


def _str(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


_API_VERSION = _str(
    "APIVersion defines the versioned schema of this representation of an object. Servers should convert "
    "recognized schemas to the latest internal value, and may reject unrecognized values."
)
_KIND = _str(
    "Kind is a string value representing the REST resource this object represents. Servers may infer "
    "this from the endpoint the client submits requests to. Cannot be updated. In CamelCase."
)
_STR_MAP = {"type": "object", "additionalProperties": {"type": "string", "default": ""}}

# a shortened ObjectMeta / ListMeta (the fields a user reads in `kubectl explain <kind>.metadata`)
META_SCHEMAS: dict[str, dict[str, Any]] = {
    f"{_META}.ObjectMeta": {
        "type": "object",
        "description": "ObjectMeta is metadata that all persisted resources must have, which includes all "
        "objects users must create.",
        "properties": {
            "name": _str("Name must be unique within a namespace."),
            "generateName": _str("Optional prefix used by the server to generate a unique name."),
            "namespace": _str("Namespace defines the space within which each name must be unique."),
            "labels": {
                **_STR_MAP,
                "description": "Map of string keys and values to organize and categorize objects.",
            },
            "annotations": {**_STR_MAP, "description": "Unstructured key value map stored with a resource."},
            "uid": _str("UID is the unique in time and space value for this object."),
            "resourceVersion": _str("An opaque value that represents the internal version of this object."),
            "generation": {
                "type": "integer",
                "format": "int64",
                "description": "A sequence number representing a specific generation of the desired state.",
            },
            "creationTimestamp": {
                "type": "string",
                "format": "date-time",
                "description": "The time this object was created.",
            },
            "deletionTimestamp": {
                "type": "string",
                "format": "date-time",
                "description": "The time after which this resource will be deleted.",
            },
            "finalizers": {
                "type": "array",
                "items": {"type": "string", "default": ""},
                "description": "Must be empty before the object is deleted from the registry.",
                "x-kubernetes-list-type": "set",
            },
            "ownerReferences": {
                "type": "array",
                "items": {"type": "object"},
                "description": "List of objects depended by this object.",
            },
        },
    },
    f"{_META}.ListMeta": {
        "type": "object",
        "description": "ListMeta describes metadata that synthetic resources must have.",
        "properties": {
            "continue": _str("Set if the user should page through more results."),
            "remainingItemCount": {
                "type": "integer",
                "format": "int64",
                "description": "The number of "
                "subsequent items in the list which are not included in this response.",
            },
            "resourceVersion": _str("The version of this list."),
        },
    },
}


def _crd_schemas(rt: ResourceType, group: str, version: str) -> dict[str, dict[str, Any]]:
    gvk = [{"group": group, "kind": rt.kind, "version": version}]
    schema = copy.deepcopy(rt.schema or {"type": "object", "x-kubernetes-preserve-unknown-fields": True})
    props = schema.setdefault("properties", {})
    props["apiVersion"] = {
        **_API_VERSION,
        **{k: v for k, v in props.get("apiVersion", {}).items() if k != "type"},
    }
    props["kind"] = {**_KIND, **{k: v for k, v in props.get("kind", {}).items() if k != "type"}}
    props["metadata"] = _ref(f"{_META}.ObjectMeta", "Standard object's metadata.")
    schema["x-kubernetes-group-version-kind"] = gvk
    name = schema_name(group, version, rt.kind)
    list_schema = {
        "type": "object",
        "description": f"{rt.kind}List is a list of {rt.kind}",
        "required": ["items"],
        "properties": {
            "apiVersion": _API_VERSION,
            "kind": _KIND,
            "metadata": _ref(f"{_META}.ListMeta", "Standard list metadata."),
            "items": {
                "type": "array",
                "description": f"List of {rt.plural}.",
                "items": {"$ref": f"#/components/schemas/{name}"},
            },
        },
        "x-kubernetes-group-version-kind": [{**gvk[0], "kind": f"{rt.kind}List"}],
    }
    return {name: schema, f"{name}List": list_schema}


def openapi_v3(group: str, version: str, kinds: list[ResourceType], server_version: str) -> dict[str, Any]:
    """The OpenAPI v3 document of one group/version."""
    param = {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True}}
    prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    for rt in kinds:
        scope = "/namespaces/{namespace}" if rt.namespaced else ""
        gvk = {"group": group, "version": version, "kind": rt.kind}
        op: dict[str, Any] = {
            "parameters": [param],
            "x-kubernetes-group-version-kind": gvk,
            "x-kubernetes-action": "patch",
        }
        if rt.crd:
            schemas.update(_crd_schemas(rt, group, version))
            ref = {"$ref": f"#/components/schemas/{schema_name(group, version, rt.kind)}"}
            op["responses"] = {"200": {"description": "OK", "content": {"application/json": {"schema": ref}}}}
        paths[f"{prefix}{scope}/{rt.plural}/{{name}}"] = {"patch": op}
    if schemas:
        schemas.update(copy.deepcopy(META_SCHEMAS))
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (queueing emulator)", "version": server_version},
        "paths": paths,
        "components": {"schemas": schemas},
    }
