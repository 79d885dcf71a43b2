"""``choose_binding``: a single pod is bound node only exactly when kube-scheduler's allocator, seeing the
claims allocated in the cluster, picks the planned devices on the planned node; Full otherwise."""

from __future__ import annotations

from typing import Any

from queueing.api.core import Node, Pod
from queueing.api.quantity import Quantity
from queueing.api.resource import DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice
from queueing.api.v1beta1 import Admission, PodSetResourceClaim
from queueing.dra.binding import UpstreamView, choose_binding, claim_from_template, device_results
from queueing.dra.gang import ClusterState, place_gang

DRIVER = "gpu.example.com"
NODES = ("node-a", "node-b")


def _node(name: str) -> Node:
    return Node.model_validate({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}})


def _slice(node: str, gpus: int = 4) -> ResourceSlice:
    return ResourceSlice.model_validate(
        {
            "metadata": {"name": f"{node}-gpus"},
            "spec": {
                "driver": DRIVER,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": f"gpu-{i}", "attributes": {"index": {"int": i}}} for i in range(gpus)],
            },
        }
    )


CLASS = DeviceClass.model_validate(
    {
        "metadata": {"name": DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    }
)


def _template(name: str, count: int = 1, selector: str | None = None) -> ResourceClaimTemplate:
    exactly: dict[str, Any] = {"deviceClassName": DRIVER, "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return ResourceClaimTemplate.model_validate(
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
        }
    )


TEMPLATES = [
    _template("gpu-1"),
    _template("gpu-2", 2),
    _template("high", 1, "device.attributes['gpu.example.com'].index >= 2"),
]


def _allocated(name: str, node: str, *devices: str) -> ResourceClaim:
    """A claim allocated in the cluster (by kube-scheduler or anyone)."""
    return ResourceClaim.model_validate(
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {"request": "gpu", "driver": DRIVER, "pool": node, "device": d} for d in devices
                        ]
                    }
                }
            },
        }
    )


def _view(*claims: ResourceClaim) -> UpstreamView:
    return UpstreamView([_node(n) for n in NODES], [_slice(n) for n in NODES], [CLASS], claims, TEMPLATES)


def _admission(*pods: tuple[str, dict[str, list[str]]], shared: str | None = None) -> Admission:
    """One placement per (node, claim name -> devices) pair."""
    placements = []
    for i, (node, claims) in enumerate(pods):
        placements.append(
            {
                "index": i,
                "nodeName": node,
                "claims": [
                    {
                        "name": c,
                        **({"resourceClaimName": shared} if c == "shared" and shared else {}),
                        "devices": [
                            {"request": "gpu", "driver": DRIVER, "pool": node, "device": d} for d in devs
                        ],
                    }
                    for c, devs in claims.items()
                ],
            }
        )
    return Admission.model_validate(
        {
            "clusterQueue": "team",
            "podSetAssignments": [{"name": "main", "count": len(placements), "placements": placements}],
        }
    )


def _refs(**claims: str) -> dict[str, list[PodSetResourceClaim]]:
    """claim name -> template name (``claim:NAME`` for a shared ResourceClaim)."""
    out = []
    for name, src in claims.items():
        if src.startswith("claim:"):
            out.append(PodSetResourceClaim(name=name, resource_claim_name=src[len("claim:") :]))
        else:
            out.append(PodSetResourceClaim(name=name, resource_claim_template_name=src))
    return {"main": out}


def test_same_picks_bind_node_only() -> None:
    d = choose_binding(_admission(("node-a", {"gpu": ["gpu-0"]})), _refs(gpu="gpu-1"), "default", _view())
    assert d.node_only, d.reason
    assert "node-a" in d.reason


def test_different_picks_bind_full_and_say_which() -> None:
    # the plan skipped gpu-0 (held by another plan of the controller not bound yet): kube-scheduler,
    # seeing only what is allocated in the cluster, would take gpu-0
    d = choose_binding(_admission(("node-a", {"gpu": ["gpu-1"]})), _refs(gpu="gpu-1"), "default", _view())
    assert not d.node_only
    assert "would pick gpu-0 on node node-a for claim gpu, the plan has gpu-1" in d.reason


def test_claims_allocated_in_the_cluster_are_seen() -> None:
    view = _view(_allocated("other", "node-a", "gpu-0"))
    d = choose_binding(_admission(("node-a", {"gpu": ["gpu-1"]})), _refs(gpu="gpu-1"), "default", view)
    assert d.node_only, d.reason
    # ... and allocations on other nodes do not matter on the planned node
    d = choose_binding(_admission(("node-b", {"gpu": ["gpu-0"]})), _refs(gpu="gpu-1"), "default", view)
    assert d.node_only, d.reason


def test_unallocated_claims_take_nothing() -> None:
    pending = claim_from_template(TEMPLATES[0], "pending")
    d = choose_binding(
        _admission(("node-a", {"gpu": ["gpu-0"]})), _refs(gpu="gpu-1"), "default", _view(pending)
    )
    assert d.node_only, d.reason


def test_several_devices_and_selectors_are_compared_exactly() -> None:
    view = _view(_allocated("other", "node-a", "gpu-1"))
    two = _refs(gpu="gpu-2")
    assert choose_binding(_admission(("node-a", {"gpu": ["gpu-0", "gpu-2"]})), two, "default", view).node_only
    assert not choose_binding(
        _admission(("node-a", {"gpu": ["gpu-2", "gpu-3"]})), two, "default", view
    ).node_only
    high = _refs(gpu="high")
    assert choose_binding(_admission(("node-a", {"gpu": ["gpu-2"]})), high, "default", view).node_only
    assert not choose_binding(_admission(("node-a", {"gpu": ["gpu-3"]})), high, "default", view).node_only


def test_a_gang_binds_full() -> None:
    adm = _admission(("node-a", {"gpu": ["gpu-0"]}), ("node-b", {"gpu": ["gpu-0"]}))
    d = choose_binding(adm, _refs(gpu="gpu-1"), "default", _view())
    assert not d.node_only
    assert d.reason.startswith("2 pods planned")


def test_a_shared_claim_binds_full() -> None:
    adm = _admission(("node-a", {"gpu": ["gpu-0"], "shared": ["gpu-1"]}), shared="team-claim")
    d = choose_binding(adm, _refs(gpu="gpu-1", shared="claim:team-claim"), "default", _view())
    assert not d.node_only
    assert "shared ResourceClaim(s) shared" in d.reason


def test_a_planned_claim_that_is_not_the_pods_own_binds_full() -> None:
    # the implicit claim for extended resources served by DRA: kube-scheduler allocates it with the pod's
    adm = _admission(("node-a", {"gpu": ["gpu-0"], "pod-extended-resources": ["gpu-1"]}))
    d = choose_binding(adm, _refs(gpu="gpu-1"), "default", _view())
    assert not d.node_only
    assert "pod-extended-resources" in d.reason


def test_no_claims_bind_node_only_and_problems_bind_full() -> None:
    assert choose_binding(_admission(("node-a", {})), {"main": []}, "default", _view()).node_only
    missing = choose_binding(
        _admission(("node-a", {"gpu": ["gpu-0"]})), _refs(gpu="nope"), "default", _view()
    )
    assert not missing.node_only and "default/nope not found" in missing.reason
    gone = choose_binding(_admission(("node-z", {"gpu": ["gpu-0"]})), _refs(gpu="gpu-1"), "default", _view())
    assert not gone.node_only and "node node-z does not exist" in gone.reason
    full = _view(*(_allocated(f"c{i}", "node-a", f"gpu-{i}") for i in range(4)))
    nofit = choose_binding(_admission(("node-a", {"gpu": ["gpu-0"]})), _refs(gpu="gpu-1"), "default", full)
    assert not nofit.node_only and "finds no fit" in nofit.reason


def test_questions_leave_the_view_as_it_was() -> None:
    view = _view(_allocated("other", "node-a", "gpu-0"))
    adm = _admission(("node-a", {"gpu": ["gpu-1"]}))
    answers = [choose_binding(adm, _refs(gpu="gpu-1"), "default", view).node_only for _ in range(3)]
    assert answers == [True, True, True]
    st = view._state("node-a")
    assert st is not None and set(st.usage.devices) == {(DRIVER, "node-a", "gpu-0")}


def test_plans_of_one_cycle_agree_with_the_allocator_once_the_earlier_ones_are_allocated() -> None:
    """Two single-pod workloads planned together on node-a: the first is what kube-scheduler picks,
    the second only once the first one's claim is allocated (why Auto binds it Full in a burst)."""
    state = ClusterState([_node("node-a")], [_slice("node-a")], [CLASS], templates=TEMPLATES)
    pods = []
    plans = []
    for name in ("first", "second"):
        pod = Pod.model_validate(
            {
                "metadata": {"name": name, "namespace": "default"},
                "spec": {
                    "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}],
                    "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu-1"}],
                },
            }
        )
        result = place_gang([pod], state)
        assert result.placed and result.transaction is not None
        claims = result.transaction.commit()  # held by the controller's plan, not allocated in the cluster
        pods.append(pod)
        plans.append(claims[0])
    admissions = []
    for c in plans:
        devices = [r.device for r in c.status.allocation.devices.results]
        admissions.append(_admission(("node-a", {"gpu": devices})))
    assert [a.pod_set_assignments[0].placements[0].claims[0].devices[0].device for a in admissions] == [
        "gpu-0",
        "gpu-1",
    ]
    refs = _refs(gpu="gpu-1")
    assert choose_binding(admissions[0], refs, "default", _view()).node_only
    assert not choose_binding(admissions[1], refs, "default", _view()).node_only
    allocated_first = _allocated("first-gpu", "node-a", "gpu-0")
    assert choose_binding(admissions[1], refs, "default", _view(allocated_first)).node_only


def test_device_results_ignore_share_ids_but_not_capacity() -> None:
    a = _admission(("node-a", {"gpu": ["gpu-0"]})).pod_set_assignments[0].placements[0].claims[0].devices
    b = [d.model_copy(update={"share_id": "abc"}) for d in a]
    assert device_results(a) == device_results(b)
    c = [d.model_copy(update={"consumed_capacity": {"memory": Quantity.parse("10Gi")}}) for d in a]
    assert device_results(a) != device_results(c)
