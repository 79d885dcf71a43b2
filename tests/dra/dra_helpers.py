"""Small builders shared by the DRA tests (typed objects from compact arguments)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from queueing.api.core import Node
from queueing.api.resource import DeviceClass, ResourceClaim, ResourceSlice

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "dra"


def load(name: str) -> tuple[list[Node], list[ResourceSlice], list[DeviceClass]]:
    docs = [d for d in yaml.safe_load_all((FIXTURES / name).read_text()) if d]
    nodes = [Node.model_validate(d) for d in docs if d["kind"] == "Node"]
    slices = [ResourceSlice.model_validate(d) for d in docs if d["kind"] == "ResourceSlice"]
    classes = [DeviceClass.model_validate(d) for d in docs if d["kind"] == "DeviceClass"]
    return nodes, slices, classes


def claim(
    name: str,
    requests: list[dict[str, Any]],
    constraints: list[dict[str, Any]] | None = None,
    namespace: str = "default",
) -> ResourceClaim:
    devices: dict[str, Any] = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    return ResourceClaim.model_validate(
        {"metadata": {"name": name, "namespace": namespace}, "spec": {"devices": devices}}
    )


def exact(name: str, cls: str, count: int = 1, *selectors: str, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": cls, "count": count} | extra
    if selectors:
        body["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"name": name, "exactly": body}


def device_class(name: str, *selectors: str) -> DeviceClass:
    return DeviceClass.model_validate(
        {"metadata": {"name": name}, "spec": {"selectors": [{"cel": {"expression": s}} for s in selectors]}}
    )
