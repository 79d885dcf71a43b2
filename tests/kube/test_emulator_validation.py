"""The emulator refuses what kube-apiserver refuses (issue #18), through the real kubernetes-asyncio
client over HTTP: our CRDs' CEL rules (``x-kubernetes-validations``, transition rules with ``oldSelf``),
the resource.k8s.io/v1 validation (names, 128 devices per slice, attribute typing, negative capacity,
``count``), and DRA selectors that do not compile or whose estimated cost is over the API server's limit.
``store.api_validation = False`` stores such objects anyway (for tests of how the controller copes)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from queueing.kube.client import (
    CLUSTER_QUEUES,
    CRDS,
    DEVICE_CLASSES,
    LOCAL_QUEUES,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_SLICES,
    KubeClient,
)
from queueing.testing import Emulator

L300 = "[" + ",".join(str(i) for i in range(300)) + "]"


def cq(name: str, quota: Any) -> dict[str, Any]:
    return {
        "apiVersion": "queueing.dra.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": quota}]}],
                }
            ],
        },
    }


async def refused(call: Any) -> dict[str, Any]:
    with pytest.raises(ApiException) as e:
        await call
    assert e.value.status == 422, e.value.body
    status: dict[str, Any] = json.loads(e.value.body)
    assert status["reason"] == "Invalid"
    return status


async def test_crd_rules_refuse_quotas_the_ledger_cannot_hold_and_negative_ones(kube: KubeClient) -> None:
    await kube.create(CLUSTER_QUEUES, cq("ok", "99999999999999999999999999999"))
    status = await refused(kube.create(CLUSTER_QUEUES, cq("huge", "1e100")))
    assert status["message"] == (
        'ClusterQueue.queueing.dra.io "huge" is invalid: spec.resourceGroups[0].flavors[0].resources[0]: '
        'Invalid value: "object": nominalQuota must be less than 1e29 (the ledger stores quantities as '
        "NUMERIC(38, 9))"
    )
    status = await refused(kube.create(CLUSTER_QUEUES, cq("negative", -5)))
    assert "nominalQuota must be non-negative" in status["message"]
    assert status["details"]["causes"][0]["field"] == "spec.resourceGroups[0].flavors[0].resources[0]"


async def test_transition_rules_compare_with_the_stored_object(kube: KubeClient) -> None:
    lq = {
        "apiVersion": "queueing.dra.io/v1beta1",
        "kind": "LocalQueue",
        "metadata": {"name": "lq", "namespace": "default"},
        "spec": {"clusterQueue": "a"},
    }
    created = await kube.create(LOCAL_QUEUES, lq)
    created["spec"]["clusterQueue"] = "b"
    status = await refused(kube.replace(LOCAL_QUEUES, created))
    assert 'spec.clusterQueue: Invalid value: "string": field is immutable' in status["message"]


async def test_a_crd_whose_rule_does_not_compile_is_refused(kube: KubeClient) -> None:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.test.queueing.dra.io"},
        "spec": {
            "group": "test.queueing.dra.io",
            "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            # sign is a global function in kube-apiserver's quantity library
                            "x-kubernetes-validations": [{"rule": "quantity('1').sign() == 1"}],
                        }
                    },
                }
            ],
        },
    }
    status = await refused(kube.create(CRDS, crd))
    assert "compilation failed" in status["message"] and "sign" in status["message"]


def slice_(devices: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "n1-gpus"},
        "spec": {"driver": "gpu.example.com", "nodeName": "n1", "pool": {"name": "n1"}, "devices": devices},
    }


async def test_resource_slices_as_the_api_server_validates_them(kube: KubeClient) -> None:
    status = await refused(kube.create(RESOURCE_SLICES, slice_([{"name": f"gpu-{i}"} for i in range(129)])))
    assert "spec.devices: Invalid value: List should have at most 128 items" in status["message"]
    for device, field in [
        ({"name": "GPU-0"}, "spec.devices[0].name"),
        (
            {"name": "gpu-0", "capacity": {"memory": {"value": "-80Gi"}}},
            "spec.devices[0].capacity.memory.value",
        ),
        (
            {"name": "gpu-0", "attributes": {"index": {"int": 1, "string": "x"}}},
            "spec.devices[0].attributes.index",
        ),
        ({"name": "gpu-0", "attributes": {"v": {"version": "1.2"}}}, "spec.devices[0].attributes.v.version"),
    ]:
        status = await refused(kube.create(RESOURCE_SLICES, slice_([device])))
        assert status["details"]["causes"][0]["field"] == field, status
    await kube.create(RESOURCE_SLICES, slice_([{"name": f"gpu-{i}"} for i in range(128)]))


def template(request: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t", "namespace": "default"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}}},
    }


async def test_selectors_that_do_not_compile_or_cost_too_much_are_refused(kube: KubeClient) -> None:
    expensive = f"{L300}.all(x, {L300}.all(y, {L300}.all(z, x + y + z >= 0)))"
    dc = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu.example.com"},
        "spec": {"selectors": [{"cel": {"expression": expensive}}]},
    }
    status = await refused(kube.create(DEVICE_CLASSES, dc))
    assert status["details"]["causes"][0]["field"] == "spec.selectors[0].cel.expression"
    assert "estimated cost" in status["message"] and "exceeds the limit of 1000000" in status["message"]
    dc["spec"]["selectors"][0]["cel"]["expression"] = 'device.driver == "gpu.example.com"'
    await kube.create(DEVICE_CLASSES, dc)

    status = await refused(
        kube.create(
            RESOURCE_CLAIM_TEMPLATES,
            template(
                {
                    "deviceClassName": "gpu.example.com",
                    "selectors": [{"cel": {"expression": "device.driver =="}}],
                }
            ),
        )
    )
    assert (
        status["details"]["causes"][0]["field"]
        == "spec.spec.devices.requests[0].exactly.selectors[0].cel.expression"
    )
    assert "compilation failed" in status["message"]
    for count in (0, -3, True):
        status = await refused(
            kube.create(
                RESOURCE_CLAIM_TEMPLATES, template({"deviceClassName": "gpu.example.com", "count": count})
            )
        )
        assert status["details"]["causes"][0]["field"] == "spec.spec.devices.requests[0].exactly.count"


async def test_validation_can_be_switched_off_for_objects_from_older_servers(
    kube: KubeClient, emu: Emulator
) -> None:
    emu.store.api_validation = False
    await kube.create(CLUSTER_QUEUES, cq("huge", "1e100"))
    await kube.create(RESOURCE_SLICES, slice_([{"name": f"gpu-{i}"} for i in range(129)]))
    emu.store.api_validation = True
    assert (await kube.get(CLUSTER_QUEUES, "huge"))["spec"]["resourceGroups"][0]["flavors"][0]["resources"][
        0
    ]["nominalQuota"] == "1e100"
