"""What the gang allocator says when a gang does not fit: its pods and claims as references
(``queueing.dra.explain``), errors naming the claim at hand even when a cached candidate list was
built for another claim, a best node with devices of the request's class, amounts as quantities."""

from __future__ import annotations

from typing import Any

import pytest
from dra_helpers import device_class
from test_gang import DRIVER, GPU, gpus, node, pod, template

from queueing.api.core import Pod
from queueing.api.resource import ResourceClaim, ResourceClaimTemplate, ResourceSlice
from queueing.dra.errors import AllocationError
from queueing.dra.explain import ObjRef, render
from queueing.dra.gang import ClusterState, place_gang


def _pod(name: str, memory: str = "1Gi", tmpl: str | None = "one") -> Pod:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"memory": memory}}}]}
    if tmpl:
        spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": tmpl}]
    return Pod.model_validate({"metadata": {"name": name, "namespace": "default"}, "spec": spec})


def test_an_explanation_keeps_the_gangs_pods_and_claims_as_references() -> None:
    state = ClusterState([node("n1")], [gpus("n1", 1)], [GPU], templates=[template("one", 1)])
    r = place_gang([_pod("a"), _pod("b")], state)
    assert not r.placed and r.explanation is not None
    parts = r.explanation.parts
    assert ObjRef("Pod", "default/b") in parts and ObjRef("ResourceClaim", "default/b-gpus") in parts
    assert render(parts) == r.explanation.message
    assert r.explanation.message.startswith(
        "pod default/b (pod 2 of 2) fits on none of 1 nodes after 1 placed"
    )
    assert "claim default/b-gpus, request g: " in r.explanation.message
    named = render(parts, lambda ref: f"<{ref.kind}>")
    assert "default/b" not in named and named.startswith("pod <Pod> (pod 2 of 2)")


def test_node_amounts_read_as_quantities() -> None:
    state = ClusterState([node("n1")], [gpus("n1", 1)], [GPU], templates=[template("one", 1)])
    r = place_gang([_pod("a", memory="300Gi")], state)
    assert r.explanation is not None and r.explanation.best is not None
    assert r.explanation.best.kind == "memory"
    assert r.explanation.best.message == "memory: needs 300Gi, 256Gi free"


def _allocated(name: str, node_name: str, device: str) -> ResourceClaim:
    return ResourceClaim.model_validate(
        {
            "metadata": {"name": name, "namespace": "default"},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [{"request": "g", "driver": DRIVER, "pool": node_name, "device": device}]
                    },
                    "nodeSelector": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {"key": "metadata.name", "operator": "In", "values": [node_name]}
                                ]
                            }
                        ]
                    },
                }
            },
        }
    )


def _nics(node_name: str) -> ResourceSlice:
    return ResourceSlice.model_validate(
        {
            "metadata": {"name": f"{node_name}-nics"},
            "spec": {
                "driver": "nic.example.com",
                "pool": {"name": f"{node_name}-nics", "generation": 1, "resourceSliceCount": 1},
                "nodeName": node_name,
                "devices": [{"name": "nic-0"}],
            },
        }
    )


def test_the_best_node_has_devices_of_the_class() -> None:
    # n0 has no GPU at all (only a NIC), n1's only GPU is taken: both are 1 GPU short, and n0 comes
    # first; the best node to name is n1, where a GPU would do
    nic = device_class("nic", 'device.driver == "nic.example.com"')
    state = ClusterState(
        [node("n0"), node("n1")],
        [_nics("n0"), gpus("n1", 1)],
        [GPU, nic],
        claims=[_allocated("taken", "n1", "gpu-0")],
        templates=[template("one", 1)],
    )
    r = place_gang([pod("a", tmpl="one")], state)
    assert r.explanation is not None and r.explanation.best is not None
    best = r.explanation.best
    assert (best.node, best.device_class, best.in_class) == ("n1", "gpu", 1)
    assert "best node n1: claim default/a-gpus, request g: 1 device of class gpu needed, 0 available" in (
        r.explanation.message
    )


def _bad_template() -> ResourceClaimTemplate:
    sel = {"cel": {"expression": f'device.attributes["{DRIVER}"].nosuch == 1'}}
    req = {"name": "g", "exactly": {"deviceClassName": "gpu", "count": 1, "selectors": [sel]}}
    return ResourceClaimTemplate.model_validate(
        {
            "metadata": {"name": "bad", "namespace": "default"},
            "spec": {"spec": {"devices": {"requests": [req]}}},
        }
    )


def test_a_cached_cel_runtime_error_names_the_claim_at_hand() -> None:
    # the candidate list of request g on n1 (with the CEL error on gpu-0) is built for p's claim
    # and kept; q's claim has the same request: its error must name q's claim, not p's
    state = ClusterState([node("n1")], [gpus("n1", 2)], [GPU], templates=[_bad_template()])
    errors = []
    for name in ("p", "q", "p"):
        with pytest.raises(AllocationError) as e:
            place_gang([pod(name, tmpl="bad")], state)
        errors.append(e.value)
    assert [x.obj for x in errors] == [
        "ResourceClaim default/p-gpus",
        "ResourceClaim default/q-gpus",
        "ResourceClaim default/p-gpus",
    ]
    assert all(x.field == "spec.devices.requests[0].exactly.selectors[0].cel.expression" for x in errors)
    assert all(x.message.startswith("CEL runtime error on device gpu.example.com/n1/gpu-0: ") for x in errors)
    assert not any(state.usage.devices.values())


def test_a_cel_runtime_error_in_a_class_selector_names_the_class() -> None:
    broken = device_class("gpu", f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].nosuch == 1')
    state = ClusterState([node("n1")], [gpus("n1", 1)], [broken], templates=[template("one", 1)])
    for name in ("p", "q"):
        with pytest.raises(AllocationError) as e:
            place_gang([pod(name, tmpl="one")], state)
        assert (e.value.obj, e.value.field) == ("DeviceClass gpu", "spec.selectors[0].cel.expression")
