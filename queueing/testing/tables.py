"""Server-side ``Table`` output (``Accept: application/json;as=Table;g=meta.k8s.io;v=v1``), as kubectl asks."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from queueing.testing.jsonpath import JSONPathError, evaluate, human_duration, parse_time
from queueing.testing.resources import ResourceType

__all__ = ["table"]

_AGE = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp", "priority": 0}


def _columns(rt: ResourceType) -> list[dict[str, Any]]:
    return rt.printer_columns or [_AGE]


def _cell(col: dict[str, Any], obj: dict[str, Any], now: datetime) -> Any:
    try:
        found = evaluate(col.get("jsonPath", ""), obj)
    except JSONPathError:
        return None
    if not found:
        return None
    value = found[0]
    typ = col.get("type", "string")
    if typ == "date":
        t = parse_time(value) if isinstance(value, str) else None
        return human_duration((now - t).total_seconds()) if t else "<unknown>"
    if isinstance(value, dict | list):
        import json

        return json.dumps(value, separators=(",", ":"))
    if typ == "string" and not isinstance(value, str):
        return str(value).lower() if isinstance(value, bool) else str(value)
    return value


def _row_object(obj: dict[str, Any], include: str) -> dict[str, Any] | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata", {}),
    }


def table(
    rt: ResourceType,
    objs: list[dict[str, Any]],
    now: datetime,
    include_object: str = "Metadata",
    metadata: dict[str, Any] | None = None,
    with_headers: bool = True,
) -> dict[str, Any]:
    cols = _columns(rt)
    defs = []
    if with_headers:
        defs.append({"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace.", "priority": 0})  # fmt: skip
        for c in cols:
            defs.append(
                {
                    "name": c["name"],
                    "type": "string" if c.get("type") == "date" else c.get("type", "string"),
                    "format": c.get("format", ""),
                    "description": c.get("description", ""),
                    "priority": int(c.get("priority", 0)),
                }
            )
    rows = []
    cell: Callable[[dict[str, Any], dict[str, Any], datetime], Any] = _cell
    for obj in objs:
        row: dict[str, Any] = {
            "cells": [obj.get("metadata", {}).get("name")] + [cell(c, obj, now) for c in cols]
        }
        ro = _row_object(obj, include_object)
        if ro is not None:
            row["object"] = ro
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata or {},
        "columnDefinitions": defs,
        "rows": rows,
    }
