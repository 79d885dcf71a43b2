"""Fit signatures come from what decides placement (``placement_view``), and workloads that share one
get results that name their own pods and claims, equal to what they get on their own."""

from __future__ import annotations

from typing import Any

import pytest
from test_gang import GPU, gpus, node, template
from test_simple_gang import shared_claim

from queueing.api.core import Job, PodTemplateSpec
from queueing.scheduling.dra_placer import DraPlacer, DraPlan, DraPodSet, DraRequest, placement_view
from queueing.scheduling.from_api import ApiContext, workload_info
from queueing.scheduling.jobs import workload_for_job
from queueing.scheduling.placer import Placement
from queueing.scheduling.snapshot import WorkloadInfo
from queueing.testing.defaults import default_job, generate_job_selector


def job(name: str, uid: str, pods: int = 2, shared: bool = False, **spec: Any) -> Job:
    """A Job as a user submits it, defaulted as the API server does (own name, uid and labels);
    ``shared``: its pods also use the shared claim ``common`` (then placed by the general path)."""
    claims = [{"name": "g", "resourceClaimTemplateName": "t2"}]
    if shared:
        claims.append({"name": "s", "resourceClaimName": "common"})
    obj: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": uid,
            "labels": {"queueing.dra.io/queue-name": "lq"},
        },
        "spec": {
            "parallelism": pods,
            "template": {
                "metadata": {"annotations": {"simulate.queueing.dra.io/duration": f"{len(name)}s"}},
                "spec": {
                    "restartPolicy": "Never",
                    "resourceClaims": claims,
                    "containers": [
                        {
                            "name": "m",
                            "image": f"img:{name}",
                            "resources": {
                                "requests": {"cpu": "1"},
                                "claims": [{"name": c["name"]} for c in claims],
                            },
                        }
                    ],
                    **spec,
                },
            },
        },
    }
    return Job.model_validate(generate_job_selector(default_job(obj)))


def setup() -> tuple[DraPlacer, ApiContext]:
    names = [f"n{i}" for i in range(3)]
    t2 = template("t2", 2)
    objs = [*[node(n) for n in names], *[gpus(n, 10) for n in names], GPU, t2]
    common = shared_claim("common")
    placer = DraPlacer(
        [node(n) for n in names], [gpus(n, 10) for n in names], [GPU], claims=[common], templates=[t2]
    )
    return placer, ApiContext.from_objects([*objs, common])  # type: ignore[arg-type]


def info(j: Job, ctx: ApiContext) -> WorkloadInfo:
    wl = workload_for_job(j)
    assert wl is not None
    return workload_info(wl, ctx)


def renamed(pl: Placement, old: str, new: str) -> object:
    """The plan with pod names of workload ``old`` given to ``new`` (all else as it is)."""
    d = pl.detail
    assert isinstance(d, DraPlan)
    return (
        pl.nodes,
        dict(pl.device_charges),
        [
            (
                p.pod_set,
                p.index,
                p.pod.replace(old, new, 1),
                p.node,
                [x.device.key for x in p.picks],
                p.claims,
            )
            for p in d.pods
        ],
    )


def test_jobs_differing_only_in_what_the_api_server_adds_share_a_signature() -> None:
    _, ctx = setup()
    a, b = info(job("train-a", "uid-a"), ctx), info(job("train-b", "uid-b"), ctx)
    la = a.placement_request.pod_sets[0].template.metadata["labels"]  # type: ignore[attr-defined]
    assert la["batch.kubernetes.io/controller-uid"] == "uid-a" and la["job-name"] == "train-a"
    assert a.fit_signature == b.fit_signature
    assert a.placement_request == b.placement_request
    for other in (
        info(job("c", "uid-c", nodeSelector={"pool": "x"}), ctx),
        info(job("d", "uid-d", tolerations=[{"key": "k", "operator": "Exists"}]), ctx),
        info(job("f", "uid-f", pods=3), ctx),
    ):
        assert other.fit_signature != a.fit_signature


def test_placement_view_keeps_what_decides_placement_only() -> None:
    tmpl = PodTemplateSpec.model_validate(
        {
            "metadata": {"labels": {"app": "x", "job-name": "j1", "team": "t"}, "annotations": {"a": "b"}},
            "spec": {
                "restartPolicy": "Never",
                "schedulerName": "default-scheduler",
                "nodeSelector": {"pool": "a"},
                "initContainers": [{"name": "side", "image": "i", "restartPolicy": "Always"}],
                "containers": [
                    {"name": "m", "image": "i", "command": ["x"], "resources": {"limits": {"cpu": "2"}}}
                ],
                "topologySpreadConstraints": [
                    {"maxSkew": 1, "topologyKey": "zone", "labelSelector": {"matchLabels": {"app": "x"}}}
                ],
            },
        }
    )
    view = placement_view(tmpl)
    assert view == {
        "metadata": {"labels": {"app": "x"}},  # read by the spread constraint's selector
        "spec": {
            "nodeSelector": {"pool": "a"},
            "topologySpreadConstraints": tmpl.spec.to_dict()["topologySpreadConstraints"],
            "initContainers": [{"name": "side", "restartPolicy": "Always"}],
            "containers": [{"name": "m", "resources": {"limits": {"cpu": "2"}}}],
        },
    }
    ps = DraPodSet("main", tmpl)
    assert ps.placement.to_dict() == view
    # the view is what the placer reads: the sidecar is still one (its requests add up)
    assert (ps.placement.spec.init_containers or [])[0].model_extra == {"restartPolicy": "Always"}
    assert (
        DraRequest((ps,)).signature
        == DraRequest((DraPodSet("main", PodTemplateSpec.model_validate(view)),)).signature
    )


@pytest.mark.parametrize("shared", [False, True])
def test_workloads_sharing_a_signature_get_plans_of_their_own(shared: bool) -> None:
    placer, ctx = setup()
    a = info(job("train-a", "uid-a", shared=shared), ctx)
    b = info(job("train-bb", "uid-b", shared=shared), ctx)
    assert a.fit_signature == b.fit_signature
    state = placer.initial_state([])
    pa = placer.place(a, {}, {}, state)  # the general path (the spec was never placed)
    pb = placer.place(b, {}, {}, state)  # the same shape: from the caches (and the simple path)
    assert isinstance(pa, Placement) and isinstance(pb, Placement)
    assert isinstance(pb.detail, DraPlan)
    assert [p.pod for p in pb.detail.pods] == ["job-train-bb-main-0", "job-train-bb-main-1"]
    assert (
        [c.name for p in pb.detail.pods for c in p.claims] == ["g", "s", "g", "s"] if shared else ["g", "g"]
    )
    assert renamed(pb, "job-train-bb", "job-train-a") == renamed(pa, "x", "x")
    # and as a placer that never saw the other workload places it
    fresh, _ = setup()
    alone = fresh.place(b, {}, {}, fresh.initial_state([]))
    assert isinstance(alone, Placement)
    assert renamed(alone, "x", "x") == renamed(pb, "x", "x")
    # after a is held, b goes elsewhere and still names its own pods (the general path again)
    held = placer.add(state, a.key, pa)
    pb2 = placer.place(b, {}, {}, held)
    assert isinstance(pb2, Placement) and isinstance(pb2.detail, DraPlan)
    assert [p.pod for p in pb2.detail.pods] == ["job-train-bb-main-0", "job-train-bb-main-1"]
    taken = {x.device.key for p in pa.detail.pods for x in p.picks}  # type: ignore[attr-defined]
    assert taken.isdisjoint(x.device.key for p in pb2.detail.pods for x in p.picks)
