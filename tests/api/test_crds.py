"""CRDs generated from the models: committed files current, structural, documented, same rules."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from queueing.api import crdgen, v1beta1
from queueing.cli import main
from queueing.commands import crds as crds_cmd

ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = ROOT / "crds"
CRDS = {c["spec"]["names"]["kind"]: c for c in crdgen.all_crds()}


def schema(kind: str) -> dict[str, Any]:
    return CRDS[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]


def at(s: dict[str, Any], path: str) -> dict[str, Any]:
    """Follow ``a.b[].c`` through properties / items."""
    for part in path.split("."):
        arr = part.endswith("[]")
        s = s["properties"][part.removesuffix("[]")]
        if arr:
            s = s["items"]
    return s


def rules(s: dict[str, Any]) -> list[str]:
    return [r["rule"] for r in s.get("x-kubernetes-validations", [])]


# ------------------------------------------------------------------ committed == generated
def test_committed_crds_match_the_models() -> None:
    problems = crds_cmd.differences(CRD_DIR)
    assert problems == [], "run `queueing crds`:\n" + "\n".join(problems)


def test_every_kind_has_a_crd_file() -> None:
    names = {p.name for p in CRD_DIR.glob("*.yaml")}
    for kind in v1beta1.KINDS:
        assert f"queueing.dra.io_{kind.CRD.plural}.yaml" in names
    for p in CRD_DIR.glob("*.yaml"):
        (doc,) = [d for d in yaml.safe_load_all(p.read_text()) if d]
        assert doc["kind"] == "CustomResourceDefinition"


def test_check_command_reports_missing_and_changed_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["crds", "--check", "--out", str(tmp_path)]) == 1
    assert "missing" in capsys.readouterr().err
    assert main(["crds", "--out", str(tmp_path)]) == 0
    assert main(["crds", "--check", "--out", str(tmp_path)]) == 0
    f = tmp_path / "queueing.dra.io_workloads.yaml"
    f.write_text(f.read_text().replace("- wl\n", "- wk\n"))
    capsys.readouterr()
    assert main(["crds", "--check", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "queueing.dra.io_workloads.yaml: differs from the models" in err
    assert "-    - wk" in err and "+    - wl" in err


def test_generation_is_deterministic() -> None:
    assert crds_cmd.generated() == crds_cmd.generated()


# ------------------------------------------------------------------ structural
@pytest.mark.parametrize("kind", sorted(CRDS))
def test_schema_is_structural(kind: str) -> None:
    assert crdgen.structural_problems(schema(kind)) == []


def test_structural_check_catches_violations() -> None:
    bad = {
        "type": "object",
        "title": "x",
        "properties": {
            "a": {"$ref": "#/definitions/A"},
            "b": {"anyOf": [{"type": "string"}, {"type": "object"}]},
            "c": {"type": "string", "default": None},
            "d": {"type": "array"},
            "e": {"type": "integer", "x-kubernetes-int-or-string": True},
        },
        "required": ["zzz"],
    }
    found = "\n".join(crdgen.structural_problems(bad))
    for expected in (
        "'title'",
        "'$ref'",
        "a: missing type",
        "anyOf is only allowed",
        "default must not be null",
        "array without items",
        "must not have a type",
        "'zzz' is not a property",
    ):
        assert expected in found


def walk(s: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    for name, sub in s.get("properties", {}).items():
        p = f"{path}.{name}" if path else name
        yield p, sub
        yield from walk(sub, p)
    if isinstance(s.get("items"), dict):
        yield from walk(s["items"], path + "[]")
    if isinstance(s.get("additionalProperties"), dict):
        yield from walk(s["additionalProperties"], path + "[*]")


# fields of core/v1 types embedded as-is (Taint, Toleration): upstream documents them
FOREIGN = re.compile(r"^spec\.(nodeTaints|tolerations)\[\]\.")


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_every_field_is_described_for_kubectl_explain(kind: str) -> None:
    missing = [
        p
        for p, sub in walk(schema(kind))
        if p not in ("apiVersion", "kind", "metadata") and not FOREIGN.match(p) and not sub.get("description")
    ]
    assert missing == []
    assert schema(kind)["description"]


# ------------------------------------------------------------------ names, scope, columns
def test_names_scope_and_subresources() -> None:
    expect = {
        "ClusterQueue": ("clusterqueues", "Cluster", ["cq"], True),
        "LocalQueue": ("localqueues", "Namespaced", ["queue", "queues", "lq"], True),
        "Workload": ("workloads", "Namespaced", ["wl"], True),
        "ResourceFlavor": ("resourceflavors", "Cluster", ["flavor", "flavors", "rf"], True),
        "WorkloadPriorityClass": ("workloadpriorityclasses", "Cluster", ["wpc"], False),
        "Cohort": ("cohorts", "Cluster", None, True),
        "Topology": ("topologies", "Cluster", None, False),
    }
    for kind, (plural, scope, short, status) in expect.items():
        crd = CRDS[kind]
        assert crd["metadata"]["name"] == f"{plural}.queueing.dra.io"
        assert crd["spec"]["scope"] == scope
        assert crd["spec"]["names"].get("shortNames") == short
        assert crd["spec"]["names"]["categories"] == ["queueing"]
        ver = crd["spec"]["versions"][0]
        assert (ver["name"], ver["served"], ver["storage"]) == ("v1beta1", True, True)
        assert ("subresources" in ver) == status


def columns(kind: str) -> list[tuple[str, str, str]]:
    return [
        (c["name"], c["jsonPath"], c["type"])
        for c in CRDS[kind]["spec"]["versions"][0]["additionalPrinterColumns"]
    ]


def test_printer_columns() -> None:
    assert [c[0] for c in columns("Workload")] == [
        "Queue",
        "Reserved in",
        "Admitted",
        "Finished",
        "Devices",
        "Reason",
        "Age",
    ]
    assert [c[0] for c in columns("ClusterQueue")] == ["Cohort", "Strategy", "Pending", "Admitted"]


def jsonpath(obj: Any, path: str) -> Any:
    """The subset of kubectl JSONPath the columns use: ``.a.b`` and ``[?(@.k=='v')]``."""
    for m in re.finditer(r"\.(\w+)|\[\?\(@\.(\w+)=='([^']*)'\)\]", path):
        if m.group(1):
            obj = obj.get(m.group(1)) if isinstance(obj, dict) else None
        else:
            obj = next((x for x in obj or [] if x.get(m.group(2)) == m.group(3)), None)
        if obj is None:
            return None
    return obj


def test_workload_columns_resolve_on_the_admitted_example() -> None:
    docs = list(yaml.safe_load_all((ROOT / "examples/queues/workloads.yaml").read_text()))
    admitted = next(d for d in docs if d.get("status"))
    shown = {name: jsonpath(admitted, path) for name, path, _ in columns("Workload")}
    assert shown["Queue"] == "main"
    assert shown["Reserved in"] == "team-a"
    assert shown["Admitted"] == "True"
    assert shown["Finished"] is None
    assert shown["Devices"] == 2
    assert shown["Age"] == "2026-11-29T10:00:00Z"


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_column_paths_exist_in_the_schema(kind: str) -> None:
    for _, path, _ in (
        columns(kind) if "additionalPrinterColumns" in CRDS[kind]["spec"]["versions"][0] else []
    ):
        fields = re.findall(r"\.(\w+)", re.sub(r"\[\?\(.*?\)\]", "", path))
        if fields[0] == "metadata":
            continue
        s = schema(kind)
        for f in fields:
            s = s.get("items", s)
            assert f in s["properties"], f"{kind}: column path {path} is not in the schema"
            s = s["properties"][f]


# ------------------------------------------------------------------ the model's rules are in the schema
def test_the_same_rules_exist_in_the_schema() -> None:
    cq = schema("ClusterQueue")
    spec = at(cq, "spec")
    assert at(cq, "spec.queueingStrategy")["enum"] == ["StrictFIFO", "BestEffortFIFO"]
    assert at(cq, "spec.queueingStrategy")["default"] == "BestEffortFIFO"
    assert at(cq, "spec.stopPolicy")["enum"] == ["None", "Hold", "HoldAndDrain"]
    assert at(cq, "spec.preemption.withinClusterQueue")["enum"] == [
        "Never",
        "LowerPriority",
        "LowerOrNewerEqualPriority",
    ]
    assert at(cq, "spec.preemption.reclaimWithinCohort")["enum"] == ["Never", "LowerPriority", "Any"]
    assert at(cq, "spec.resourceGroups")["maxItems"] == 16
    assert any("borrowingLimit" in r and "cohortName" in r for r in rules(spec))
    assert any("lendingLimit" in r and "cohortName" in r for r in rules(spec))
    quota = at(cq, "spec.resourceGroups[].flavors[].resources[]")
    assert any("lendingLimit" in r and "compareTo" in r and "nominalQuota" in r for r in rules(quota))
    assert quota["properties"]["nominalQuota"]["x-kubernetes-int-or-string"] is True
    assert quota["properties"]["name"]["pattern"] == v1beta1.RESOURCE_NAME_PATTERN
    group = at(cq, "spec.resourceGroups[]")
    assert any("coveredResources" in r for r in rules(group))

    wl = schema("Workload")
    ps = at(wl, "spec.podSets[]")
    assert ps["properties"]["count"]["minimum"] == 0
    assert ps["properties"]["minCount"]["minimum"] == 1
    assert "has(self.minCount) ? self.minCount <= self.count : true" in rules(ps)
    assert at(wl, "spec.podSets")["maxItems"] == 8 and at(wl, "spec.podSets")["minItems"] == 1
    assert ps["properties"]["template"]["x-kubernetes-preserve-unknown-fields"] is True
    cond = at(wl, "status.conditions[]")
    assert cond["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
    assert set(cond["required"]) == {"type", "status", "lastTransitionTime", "reason", "message"}

    assert any("parentName" in r for r in rules(at(schema("Cohort"), "spec")))


def test_resource_name_pattern_agrees_with_the_model() -> None:
    pattern = re.compile(v1beta1.RESOURCE_NAME_PATTERN)
    for name in ["cpu", "hugepages-2Mi", "gpu.nvidia.com", "gpu.nvidia.com/memory", "nvidia.com/gpu"]:
        assert pattern.match(name) and v1beta1.check_resource_name(name)
    for name in ["/memory", "gpu.nvidia.com/", "a/b/c", "Gpu.com/x", "-cpu"]:
        assert not pattern.match(name)
        with pytest.raises(ValueError):
            v1beta1.check_resource_name(name)


# ------------------------------------------------------------------ the schema rejects what the model rejects
# A small evaluator for the schema keywords we emit, plus the CEL rules (cel-expr-python with `self` as
# dyn). Rules that need the Kubernetes quantity library or oldSelf (transition rules) are not evaluated
# here; that subset is checked by the model tests and, for syntax, by review against Kueue.
cel = pytest.importorskip("cel_expr_python.cel")
_ENV = cel.NewEnv(variables={"self": cel.Type.DYN})


def _cel(rule: str, value: Any) -> bool:
    result = _ENV.compile(rule).eval(_ENV.Activation({"self": value}))
    assert result.type() == cel.Type.BOOL, f"{rule}: {result.value()}"
    return bool(result.value())


def schema_errors(s: dict[str, Any], v: Any, path: str = "") -> list[str]:
    """What the API server would reject (for the keywords and rules the generated schemas use)."""
    out: list[str] = []
    where = path or "<root>"
    tp = s.get("type")
    if s.get("x-kubernetes-int-or-string"):
        if not isinstance(v, int | str) or (isinstance(v, str) and not re.match(s["pattern"], v)):
            out.append(f"{where}: not a quantity")
    elif tp == "object" and not isinstance(v, dict):
        return [f"{where}: not an object"]
    elif tp == "array" and not isinstance(v, list):
        return [f"{where}: not an array"]
    elif tp == "string" and not isinstance(v, str):
        return [f"{where}: not a string"]
    elif tp == "integer" and (not isinstance(v, int) or isinstance(v, bool)):
        return [f"{where}: not an integer"]
    if "enum" in s and v not in s["enum"]:
        out.append(f"{where}: not one of {s['enum']}")
    if "minimum" in s and v < s["minimum"]:
        out.append(f"{where}: below minimum")
    if "maximum" in s and v > s["maximum"]:
        out.append(f"{where}: above maximum")
    if "pattern" in s and isinstance(v, str) and not re.search(s["pattern"], v):
        out.append(f"{where}: does not match pattern")
    if isinstance(v, list | dict | str):
        for key in ("maxItems", "maxLength", "maxProperties"):
            if key in s and len(v) > s[key]:
                out.append(f"{where}: violates {key}")
        for key in ("minItems", "minLength", "minProperties"):
            if key in s and len(v) < s[key]:
                out.append(f"{where}: violates {key}")
    if isinstance(v, dict):
        for req in s.get("required", []):
            if req not in v:
                out.append(f"{where}.{req}: required")
        for name, sub in s.get("properties", {}).items():
            if name in v:
                out.extend(schema_errors(sub, v[name], f"{path}.{name}" if path else name))
        if isinstance(s.get("additionalProperties"), dict):
            for k, item in v.items():
                out.extend(schema_errors(s["additionalProperties"], item, f"{where}[{k}]"))
    if isinstance(v, list) and isinstance(s.get("items"), dict):
        for i, item in enumerate(v):
            out.extend(schema_errors(s["items"], item, f"{where}[{i}]"))
    if not out:
        for r in s.get("x-kubernetes-validations", []):
            if "quantity(" in r["rule"] or "oldSelf" in r["rule"]:
                continue
            if not _cel(r["rule"], v):
                out.append(f"{where}: {r['message']}")
    return out


def _examples() -> list[dict[str, Any]]:
    out = []
    for p in sorted((ROOT / "examples/queues").glob("*.yaml")):
        out.extend(d for d in yaml.safe_load_all(p.read_text()) if d)
    return out


def test_the_schema_accepts_every_example() -> None:
    docs = _examples()
    assert len(docs) >= 10
    for d in docs:
        assert schema_errors(schema(d["kind"]), d) == [], d["metadata"]["name"]


def _cq(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "queueing.dra.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "q"},
        "spec": spec,
    }


def _group(**quota: Any) -> dict[str, Any]:
    return {
        "coveredResources": ["gpu.nvidia.com", "gpu.nvidia.com/memory"],
        "flavors": [
            {
                "name": "h200",
                "resources": [
                    {"name": "gpu.nvidia.com", "nominalQuota": 4, **quota},
                    {"name": "gpu.nvidia.com/memory", "nominalQuota": "1Gi"},
                ],
            }
        ],
    }


def _wl(*pod_sets: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "queueing.dra.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": "w", "namespace": "n"},
        "spec": {"podSets": list(pod_sets), **spec},
    }


def _ps(name: str = "main", **kw: Any) -> dict[str, Any]:
    return {"name": name, "template": {"spec": {"containers": []}}, **kw}


INVALID = {
    "borrowingLimit without cohort": _cq({"resourceGroups": [_group(borrowingLimit=1)]}),
    "lendingLimit without cohort": _cq({"resourceGroups": [_group(lendingLimit=1)]}),
    "unknown queueingStrategy": _cq({"queueingStrategy": "LIFO"}),
    "unknown stopPolicy": _cq({"stopPolicy": "Pause"}),
    "17 resource groups": _cq({"resourceGroups": [_group() for _ in range(17)]}),
    "resources out of order": _cq(
        {"resourceGroups": [{**_group(), "coveredResources": ["gpu.nvidia.com/memory", "gpu.nvidia.com"]}]}
    ),
    "fewer resources than covered": _cq(
        {
            "resourceGroups": [
                {**_group(), "coveredResources": ["gpu.nvidia.com", "gpu.nvidia.com/memory", "cpu"]}
            ]
        }
    ),
    "bad resource name": _cq(
        {
            "resourceGroups": [
                {
                    "coveredResources": ["a//b"],
                    "flavors": [{"name": "f", "resources": [{"name": "a//b", "nominalQuota": 1}]}],
                }
            ]
        }
    ),
    "reclaim Never with borrowWithinCohort": _cq(
        {"preemption": {"reclaimWithinCohort": "Never", "borrowWithinCohort": {"policy": "LowerPriority"}}}
    ),
    "count < minCount": _wl(_ps(count=2, minCount=3)),
    "minCount 0": _wl(_ps(count=2, minCount=0)),
    "negative count": _wl(_ps(count=-1)),
    "two podSets with minCount": _wl(_ps("a", count=2, minCount=1), _ps("b", count=2, minCount=1)),
    "no podSets": _wl(),
    "priorityClassRef without priority": _wl(
        _ps(), priorityClassRef={"group": "queueing.dra.io", "kind": "WorkloadPriorityClass", "name": "p"}
    ),
    "claim with both sources": _wl(
        _ps(resourceClaims=[{"name": "g", "resourceClaimName": "a", "resourceClaimTemplateName": "b"}])
    ),
    "cohort limits without parent": {
        "apiVersion": "queueing.dra.io/v1beta1",
        "kind": "Cohort",
        "metadata": {"name": "c"},
        "spec": {"resourceGroups": [_group(lendingLimit=1)]},
    },
}


@pytest.mark.parametrize("case", sorted(INVALID))
def test_schema_and_model_both_reject(case: str) -> None:
    from queueing.api.registry import ObjectError, parse_object

    obj = INVALID[case]
    assert schema_errors(schema(obj["kind"]), obj) != [], f"the CRD schema accepts: {case}"
    with pytest.raises(ObjectError):
        parse_object(obj)
