"""Table-driven end-to-end cases for ``queueing allocate`` (inputs and expectations in YAML).

Each file in tests/fixtures/dra/cases/ holds ``base`` objects (and optional ``include`` fixture files)
and a list of ``cases``; a case adds ``objects``, optional CLI ``args`` and states what must come out:

    expect:
      exit: 0|1|2
      node: node-1                       # the chosen node (null when not allocated)
      devices: {ns/name: ["req=device", ...]}   # every result, in order
      allocation: {ns/name: {...}}       # a subset of status.allocation that must match
      reason: [substrings]               # in the JSON "reason" when not allocated
      stderr: [substrings]               # in stderr (exit 2: the one error line)

Every case runs the real CLI entry point (``queueing.cli.main``) on a file written to a temp dir.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from queueing.cli import main

CASES_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "dra" / "cases"
FIXTURES = CASES_DIR.parent


def _load_cases() -> list[Any]:
    out = []
    for path in sorted(CASES_DIR.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        for case in doc["cases"]:
            out.append(pytest.param(path.stem, doc, case, id=f"{path.stem}:{case['name']}"))
    return out


_INCLUDE_CACHE: dict[str, list[Any]] = {}


def _include(name: str) -> list[Any]:
    if name not in _INCLUDE_CACHE:
        _INCLUDE_CACHE[name] = [d for d in yaml.safe_load_all((FIXTURES / name).read_text()) if d]
    return _INCLUDE_CACHE[name]


def _subset(expected: Any, actual: Any, path: str = "") -> None:
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{path}: expected an object, got {actual!r}"
        for k, v in expected.items():
            assert k in actual, f"{path}.{k}: missing in {actual!r}"
            _subset(v, actual[k], f"{path}.{k}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), (
            f"{path}: {actual!r} != {expected!r}"
        )
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            _subset(e, a, f"{path}[{i}]")
    else:
        assert expected == actual, f"{path}: expected {expected!r}, got {actual!r}"


@pytest.mark.parametrize(("group", "doc", "case"), _load_cases())
def test_allocate_case(
    group: str, doc: dict[str, Any], case: dict[str, Any], tmp_path: Path, capsys: Any
) -> None:
    objects: list[Any] = []
    for inc in doc.get("include", []) + case.get("include", []):
        objects.extend(_include(inc))
    objects.extend(doc.get("base", []))
    objects.extend(case.get("objects", []))
    if case.get("raw") is not None:
        text = case["raw"]
    elif case.get("format") == "json":
        text = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    elif case.get("format") == "list":
        text = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects})
    else:
        text = yaml.safe_dump_all(objects)
    f = tmp_path / ("input.json" if case.get("format") == "json" else "input.yaml")
    f.write_text(text)
    args = ["allocate", "-f", str(f), *[str(a) for a in case.get("args", [])]]
    rc = main(args)
    out, err = capsys.readouterr()
    exp = case["expect"]
    assert rc == exp["exit"], f"exit {rc}, stdout={out!r} stderr={err!r}"
    for s in exp.get("stderr", []):
        assert s in err, f"{s!r} not in stderr {err!r}"
    if rc == 2:
        errors = [line for line in err.splitlines() if not line.startswith("warning:")]
        assert len(errors) == 1, f"exit 2 must print exactly one error line, got {err!r}"
        assert out == ""
        return
    if "-o" in case.get("args", []) and "yaml" in case.get("args", []):
        result = yaml.safe_load(out)
    else:
        result = json.loads(out)
    assert result["allocated"] is (rc == 0)
    if "node" in exp:
        assert result["node"] == exp["node"]
    if rc == 1:
        assert result["claims"] == [] and result["node"] is None
        for s in exp.get("reason", []):
            assert s in result["reason"], f"{s!r} not in reason {result['reason']!r}"
        return
    by_key = {f"{c['namespace']}/{c['name']}": c["allocation"] for c in result["claims"]}
    for key, devs in exp.get("devices", {}).items():
        got = [f"{r['request']}={r['device']}" for r in by_key[key]["devices"]["results"]]
        assert got == devs, f"{key}: {got} != {devs}"
    for key, sub in exp.get("allocation", {}).items():
        _subset(sub, by_key[key], key)
    # invariant over every allocated case: no device twice (outside adminAccess/shared capacity)
    seen: set[tuple[str, str, str]] = set()
    shares: set[tuple[str, str, str, str]] = set()
    for c in result["claims"]:
        for r in c["allocation"]["devices"]["results"]:
            if "consumedCapacity" in r:  # a share of a multi-allocation device has a unique shareID
                share = (r["driver"], r["pool"], r["device"], r["shareID"])
                assert share not in shares, f"shareID {share} used twice"
                shares.add(share)
                continue
            if r.get("adminAccess"):
                continue
            k = (r["driver"], r["pool"], r["device"])
            assert k not in seen, f"device {k} allocated twice"
            seen.add(k)
