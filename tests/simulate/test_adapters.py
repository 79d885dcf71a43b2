"""Unit tests of the adapters: Job/pod-group Workloads, API conversions, DraPlacer states."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from scenario_builder import GPU, cluster, template

from queueing.api.base import KubeObject
from queueing.api.core import Job, Node, Pod
from queueing.api.registry import parse_object
from queueing.api.resource import DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice
from queueing.api.v1beta1 import ClusterQueue, Workload, WorkloadStatus
from queueing.scheduling import ClusterSnapshot, SchedulingConfig, run_cycle
from queueing.scheduling.dra_placer import DraPlacer, DraPlan
from queueing.scheduling.from_api import (
    ApiContext,
    FromApiError,
    admission_status,
    admitted_workload,
    cluster_queue_spec,
    queue_specs,
    workload_info,
)
from queueing.scheduling.jobs import WorkloadError, workload_for_job, workload_for_pod_group
from queueing.scheduling.placer import Placement, PlacementFailure

Q = "queueing.dra.io/v1beta1"


def objs(docs: list[dict[str, Any]]) -> list[KubeObject]:
    return [parse_object(d) for d in docs]


def placer_for(o: list[KubeObject]) -> DraPlacer:
    return DraPlacer(
        [x for x in o if isinstance(x, Node)],
        [x for x in o if isinstance(x, ResourceSlice)],
        [x for x in o if isinstance(x, DeviceClass)],
        claims=[x for x in o if isinstance(x, ResourceClaim)],
        templates=[x for x in o if isinstance(x, ResourceClaimTemplate)],
    )


def job_doc(**meta: Any) -> dict[str, Any]:
    spec = {
        "parallelism": 4,
        "template": {
            "spec": {
                "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "gpus-2"}],
                "containers": [
                    {
                        "name": "m",
                        "image": "x",
                        "resources": {"claims": [{"name": "gpus"}], "requests": {"cpu": "4"}},
                    }
                ],
            }
        },
    }
    metadata = {
        "name": "train",
        "namespace": "ml",
        "uid": "u-1",
        "labels": {"queueing.dra.io/queue-name": "lq"},
    }
    metadata.update(meta)
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec}


# ------------------------------------------------------------------------------------ jobs
def test_workload_for_job() -> None:
    job = Job.model_validate(
        job_doc(
            labels={"queueing.dra.io/queue-name": "lq", "queueing.dra.io/priority-class": "high"},
            annotations={"queueing.dra.io/min-parallelism": "2"},
        )
    )
    wl = workload_for_job(job, {"high": 500}, {"high": 7})
    assert wl is not None
    assert (wl.namespace, wl.name, wl.spec.queue_name) == ("ml", "job-train", "lq")
    (ps,) = wl.spec.pod_sets
    assert (ps.name, ps.count, ps.min_count) == ("main", 4, 2)
    assert wl.spec.priority == 500  # the WorkloadPriorityClass wins over a PriorityClass of that name
    assert (
        wl.spec.priority_class_ref is not None and wl.spec.priority_class_ref.kind == "WorkloadPriorityClass"
    )
    (owner,) = wl.metadata.owner_references or []
    assert (owner.kind, owner.name, owner.uid, owner.controller) == ("Job", "train", "u-1", True)
    assert wl.labels["queueing.dra.io/queue-name"] == "lq"
    # priority from a PriorityClass; parallelism capped by completions
    job2 = Job.model_validate(
        job_doc(labels={"queueing.dra.io/queue-name": "lq", "queueing.dra.io/priority-class": "pc"})
    )
    job2.spec.completions = 3
    wl2 = workload_for_job(job2, {}, {"pc": 7})
    assert wl2 is not None and wl2.spec.priority == 7 and wl2.spec.pod_sets[0].count == 3


def test_workload_for_a_partially_admitted_job_asks_for_its_own_parallelism() -> None:
    """The controller lowered parallelism 4 to 2 and kept 4 in an annotation: a Workload built from
    the Job again (e.g. after the old one was deleted) asks for 4 pods, with the same minimum."""
    job = Job.model_validate(
        job_doc(
            annotations={
                "queueing.dra.io/min-parallelism": "2",
                "queueing.dra.io/original-parallelism": "4",
            }
        )
    )
    job.spec.parallelism = 2
    wl = workload_for_job(job)
    assert wl is not None
    (ps,) = wl.spec.pod_sets
    assert (ps.count, ps.min_count) == (4, 2)


def test_workload_for_job_errors_and_unqueued() -> None:
    assert workload_for_job(Job.model_validate(job_doc(labels={}))) is None
    bad = Job.model_validate(job_doc(annotations={"queueing.dra.io/min-parallelism": "9"}))
    with pytest.raises(
        WorkloadError, match=r"Job ml/train: metadata.annotations\[queueing.dra.io/min-parallelism\]"
    ):
        workload_for_job(bad)
    unknown = Job.model_validate(
        job_doc(labels={"queueing.dra.io/queue-name": "lq", "queueing.dra.io/priority-class": "x"})
    )
    with pytest.raises(WorkloadError, match="no WorkloadPriorityClass or PriorityClass named 'x'"):
        workload_for_job(unknown)


def pod(name: str, image: str = "x", total: str = "3") -> Pod:
    return Pod.model_validate(
        {
            "metadata": {
                "name": name,
                "namespace": "ml",
                "labels": {"queueing.dra.io/pod-group": "g", "queueing.dra.io/queue-name": "lq"},
                "annotations": {"queueing.dra.io/pod-group-total-count": total},
            },
            "spec": {"containers": [{"name": "m", "image": image}]},
        }
    )


def test_workload_for_pod_group() -> None:
    wl = workload_for_pod_group([pod("b"), pod("a"), pod("c", image="y")])
    assert wl.name == "pod-group-g" and wl.spec.queue_name == "lq"
    assert [(p.name, p.count) for p in wl.spec.pod_sets] == [("main", 2), ("ps-1", 1)]
    assert len(wl.metadata.owner_references or []) == 3
    with pytest.raises(WorkloadError, match="differs from the group's"):
        workload_for_pod_group([pod("a"), pod("b", total="4")])
    with pytest.raises(WorkloadError, match="more than 2"):
        workload_for_pod_group([pod("a", total="2"), pod("b", total="2"), pod("c", total="2")])


# ------------------------------------------------------------------------------------ from_api
def test_cluster_queue_spec() -> None:
    cq = ClusterQueue.model_validate(
        {
            "apiVersion": Q,
            "kind": "ClusterQueue",
            "metadata": {"name": "cq"},
            "spec": {
                "cohortName": "c",
                "flavorFungibility": {"whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "MayStopSearch"},
                "preemption": {
                    "reclaimWithinCohort": "Any",
                    "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 10},
                    "withinClusterQueue": "LowerOrNewerEqualPriority",
                },
                "fairSharing": {"weight": "500m"},
                "admissionScope": {"admissionMode": "UsageBasedAdmissionFairSharing"},
                "resourceGroups": [
                    {
                        "coveredResources": [GPU],
                        "flavors": [
                            {
                                "name": "h200",
                                "resources": [
                                    {"name": GPU, "nominalQuota": 8, "borrowingLimit": 4, "lendingLimit": 2}
                                ],
                            }
                        ],
                    }
                ],
            },
        }
    )
    s = cluster_queue_spec(cq)
    assert s.cohort == "c" and s.fair_weight == Fraction(1, 2) and s.admission_fair_sharing
    assert (s.flavor_fungibility.when_can_borrow, s.flavor_fungibility.when_can_preempt) == (
        "TryNextFlavor",
        "Preempt",
    )
    p = s.preemption
    assert (
        p.within_cluster_queue,
        p.reclaim_within_cohort,
        p.borrow_within_cohort,
        p.max_priority_threshold,
    ) == (
        "LowerOrNewerEqualPriority",
        "Any",
        "LowerPriority",
        10,
    )
    q = s.quotas()[("h200", GPU)]
    assert (q.nominal, q.borrowing_limit, q.lending_limit) == (8, 4, 2)
    assert s.namespace_selector is None  # not set: selects no namespace, as Kueue


def scenario_objects() -> list[KubeObject]:
    return objs(
        [
            *cluster(2),
            template("ml", 2),
            {"apiVersion": Q, "kind": "ResourceFlavor", "metadata": {"name": "h200"}},
            {
                "apiVersion": Q,
                "kind": "ClusterQueue",
                "metadata": {"name": "cq"},
                "spec": {
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {
                            "coveredResources": [GPU, "cpu"],
                            "flavors": [
                                {
                                    "name": "h200",
                                    "resources": [
                                        {"name": GPU, "nominalQuota": 16},
                                        {"name": "cpu", "nominalQuota": 64},
                                    ],
                                }
                            ],
                        }
                    ],
                },
            },
            {
                "apiVersion": Q,
                "kind": "LocalQueue",
                "metadata": {"name": "lq", "namespace": "ml"},
                "spec": {"clusterQueue": "cq"},
            },
        ]
    )


def test_admission_status_round_trip_and_recovery() -> None:
    o = scenario_objects()
    ctx = ApiContext.from_objects(o)
    qs = queue_specs(o, ["ml"])
    wl = workload_for_job(Job.model_validate(job_doc()))
    assert wl is not None
    info = workload_info(wl, ctx)
    (ps,) = info.pod_sets
    assert ps.device_requests == {GPU: 2} and ps.requests == {"cpu": 4}
    placer = placer_for(o)
    snap = ClusterSnapshot(
        cluster_queues=qs.cluster_queues,
        local_queues=qs.local_queues,
        flavors=qs.flavors,
        namespaces=qs.namespaces,
        pending=(info,),
    )
    res = run_cycle(snap, placer, 0.0, SchedulingConfig())
    (adm,) = res.admissions
    assert adm.assignment.usage == {("h200", GPU): 8, ("h200", "cpu"): 16}
    plan = adm.assignment.placement.detail
    assert isinstance(plan, DraPlan)
    devices = {d for p in plan.pods for d in p.devices}
    assert len(devices) == 8
    status = admission_status(adm)
    assert status.planned_devices == 8
    (psa,) = status.pod_set_assignments
    assert psa.count == 4 and psa.flavors == {GPU: "h200", "cpu": "h200"}
    assert {str(k): str(v) for k, v in (psa.resource_usage or {}).items()} == {GPU: "8", "cpu": "16"}
    assert [p.index for p in psa.placements or []] == [0, 1, 2, 3]
    # through the API object and back (as after a controller restart)
    wl.status = WorkloadStatus(admission=status)  # assigned, so that to_dict() includes it
    wl2 = Workload.model_validate(wl.to_dict())
    rec = admitted_workload(wl2, ctx, admission_time=0.0)
    assert rec.usage == adm.assignment.usage and rec.counts == {"main": 4}
    fresh = placer_for(o)
    state = fresh.initial_state([rec])
    assert fresh.used_devices(state) == devices
    # the recovered plan holds its devices: another 4 x 2 fits only on the other 8 GPUs
    other = workload_info(workload_for_job(Job.model_validate(job_doc(name="two", uid="u-2"))), ctx)  # type: ignore[arg-type]
    pl = fresh.place(other, {"main": 4}, {}, state)
    assert isinstance(pl, Placement)
    assert isinstance(pl.detail, DraPlan) and not ({d for p in pl.detail.pods for d in p.devices} & devices)
    third = workload_info(workload_for_job(Job.model_validate(job_doc(name="three", uid="u-3"))), ctx)  # type: ignore[arg-type]
    assert isinstance(fresh.place(third, {"main": 4}, {}, fresh.add(state, other.key, pl)), PlacementFailure)


def test_placer_states_are_values() -> None:
    o = scenario_objects()
    ctx = ApiContext.from_objects(o)
    placer = placer_for(o)
    wl = workload_info(workload_for_job(Job.model_validate(job_doc())), ctx)  # type: ignore[arg-type]
    empty = placer.initial_state([])
    a = placer.place(wl, {"main": 8}, {}, empty)  # 8 pods x 2 GPUs = all 16 GPUs
    assert isinstance(a, Placement) and a.device_charges[GPU] == 16
    full = placer.add(empty, wl.key, a)
    assert placer.used_devices(empty) == set()  # adding did not change the input state
    assert isinstance(placer.place(wl, {"main": 1}, {}, full), PlacementFailure)
    freed = placer.remove(full, wl.key)
    assert isinstance(placer.place(wl, {"main": 8}, {}, freed), Placement)
    # an overlapping reservation (the same plan added twice) still means "not free" after one removal
    twice = placer.add(full, "other/key", a)
    assert isinstance(placer.place(wl, {"main": 1}, {}, placer.remove(twice, wl.key)), PlacementFailure)
    assert len(placer.used_devices(placer.remove(placer.remove(twice, wl.key), "other/key"))) == 0


def test_shared_claim_is_charged_once() -> None:
    o = scenario_objects() + objs(
        [
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": "shared", "namespace": "ml"},
                "spec": {
                    "devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": GPU, "count": 2}}]}
                },
            }
        ]
    )
    ctx = ApiContext.from_objects(o)
    doc = job_doc()
    doc["spec"]["parallelism"] = 2
    doc["spec"]["template"]["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": "shared"}]
    wl = workload_info(workload_for_job(Job.model_validate(doc)), ctx)  # type: ignore[arg-type]
    assert wl.pod_sets[0].device_requests == {GPU: 1}  # 2 devices shared by 2 pods
    placer = placer_for(o)
    pl = placer.place(wl, {"main": 2}, {}, placer.initial_state([]))
    assert isinstance(pl, Placement)
    assert pl.device_charges[GPU] == 2 and len(set(pl.nodes)) == 1  # both pods reach the claim's node
    state = placer.add(placer.initial_state([]), wl.key, pl)
    assert len(placer.used_devices(state)) == 2


def test_bad_priority_class_ref_names_the_field() -> None:
    o = scenario_objects()
    wl = workload_for_job(Job.model_validate(job_doc()))
    assert wl is not None
    wl.spec.priority = None
    wl.spec.pod_sets[0].template.spec.priority_class_name = "nope"
    with pytest.raises(
        FromApiError, match=r"Workload ml/job-train: spec.podSets\[0\].template.spec.priorityClassName"
    ):
        workload_info(wl, ApiContext.from_objects(o))
