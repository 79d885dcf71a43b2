"""The queueing.dra.io/v1beta1 models: defaults, validation messages, helpers, and the registry."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from queueing.api import core, registry, resource, v1beta1
from queueing.api.quantity import Quantity
from queueing.api.registry import ObjectError, known_kinds, model_for, parse_object
from queueing.api.v1beta1 import (
    Admission,
    ClusterQueue,
    LabelSelector,
    PodSet,
    Workload,
    check_resource_name,
    quota_resource,
)

API = "queueing.dra.io/v1beta1"


def cq(spec: dict[str, Any], name: str = "team-a") -> dict[str, Any]:
    return {"apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def gpu_group(**quota: Any) -> dict[str, Any]:
    return {
        "coveredResources": ["gpu.nvidia.com", "gpu.nvidia.com/memory"],
        "flavors": [
            {
                "name": "h200",
                "resources": [
                    {"name": "gpu.nvidia.com", "nominalQuota": 4, **quota},
                    {"name": "gpu.nvidia.com/memory", "nominalQuota": "564Gi"},
                ],
            }
        ],
    }


def workload(pod_sets: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "Workload",
        "metadata": {"name": "wl", "namespace": "team-a"},
        "spec": {"queueName": "main", "podSets": pod_sets, **spec},
    }


def pod_set(name: str = "main", **kw: Any) -> dict[str, Any]:
    return {"name": name, "template": {"spec": {"containers": [{"name": "c"}]}}, **kw}


def rejected(obj: dict[str, Any]) -> str:
    with pytest.raises(ObjectError) as e:
        parse_object(obj)
    return str(e.value)


# ------------------------------------------------------------------ defaults and round trip
def test_defaults_are_typed_but_not_serialised() -> None:
    obj = cq({"resourceGroups": [gpu_group()]})
    q = parse_object(obj)
    assert isinstance(q, ClusterQueue)
    assert q.spec.queueing_strategy == "BestEffortFIFO"
    assert q.spec.stop_policy == "None"
    assert q.spec.cohort_name is None
    nominal = q.spec.resource_groups[0].flavors[0].resources[1].nominal_quota  # type: ignore[index]
    assert nominal == Quantity.parse("564Gi")
    # only what was given comes back
    assert q.to_dict() == obj


def test_podset_defaults_follow_kueue() -> None:
    wl = parse_object(workload([{"template": {"spec": {"containers": []}}}]))
    assert isinstance(wl, Workload)
    ps = wl.spec.pod_sets[0]
    assert (ps.name, ps.count, ps.min_count) == ("main", 1, None)
    assert wl.spec.active is True


def test_unknown_spec_fields_are_rejected_naming_the_field() -> None:
    # as kubectl --validate=strict: one line, the field's path, not silently dropped (issue 17)
    msg = rejected(cq({"resourceGroups": [gpu_group()], "futureField": {"x": 1}}))
    assert msg == 'ClusterQueue team-a: spec.futureField: unknown field "futureField"'
    obj = cq({"resourceGroups": [gpu_group(borrowingLimt=2)], "cohortName": "c"})
    msg = rejected(obj)
    assert msg == (
        "ClusterQueue team-a: spec.resourceGroups[0].flavors[0].resources[0].borrowingLimt: "
        'unknown field "borrowingLimt"'
    )
    assert len(msg.splitlines()) == 1
    top = {**cq({"resourceGroups": [gpu_group()]}), "sepc": {}}
    assert rejected(top) == 'ClusterQueue team-a: sepc: unknown field "sepc"'


@pytest.mark.parametrize(
    ("kind", "field"),
    [
        ("ClusterQueue", "admissionChecks"),
        ("ClusterQueue", "admissionChecksStrategy"),
    ],
)
def test_kueue_fields_that_are_not_implemented_are_rejected(kind: str, field: str) -> None:
    spec: dict[str, Any] = {"resourceGroups": [gpu_group()]} if kind == "ClusterQueue" else {}
    spec[field] = {"admissionChecks": [{"name": "prov"}]} if field == "admissionChecksStrategy" else "x"
    obj = {"apiVersion": API, "kind": kind, "metadata": {"name": "n"}, "spec": spec}
    msg = rejected(obj)
    assert msg.startswith(f'{kind} n: spec.{field}: unknown field "{field}": ')
    assert "does not implement" in msg and len(msg.splitlines()) == 1


def test_admission_scope_is_modelled() -> None:
    # Kueue's admissionScope drives admission fair sharing per ClusterQueue: a real field (in the CRD,
    # so the API server keeps it), with its values checked
    obj = cq({"resourceGroups": [gpu_group()], "admissionScope": {"admissionMode": "NoAdmissionFairSharing"}})
    assert parse_object(obj).to_dict() == obj
    bad = cq({"resourceGroups": [gpu_group()], "admissionScope": {"admissionMode": "Sometimes"}})
    assert "spec.admissionScope.admissionMode" in rejected(bad)


def test_unknown_metadata_and_status_fields_are_kept() -> None:
    # what the API server and the controller write there survives a round trip
    obj = cq({"resourceGroups": [gpu_group()]})
    obj["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    obj["status"] = {"futureStatus": 1, "conditions": []}
    assert parse_object(obj).to_dict() == obj


# ------------------------------------------------------------------ the issue's invalid specs
def test_borrowing_limit_without_cohort_names_the_field() -> None:
    msg = rejected(cq({"resourceGroups": [gpu_group(borrowingLimit=2)]}))
    assert (
        "ClusterQueue team-a: spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit: "
        "must not be set when cohortName is empty"
    ) in msg


def test_lending_limit_without_cohort_names_the_field() -> None:
    msg = rejected(cq({"resourceGroups": [gpu_group(lendingLimit=1)]}))
    assert "spec.resourceGroups[0].flavors[0].resources[0].lendingLimit: must not be set" in msg


def test_limits_are_fine_with_a_cohort() -> None:
    obj = cq({"cohortName": "ml", "resourceGroups": [gpu_group(borrowingLimit=2, lendingLimit=4)]})
    assert parse_object(obj).to_dict() == obj


def test_lending_limit_above_nominal_quota() -> None:
    msg = rejected(cq({"cohortName": "ml", "resourceGroups": [gpu_group(lendingLimit=5)]}))
    assert (
        "spec.resourceGroups[0].flavors[0].resources[0].lendingLimit: must be less than or equal to nominalQuota"
        in msg
    )


def test_negative_quota() -> None:
    obj = cq({"resourceGroups": [gpu_group()]})
    obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["nominalQuota"] = "-1Gi"
    assert "resources[1].nominalQuota: must be non-negative" in rejected(obj)


def test_unknown_queueing_strategy() -> None:
    msg = rejected(cq({"queueingStrategy": "LIFO"}))
    assert "ClusterQueue team-a: spec.queueingStrategy:" in msg
    assert "StrictFIFO" in msg and "BestEffortFIFO" in msg


def test_count_below_min_count() -> None:
    msg = rejected(workload([pod_set(count=2, minCount=3)]))
    assert "Workload team-a/wl: spec.podSets[0].minCount: must be less than or equal to count (3 > 2)" in msg


def test_min_count_must_be_positive() -> None:
    assert "spec.podSets[0].minCount" in rejected(workload([pod_set(count=2, minCount=0)]))


def test_count_must_be_an_integer_not_a_string() -> None:
    assert "spec.podSets[0].count" in rejected(workload([pod_set(count="2")]))


def test_only_one_podset_may_set_min_count() -> None:
    msg = rejected(workload([pod_set("a", count=2, minCount=1), pod_set("b", count=2, minCount=1)]))
    assert "spec.podSets[1].minCount: only one podSet may set minCount" in msg


def test_podset_names_are_unique() -> None:
    assert "spec.podSets[1].name: duplicate podSet 'a'" in rejected(workload([pod_set("a"), pod_set("a")]))


def test_at_most_eight_podsets_and_at_least_one() -> None:
    assert "spec.podSets" in rejected(workload([pod_set(f"p{i}") for i in range(9)]))
    assert "spec.podSets" in rejected(workload([]))


def test_flavor_resources_must_match_covered_resources_in_order() -> None:
    group = gpu_group()
    res = group["flavors"][0]["resources"]
    res.reverse()
    msg = rejected(cq({"resourceGroups": [group]}))
    assert (
        "spec.resourceGroups[0].flavors[0].resources: flavor 'h200' must list exactly the coveredResources"
        in msg
    )
    group["flavors"][0]["resources"] = res[:1]
    assert "spec.resourceGroups[0].flavors[0].resources" in rejected(cq({"resourceGroups": [group]}))


def test_at_most_sixteen_resource_groups() -> None:
    groups = [
        {
            "coveredResources": [f"example.com/r{i}"],
            "flavors": [{"name": f"f{i}", "resources": [{"name": f"example.com/r{i}", "nominalQuota": 1}]}],
        }
        for i in range(17)
    ]
    assert "spec.resourceGroups: List should have at most 16 items" in rejected(
        cq({"resourceGroups": groups})
    )
    assert (
        parse_object(cq({"resourceGroups": groups[:16]})).to_dict()["spec"]["resourceGroups"] == groups[:16]
    )


def test_resource_and_flavor_belong_to_one_group() -> None:
    a, b = gpu_group(), gpu_group()
    b["flavors"][0]["name"] = "other"
    msg = rejected(cq({"resourceGroups": [a, b]}))
    assert "spec.resourceGroups[1].coveredResources: resource 'gpu.nvidia.com' is already covered" in msg
    c = {
        "coveredResources": ["cpu"],
        "flavors": [{"name": "h200", "resources": [{"name": "cpu", "nominalQuota": 1}]}],
    }
    msg = rejected(cq({"resourceGroups": [a, c]}))
    assert "spec.resourceGroups[1].flavors[0].name: flavor 'h200' is already used in resourceGroups[0]" in msg


def test_preemption_reclaim_never_with_borrow_within_cohort() -> None:
    spec = {"preemption": {"reclaimWithinCohort": "Never", "borrowWithinCohort": {"policy": "LowerPriority"}}}
    assert "spec.preemption.borrowWithinCohort.policy: must be Never" in rejected(cq(spec))
    spec["preemption"]["reclaimWithinCohort"] = "Any"
    assert parse_object(cq(spec)).to_dict() == cq(spec)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("stopPolicy", "Pause"),
        ("preemption", {"withinClusterQueue": "Any"}),
        ("flavorFungibility", {"whenCanBorrow": "Borrow"}),
        ("cohortName", "Not_A_Name"),
        ("fairSharing", {"weight": "-1"}),
    ],
)
def test_cluster_queue_enums_and_names(field: str, value: Any) -> None:
    assert f"spec.{field}" in rejected(cq({field: value}))


def test_cohort_limits_only_with_a_parent() -> None:
    obj = {
        "apiVersion": API,
        "kind": "Cohort",
        "metadata": {"name": "c"},
        "spec": {"resourceGroups": [gpu_group(borrowingLimit=1)]},
    }
    assert (
        "Cohort c: spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit: must not be set when parentName is empty"
        in rejected(obj)
    )
    obj["spec"]["parentName"] = "root"
    assert parse_object(obj).to_dict() == obj


def test_resource_flavor_taint_effect() -> None:
    obj = {
        "apiVersion": API,
        "kind": "ResourceFlavor",
        "metadata": {"name": "h200"},
        "spec": {"nodeTaints": [{"key": "k", "effect": "Sometimes"}]},
    }
    assert "spec.nodeTaints[0].effect: must be one of NoSchedule, PreferNoSchedule, NoExecute" in rejected(
        obj
    )
    obj["spec"] = {"nodeLabels": {str(i): "x" for i in range(9)}}
    assert "spec.nodeLabels" in rejected(obj)


def test_local_queue_needs_a_cluster_queue() -> None:
    obj = {
        "apiVersion": API,
        "kind": "LocalQueue",
        "metadata": {"name": "main", "namespace": "a"},
        "spec": {},
    }
    assert "LocalQueue a/main: spec.clusterQueue: Field required" in rejected(obj)


def test_workload_priority_class_value_is_int32() -> None:
    obj = {"apiVersion": API, "kind": "WorkloadPriorityClass", "metadata": {"name": "p"}, "value": 2**31}
    assert "WorkloadPriorityClass p: value:" in rejected(obj)
    obj["value"] = -5
    assert parse_object(obj).to_dict() == obj


def test_priority_class_ref() -> None:
    ref = {"group": "scheduling.k8s.io", "kind": "WorkloadPriorityClass", "name": "x"}
    assert "spec.priorityClassRef.kind: must be PriorityClass" in rejected(
        workload([pod_set()], priorityClassRef=ref, priority=1)
    )
    ref["kind"] = "PriorityClass"
    assert "spec.priority: must be set when priorityClassRef is set" in rejected(
        workload([pod_set()], priorityClassRef=ref)
    )
    wl = parse_object(workload([pod_set()], priorityClassRef=ref, priority=7))
    assert isinstance(wl, Workload) and wl.spec.priority_class_name == "x"


def test_podset_resource_claims_need_exactly_one_source() -> None:
    both = {"name": "gpu", "resourceClaimName": "a", "resourceClaimTemplateName": "b"}
    assert "spec.podSets[0].resourceClaims[0].resourceClaimName: exactly one of" in rejected(
        workload([pod_set(resourceClaims=[both])])
    )
    assert "exactly one of" in rejected(workload([pod_set(resourceClaims=[{"name": "gpu"}])]))


def test_claim_refs_fall_back_to_the_pod_template() -> None:
    ps = PodSet.parse(
        {
            "template": {
                "spec": {
                    "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-h200"}],
                    "containers": [],
                }
            }
        }
    )
    (ref,) = ps.claim_refs()
    assert (ref.name, ref.resource_claim_template_name, ref.resource_claim_name) == ("gpu", "one-h200", None)
    explicit = ps.model_copy(update={"resource_claims": []})
    assert explicit.claim_refs() == []


def test_quota_reserved_workload_needs_one_assignment_per_podset() -> None:
    obj = workload([pod_set("a"), pod_set("b")])
    obj["status"] = {
        "conditions": [
            {
                "type": "QuotaReserved",
                "status": "True",
                "reason": "QuotaReserved",
                "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
        "admission": {"clusterQueue": "team-a", "podSetAssignments": [{"name": "a", "count": 1}]},
    }
    assert "status.admission.podSetAssignments: must have one entry per podSet (1 != 2)" in rejected(obj)
    ok = copy.deepcopy(obj)
    ok["status"]["admission"]["podSetAssignments"].append({"name": "b", "count": 1})
    assert parse_object(ok).to_dict() == ok
    # without the QuotaReserved=True condition the admission is not checked (as in Kueue)
    obj["status"]["conditions"][0]["status"] = "False"
    assert parse_object(obj).to_dict() == obj


def test_condition_status_enum() -> None:
    obj = workload([pod_set()])
    obj["status"] = {
        "conditions": [
            {"type": "Admitted", "status": "Yes", "reason": "R", "message": "", "lastTransitionTime": "t"}
        ]
    }
    assert "status.conditions[0].status" in rejected(obj)


# ------------------------------------------------------------------ quota resource names
@pytest.mark.parametrize(
    "name",
    [
        "cpu",
        "memory",
        "pods",
        "ephemeral-storage",
        "hugepages-2Mi",
        "nvidia.com/gpu",
        "gpu.nvidia.com",
        "gpu.nvidia.com/memory",
        "example.com/foo_bar.baz",
    ],
)
def test_valid_resource_names(name: str) -> None:
    assert check_resource_name(name) == name


@pytest.mark.parametrize(
    "name",
    ["", "/memory", "gpu.nvidia.com/", "a/b/c", "Gpu.Nvidia.com/memory", "foo bar", "-cpu", "x/" + "m" * 64],
)
def test_invalid_resource_names(name: str) -> None:
    with pytest.raises(ValueError, match="resource name"):
        check_resource_name(name)


def test_invalid_resource_name_in_a_cluster_queue() -> None:
    group = gpu_group()
    group["coveredResources"][0] = "gpu.nvidia.com//x"
    assert (
        "spec.resourceGroups[0].coveredResources[0]: 'gpu.nvidia.com//x' is not a valid resource name"
        in rejected(cq({"resourceGroups": [group]}))
    )


def test_quota_resource_classification() -> None:
    classes = {"gpu.nvidia.com", "mig-1g.18gb.nvidia.com"}
    assert quota_resource("gpu.nvidia.com", classes).kind == "devices"
    cap = quota_resource("gpu.nvidia.com/memory", classes)
    assert (cap.kind, cap.device_class, cap.capacity) == ("capacity", "gpu.nvidia.com", "memory")
    assert quota_resource("cpu", classes).kind == "native"
    # nvidia.com is not a DeviceClass here, so nvidia.com/gpu is the device-plugin extended resource
    assert quota_resource("nvidia.com/gpu", classes).kind == "extended"
    assert quota_resource("nvidia.com/gpu", {"nvidia.com"}).kind == "capacity"


# ------------------------------------------------------------------ helpers
def test_count_planned_devices_counts_shared_devices_once() -> None:
    dev = {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "node-1", "device": "gpu-0"}
    other = {**dev, "device": "gpu-1"}
    adm = Admission.parse(
        {
            "clusterQueue": "team-a",
            "podSetAssignments": [
                {
                    "name": "main",
                    "placements": [
                        {"index": 0, "nodeName": "node-1", "claims": [{"name": "shared", "devices": [dev]}]},
                        {
                            "index": 1,
                            "nodeName": "node-1",
                            "claims": [
                                {"name": "shared", "devices": [dev]},
                                {"name": "own", "devices": [other]},
                            ],
                        },
                    ],
                }
            ],
        }
    )
    assert adm.count_planned_devices() == 2


def test_label_selector() -> None:
    sel = LabelSelector.parse(
        {
            "matchLabels": {"team": "a"},
            "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["x"]}],
        }
    )
    assert sel.matches({"team": "a"})
    assert sel.matches({"team": "a", "tier": "y"})
    assert not sel.matches({"team": "a", "tier": "x"})
    assert not sel.matches({"team": "b"})
    assert LabelSelector().matches({"anything": "goes"})


def test_workload_status_helpers() -> None:
    obj = workload([pod_set()])
    obj["status"] = {
        "conditions": [
            {
                "type": "Evicted",
                "status": "True",
                "reason": "Preempted",
                "message": "m",
                "lastTransitionTime": "t",
            }
        ],
        "reason": "Preempted",
    }
    wl = parse_object(obj)
    assert isinstance(wl, Workload)
    assert wl.status.is_true(v1beta1.EVICTED) and not wl.status.is_true(v1beta1.ADMITTED)
    assert wl.pod_set("main") is wl.spec.pod_sets[0]


# ------------------------------------------------------------------ registry
def test_model_for_every_kind() -> None:
    for k in v1beta1.KINDS:
        assert model_for(API, k.KIND) is k
    assert model_for("resource.k8s.io/v1", "DeviceClass") is resource.DeviceClass
    assert model_for("resource.k8s.io/v1", "ResourceClaim") is resource.ResourceClaim
    assert model_for("v1", "Pod") is core.Pod
    assert model_for("batch/v1", "Job") is core.Job
    assert model_for("kueue.x-k8s.io/v1beta2", "ClusterQueue") is None
    assert len(known_kinds()) >= len(v1beta1.KINDS) + 4


def test_the_kinds_read_once_are_the_modules_kinds() -> None:
    """``_kinds_of`` reads each module once: its table is what reading the module now gives
    (every KubeObject class of the module with a kind), read-only, and a module that does not
    exist has no kinds."""
    for m in registry._MODULES:
        kept = registry._kinds_of(m)
        assert kept is registry._kinds_of(m)
        assert dict(kept) == dict(registry._kinds_of.__wrapped__(m))
        assert kept and all(
            cls.__module__ == m and k == (cls.API_VERSION, cls.KIND) for k, cls in kept.items()
        )
        with pytest.raises(TypeError):
            kept[("x", "y")] = core.Pod  # type: ignore[index]
    assert dict(registry._kinds_of("queueing.api.no_such_module")) == {}


def test_parse_object_errors() -> None:
    with pytest.raises(ObjectError, match="unknown kind 'Widget'"):
        parse_object({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}})
    with pytest.raises(ObjectError, match="apiVersion and kind must be set"):
        parse_object({"metadata": {"name": "w"}})
    with pytest.raises(ObjectError, match="expected a mapping"):
        parse_object(["not", "an", "object"])
