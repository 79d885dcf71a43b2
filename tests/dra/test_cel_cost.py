"""CEL cost at the edge (issue #18): the runtime's iteration budget is a per-selector runtime error
(``CELCostError``, never an exception escaping), and the API server's estimated-cost limit for DRA
selectors refuses nested comprehensions over large lists before any device is seen."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from queueing.api.registry import parse_object
from queueing.cli import main
from queueing.dra.cel import CELCostError, CELRuntimeError, DeviceInput, compile_selector
from queueing.dra.cel_cost import SELECTOR_MAX_COST, check_selector_cost, estimated_cost, selector_problems

SCENARIO = Path(__file__).resolve().parents[1] / "reliability" / "data" / "small-scenario.yaml"
L300 = "[" + ",".join(str(i) for i in range(300)) + "]"
NESTED3 = f"{L300}.all(x, {L300}.all(y, {L300}.all(z, x + y + z >= 0)))"
DEVICE = DeviceInput.from_qualified("gpu.example.com", {"index": 0}, {})


def test_the_runtime_budget_is_a_runtime_error_of_the_selector() -> None:
    sel = compile_selector(NESTED3)
    with pytest.raises(CELCostError) as e:
        sel.matches(DEVICE)
    assert isinstance(e.value, CELRuntimeError)  # handled wherever runtime errors are
    assert e.value.message.startswith("evaluation failed: cost limit exceeded (Iteration budget exceeded)")


@pytest.mark.parametrize(
    ("expression", "at_most"),
    [
        ('device.driver == "gpu.example.com"', 10),
        ('device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0', 20),
        ('device.attributes["gpu.example.com"].exists(k, k.startsWith("x"))', 1000),
        (f"{L300}.all(x, x >= 0)", 5000),
    ],
)
def test_ordinary_selectors_cost_little(expression: str, at_most: int) -> None:
    assert estimated_cost(compile_selector(expression)) <= at_most
    check_selector_cost(expression)


@pytest.mark.parametrize(
    "expression",
    [
        NESTED3,
        f"{L300}.exists(x, {L300}.exists(y, {L300}.exists(z, x == y + z)))",
        f"{L300}.map(x, {L300}.map(y, {L300}.filter(z, z > x + y))).size() > 0",
    ],
)
def test_nested_comprehensions_over_large_lists_exceed_the_api_servers_limit(expression: str) -> None:
    assert estimated_cost(compile_selector(expression)) > SELECTOR_MAX_COST
    with pytest.raises(CELCostError, match="exceeds the limit of 1000000"):
        check_selector_cost(expression)


def test_selector_problems_name_the_field() -> None:
    claim = parse_object(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "default"},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "a",
                            "exactly": {
                                "deviceClassName": "gpu",
                                "selectors": [{"cel": {"expression": "true"}}],
                            },
                        },
                        {
                            "name": "b",
                            "firstAvailable": [
                                {
                                    "name": "s",
                                    "deviceClassName": "gpu",
                                    "selectors": [{"cel": {"expression": NESTED3}}],
                                }
                            ],
                        },
                    ]
                }
            },
        }
    )
    (p,) = selector_problems(claim)
    assert p.path == "spec.devices.requests[1].firstAvailable[0].selectors[0].cel.expression"
    assert p.message.startswith("CEL compile error: compilation failed: estimated cost ")


L100 = "[" + ",".join(str(i) for i in range(100)) + "]"
NESTED2 = (
    f"{L100}.all(x, {L100}.all(y, x + y >= 0))"  # under the API server's estimate, over the runtime budget
)


def test_a_selector_over_the_runtime_budget_is_a_pending_reason_and_others_are_admitted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The scheduling cycle (here through ``queueing simulate``, the controller's cycle) turns the budget
    error into the workload's reason: the Job of the other class is admitted in the same run."""
    assert estimated_cost(compile_selector(NESTED2)) <= SELECTOR_MAX_COST
    docs = [d for d in yaml.safe_load_all(SCENARIO.read_text()) if d]
    costly = copy.deepcopy(next(d for d in docs if d["kind"] == "DeviceClass"))
    costly["metadata"]["name"] = "costly.example.com"
    costly["spec"]["selectors"] = [{"cel": {"expression": NESTED2}}]
    cq = next(d for d in docs if d["kind"] == "ClusterQueue")
    group = cq["spec"]["resourceGroups"][0]
    group["coveredResources"].append("costly.example.com")
    group["flavors"][0]["resources"].append({"name": "costly.example.com", "nominalQuota": 4})
    tmpl = copy.deepcopy(next(d for d in docs if d["kind"] == "ResourceClaimTemplate"))
    tmpl["metadata"]["name"] = "costly"
    tmpl["spec"]["spec"]["devices"]["requests"][0]["exactly"] = {"deviceClassName": "costly.example.com"}
    job = copy.deepcopy(next(d for d in docs if d["kind"] == "Job"))
    job["metadata"]["name"] = "j-costly"
    job["spec"]["template"]["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = "costly"
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump_all([*docs, costly, tmpl, job], sort_keys=False))
    assert main(["simulate", "-f", str(f), "-o", "json"]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    admitted = {e["job"] for e in events if e["event"] == "Admitted"}
    reasons = [e["reason"] for e in events if e["event"] == "Inadmissible" and e["job"] == "default/j-costly"]
    assert "default/j1" in admitted and "default/j-costly" not in admitted
    assert reasons and "DeviceClass costly.example.com: spec.selectors[0].cel.expression" in reasons[0]
    assert "cost limit exceeded (Iteration budget exceeded)" in reasons[0]
