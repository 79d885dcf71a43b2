"""docs/crds.md is rendered from the CRDs and lists every field the API server validates."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from queueing.api.crddoc import render_reference
from queueing.api.crdgen import all_crds
from queueing.cli import main
from queueing.commands import crds as crds_cmd

ROOT = Path(__file__).resolve().parents[2]


def _paths(schema: Mapping[str, Any], prefix: str) -> Iterator[str]:
    for name, sub in schema.get("properties", {}).items():
        path = f"{prefix}.{name}"
        yield path
        if sub.get("type") == "array":
            yield from _paths(sub.get("items", {}), f"{path}[]")
        else:
            yield from _paths(sub, path)


def test_committed_reference_is_current() -> None:
    assert (ROOT / "docs/crds.md").read_text() == crds_cmd.reference()


@pytest.mark.parametrize("crd", all_crds(), ids=lambda c: c["spec"]["names"]["kind"])
def test_every_field_is_documented(crd: dict[str, Any]) -> None:
    text = render_reference([crd])
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for part in ("spec", "status"):
        if part in schema.get("properties", {}):
            for path in _paths(schema["properties"][part], part):
                assert f"| `{path}` |" in text, path


def test_reference_shows_types_enums_and_printer_columns() -> None:
    text = crds_cmd.reference()
    assert "| `spec.queueingStrategy` | string |  |" in text
    assert "one of `StrictFIFO`, `BestEffortFIFO`; default `BestEffortFIFO`" in text
    assert "| `spec.resourceGroups[].flavors[].resources[].nominalQuota` | quantity | yes |" in text
    assert "Devices (`.status.admission.plannedDevices`)" in text


def test_check_fails_on_a_stale_reference(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "crds"
    docs = tmp_path / "crds.md"
    assert main(["crds", "--out", str(out), "--docs", str(docs)]) == 0
    assert main(["crds", "--check", "--out", str(out), "--docs", str(docs)]) == 0
    docs.write_text(docs.read_text().replace("ClusterQueue", "ClusterQ", 1))
    assert main(["crds", "--check", "--out", str(out), "--docs", str(docs)]) == 1
    assert "the CRD reference differs" in capsys.readouterr().err
