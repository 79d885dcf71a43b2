"""The placement policy through the DRA placer (ResourceFlavor ``placementPolicy``) and plan binding:
a LeastFragmentation plan that kube-scheduler's allocator would not pick on its own is bound Full."""

from __future__ import annotations

from typing import Any

import pytest
from test_scoring import CLASSES, TEMPLATES, cluster
from test_simple_gang import workload

from queueing.api.core import PodSpec
from queueing.api.resource import ResourceClaim
from queueing.api.v1beta1 import Admission, PodSetResourceClaim, ResourceFlavor
from queueing.dra.binding import UpstreamView, choose_binding
from queueing.scheduling.dra_placer import DraPlacer
from queueing.scheduling.from_api import flavor_spec
from queueing.scheduling.placer import Placement
from queueing.scheduling.snapshot import FlavorSpec


def spec(tmpl: str) -> PodSpec:
    return PodSpec.model_validate(
        {
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}],
            "resourceClaims": [{"name": "g", "resourceClaimTemplateName": tmpl}],
        }
    )


def flavor(policy: str | None) -> FlavorSpec:
    body: dict[str, Any] = {"metadata": {"name": "h200"}, "spec": {}}
    if policy:
        body["spec"]["placementPolicy"] = policy
    return flavor_spec(ResourceFlavor.model_validate(body))


def test_the_flavor_field_is_validated() -> None:
    assert flavor(None).placement_policy == "FirstFit"
    assert flavor("LeastFragmentation").placement_policy == "LeastFragmentation"
    with pytest.raises(ValueError, match="placementPolicy"):
        ResourceFlavor.model_validate({"metadata": {"name": "x"}, "spec": {"placementPolicy": "BestFit"}})


@pytest.mark.parametrize("verify", [False, True])
def test_policy_per_flavor_and_binding(verify: bool) -> None:
    nodes, slices = cluster(2, 2)
    placer = DraPlacer(nodes, slices, CLASSES, templates=TEMPLATES, verify=verify)
    root = placer.initial_state([])
    # one 1-GPU job first (on h200-0): both policies then see one used node
    first = placer.place(workload("first", [("main", 1, spec("gpu1"))]), {}, {"main": [flavor(None)]}, root)
    assert isinstance(first, Placement) and first.nodes == ("h200-0",)
    held = placer.add(root, "default/first", first)
    plans = {}
    for policy in ("FirstFit", "LeastFragmentation"):
        got = placer.place(
            workload("mig", [("main", 1, spec("mig-1g-18gb"))]), {}, {"main": [flavor(policy)]}, held
        )
        assert isinstance(got, Placement), got
        plans[policy] = got
    ff, lf = plans["FirstFit"], plans["LeastFragmentation"]
    ff_dev = ff.detail.pods[0].devices  # type: ignore[attr-defined]
    lf_dev = lf.detail.pods[0].devices  # type: ignore[attr-defined]
    assert ff.nodes == lf.nodes == ("h200-0",)  # first fit: first node; best fit: the used node
    assert [d[2] for d in ff_dev] == ["gpu-1-mig-1g-18gb-0"]
    assert [d[2] for d in lf_dev] == ["gpu-1-mig-1g-18gb-6"]
    assert ff.device_charges == lf.device_charges

    # plan binding: the first-fit plan is what kube-scheduler picks (node only), the scored one is not
    # (the first job's claim allocated in the cluster, as kube-scheduler sees it once bound)
    taken = ResourceClaim.model_validate(
        {
            "metadata": {"name": "first-main-0-g", "namespace": "default"},
            "spec": {
                "devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
            },
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {"request": "g", "driver": "gpu.nvidia.com", "pool": "h200-0", "device": "gpu-0"}
                        ]
                    }
                }
            },
        }
    )
    view = UpstreamView(nodes, slices, CLASSES, [taken], TEMPLATES)
    refs = {"main": [PodSetResourceClaim(name="g", resource_claim_template_name="mig-1g-18gb")]}
    for plan, node_only in ((ff_dev, True), (lf_dev, False)):
        adm = Admission.model_validate(
            {
                "clusterQueue": "cq",
                "podSetAssignments": [
                    {
                        "name": "main",
                        "count": 1,
                        "placements": [
                            {
                                "index": 0,
                                "nodeName": "h200-0",
                                "claims": [
                                    {
                                        "name": "g",
                                        "devices": [
                                            {"request": "g", "driver": d[0], "pool": d[1], "device": d[2]}
                                            for d in plan
                                        ],
                                    }
                                ],
                            }
                        ],
                    }
                ],
            }
        )
        d = choose_binding(adm, refs, "default", view)
        assert d.node_only is node_only, d.reason
    assert "kube-scheduler would pick gpu-1-mig-1g-18gb-0" in d.reason
