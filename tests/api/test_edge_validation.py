"""The API server's validation in the models (issue #18): resource.k8s.io/v1 names and limits, attribute
typing, non-negative capacities and requests, ``count``, Job names and int32 fields, namespaces, and
quantities that do not fit the ledger's NUMERIC(38, 9) column; ``field_errors``, the entry point that
never raises."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from queueing.api.quantity import Quantity
from queueing.api.registry import ObjectError, parse_object
from queueing.api.validation import LEDGER_QUANTITY_LIMIT, FieldProblem, field_errors, is_storable
from queueing.testing import crd_rules

REPO = Path(__file__).resolve().parents[2]


def slice_(devices: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "n1-gpus"},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": "n1",
            "pool": {"name": "n1"},
            "devices": devices if devices is not None else [{"name": "gpu-0"}],
            **spec,
        },
    }


def template(request: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t", "namespace": "default"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", **request}]}}},
    }


def cq(quota: Any, **resource: Any) -> dict[str, Any]:
    return {
        "apiVersion": "queueing.dra.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "team"},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [
                        {"name": "default", "resources": [{"name": "cpu", "nominalQuota": quota, **resource}]}
                    ],
                }
            ]
        },
    }


def problem(obj: dict[str, Any]) -> str:
    with pytest.raises(ObjectError) as e:
        parse_object(obj)
    return str(e.value)


@pytest.mark.parametrize("name", ["", "GPU-0", "gpu_0", "ünicode", "a" * 64, "-gpu", "gpu.0"])
def test_device_names_are_dns_labels(name: str) -> None:
    msg = problem(slice_([{"name": name}]))
    assert msg.startswith("ResourceSlice n1-gpus: spec.devices[0].name: "), msg


def test_at_most_128_devices_and_64_with_counters() -> None:
    parse_object(slice_([{"name": f"d{i}"} for i in range(128)]))
    assert "spec.devices: List should have at most 128 items" in problem(
        slice_([{"name": f"d{i}"} for i in range(129)])
    )
    counters = [{"name": "cs", "counters": {"c": {"value": "1"}}}]
    consuming = [
        {"name": f"d{i}", "consumesCounters": [{"counterSet": "cs", "counters": {"c": {"value": "1"}}}]}
        for i in range(65)
    ]
    msg = problem(slice_(consuming, sharedCounters=counters))
    assert "spec.devices: at most 64 devices when a device has taints or consumes counters, got 65" in msg
    parse_object(slice_(consuming[:64], sharedCounters=counters))


@pytest.mark.parametrize(
    "attr",
    [
        {},
        {"int": 1, "string": "x"},
        {"bool": True, "int": 0},
        {"version": "1.2"},
        {"version": "v1.2.3"},
        {"version": "१.२.३"},
        {"int": True},
        {"bool": "yes"},
        {"string": "x" * 65},
    ],
)
def test_attributes_have_exactly_one_valid_value(attr: dict[str, Any]) -> None:
    msg = problem(slice_([{"name": "gpu-0", "attributes": {"index": attr}}]))
    assert "spec.devices[0].attributes.index" in msg, msg


def test_valid_attributes() -> None:
    s = parse_object(
        slice_(
            [
                {
                    "name": "gpu-0",
                    "attributes": {"a": {"int": 1}, "b": {"version": "1.2.3-rc.1+b"}, "c": {"bool": False}},
                }
            ]
        )
    )
    assert s.to_dict()["spec"]["devices"][0]["attributes"]["c"] == {"bool": False}


def test_negative_capacities_and_requests_are_invalid() -> None:
    assert "spec.devices[0].capacity.memory.value: must be non-negative, got -80Gi" in problem(
        slice_([{"name": "gpu-0", "capacity": {"memory": {"value": "-80Gi"}}}])
    )
    msg = problem(
        template({"exactly": {"deviceClassName": "gpu", "capacity": {"requests": {"memory": "-1"}}}})
    )
    assert (
        "spec.spec.devices.requests[0].exactly.capacity.requests.memory: must be non-negative, got -1" in msg
    )


@pytest.mark.parametrize("count", [0, -3, True, "2", 1.0, 2**63])
def test_count_is_an_integer_of_at_least_1(count: Any) -> None:
    msg = problem(template({"exactly": {"deviceClassName": "gpu", "count": count}}))
    assert msg.startswith("ResourceClaimTemplate default/t: spec.spec.devices.requests[0].exactly.count: "), (
        msg
    )


def test_claim_and_namespace_names() -> None:
    assert "metadata.namespace" in problem(
        dict(template({"exactly": {"deviceClassName": "gpu"}}), metadata={"name": "t", "namespace": "Team_A"})
    )
    assert "metadata.name" in problem(
        dict(template({"exactly": {"deviceClassName": "gpu"}}), metadata={"name": "T", "namespace": "a"})
    )
    assert "requests[0].name" in problem(template({"name": "GPU", "exactly": {"deviceClassName": "gpu"}}))


def job(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "default"},
        "spec": spec,
    }


@pytest.mark.parametrize("name", ["J", "a" * 64, "a_b"])
def test_job_names_as_the_api_server_checks_them(name: str) -> None:
    obj = job()
    obj["metadata"]["name"] = name
    assert "metadata.name" in problem(obj)
    obj["metadata"]["name"] = "a" * 63
    parse_object(obj)


@pytest.mark.parametrize("value", [10**40, -1, True, "3", 2**31])
def test_parallelism_is_a_non_negative_int32(value: Any) -> None:
    assert "Job default/j: spec.parallelism: " in problem(job(parallelism=value))


def test_a_negative_quota_is_invalid_not_missing() -> None:
    obj, problems = field_errors(cq(-5))
    assert obj is None
    assert problems == [
        FieldProblem(
            "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota", "must be non-negative, got -5"
        )
    ]


@pytest.mark.parametrize("field", ["nominalQuota", "borrowingLimit", "lendingLimit"])
@pytest.mark.parametrize("value", ["1e29", "1e100", str(10**30)])
def test_quantities_too_large_for_the_ledger_name_the_field(field: str, value: str) -> None:
    if field == "nominalQuota":
        obj = cq(value)
    else:
        obj = cq("4", **{field: value})
        obj["spec"]["cohortName"] = "c"
    _, problems = field_errors(obj)
    assert [p.path for p in problems] == [f"spec.resourceGroups[0].flavors[0].resources[0].{field}"]
    assert "too large" in problems[0].message and "NUMERIC(38, 9)" in problems[0].message


def test_the_largest_storable_quota_is_accepted() -> None:
    largest = "99999999999999999999999999999.999999999"
    obj, problems = field_errors(cq(largest))
    assert problems == [] and obj is not None
    assert is_storable(Quantity.parse(largest).value) and not is_storable(LEDGER_QUANTITY_LIMIT)


def test_field_errors_never_raises() -> None:
    assert field_errors("x")[1][0].path == "<root>"
    assert field_errors({"apiVersion": "v1", "kind": "Nope"})[1][0].message.startswith("unknown kind")
    deep: Any = "x"
    for _ in range(3000):
        deep = {"a": deep}
    obj, problems = field_errors(dict(cq(4), spec=deep))
    assert obj is None and problems


def _crd_schema(kind: str) -> dict[str, Any]:
    crd = yaml.safe_load((REPO / "crds" / f"queueing.dra.io_{kind}.yaml").read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_the_crd_rules_compile_and_refuse_what_the_model_refuses() -> None:
    """The generated CRDs' CEL rules (evaluated as kube-apiserver does, queueing.testing.crd_rules) agree
    with the model on the ledger bound and on negative quotas."""
    for kind in ("clusterqueues", "cohorts", "localqueues", "resourceflavors", "workloads"):
        assert crd_rules.compile_errors(_crd_schema(kind)) == [], kind
    schema = _crd_schema("clusterqueues")
    for quota, ok in [
        (4, True),
        ("99999999999999999999999999999", True),
        ("1e29", False),
        ("1e100", False),
        (-5, False),
    ]:
        errs = crd_rules.validate_rules(cq(quota), schema)
        model_ok = not field_errors(cq(quota))[1]
        assert (not errs) == ok == model_ok, (quota, errs)
    errs = crd_rules.validate_rules(cq("1e100"), schema)
    assert errs[0].message == (
        'spec.resourceGroups[0].flavors[0].resources[0]: Invalid value: "object": nominalQuota must be less '
        "than 1e29 (the ledger stores quantities as NUMERIC(38, 9))"
    )


def test_transition_rules_see_the_old_object() -> None:
    schema = _crd_schema("localqueues")
    lq = {
        "apiVersion": "queueing.dra.io/v1beta1",
        "kind": "LocalQueue",
        "metadata": {"name": "lq"},
        "spec": {"clusterQueue": "a"},
    }
    assert crd_rules.validate_rules(lq, schema) == []  # create: no oldSelf
    moved = copy.deepcopy(lq)
    moved["spec"]["clusterQueue"] = "b"
    errs = crd_rules.validate_rules(moved, schema, lq)
    assert [e.message for e in errs] == ['spec.clusterQueue: Invalid value: "string": field is immutable']


def test_a_rule_the_api_server_cannot_compile_is_reported() -> None:
    schema = {"type": "object", "x-kubernetes-validations": [{"rule": "quantity('1').sign() >= 0"}]}
    (err,) = crd_rules.compile_errors(schema)
    assert err.startswith("<root>.x-kubernetes-validations[0].rule: ") and "sign" in err


@pytest.mark.parametrize(
    "text", ["१०m", "٣s", "99999999999999999h", "2562048h", float("nan"), float("inf"), 1e19]
)
def test_durations_are_parsed_strictly(text: Any) -> None:
    from queueing.scheduling.config import parse_duration

    with pytest.raises(ValueError):
        parse_duration(text)


def test_the_longest_duration_is_gos() -> None:
    from queueing.scheduling.config import MAX_DURATION_SECONDS, parse_duration

    assert parse_duration("2562047h") == 2562047 * 3600 <= MAX_DURATION_SECONDS
