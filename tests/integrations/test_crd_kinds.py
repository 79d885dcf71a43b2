"""RayJob, RayCluster and JobSet end to end: one emulator (real HTTP, real kubernetes-asyncio client,
the controller as its service account under deploy/base's RBAC), one stand-in cluster with the
stand-in operators, one controller and one SQLite ledger for the whole module.

Per kind: queued while held (created suspended by deploy/'s admission policy, its Workload named
``<kind>-<name>-<hash>`` and owned by it); admitted as a gang only once every pod's claims fit; its
pods bound to the planned devices; evicted whole by a higher-priority Deployment's pod (deploy/'s
pod-gate policy holds it, the stand-in Deployment controller creates it) and requeued, then admitted
again; finished, with its quota released in the ledger. The RayCluster CRD is installed only after
the controller started: its adapter is disabled with one log line until then."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio
import yaml
from sqlalchemy import select

from queueing.config import Config
from queueing.controller.controller import Controller
from queueing.integrations.workloads import workload_name
from queueing.kube.client import CRDS, JOBS, KubeClient, Resource, api_client_for_url
from queueing.ledger import models as m
from queueing.ledger.migrate import upgrade_async
from queueing.ledger.repository import Ledger
from queueing.testing import Emulator
from queueing.testing.cluster import StandIns
from queueing.testing.operator import TEST_CRDS
from queueing.testing.rbac import RbacAuthorizer
from tests.controller.conftest import (
    CONTROLLER_USER,
    REPO,
    Harness,
    emulated_cluster,
    eventually,
)
from tests.controller.test_admission import cond, get, is_true, items
from tests.controller.test_eviction import prio_job, priority_classes
from tests.integrations.test_pod_gated import preempt_with_deployment, remove_deployment

pytestmark = pytest.mark.asyncio(loop_scope="module")

POD_SET_LABEL = "queueing.dra.io/pod-set"
WORKLOAD_UID_LABEL = "queueing.dra.io/workload-uid"
RAYJOBS = Resource("ray.io", "v1", "rayjobs", True, "RayJob")
RAYCLUSTERS = Resource("ray.io", "v1", "rayclusters", True, "RayCluster")
JOBSETS = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", True, "JobSet")


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@dataclass
class Env:
    emu: Emulator
    admin: KubeClient
    ctl: Controller
    cluster: StandIns
    ledger: Ledger
    authorizer: RbacAuthorizer
    logs: Lines
    harness: Harness


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    tmp = tmp_path_factory.mktemp("crd-kinds")
    logs = Lines()
    logger = logging.getLogger("queueing.controller")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(logs)
    async with emulated_cluster(__name__, ("rbac.yaml", "rbac-integrations.yaml")) as emu:
        priority_classes(emu)  # low/mid/high and preemption within the ClusterQueue
        # the preemptor is a Deployment's pod, held at its admission gate by deploy/'s pod-gate policy
        emu.load_objects(REPO / "deploy" / "base" / "pod-gate-policy.yaml")
        # RayJob and JobSet are installed before the controller starts, RayCluster later (a test below)
        for crd in ("ray.io_rayjobs.yaml", "jobset.x-k8s.io_jobsets.yaml"):
            emu.load_objects(TEST_CRDS / crd)
        authorizer = emu.authorizer
        assert isinstance(authorizer, RbacAuthorizer)
        ledger = Ledger.from_url(f"sqlite+aiosqlite:///{tmp / 'ledger.db'}")
        await upgrade_async(ledger.engine)
        api = api_client_for_url(emu.url, token="admin-token")
        harness = Harness(emu, ledger, Config())
        try:
            async with StandIns(emu) as cluster:
                ctl = await harness.start()
                try:
                    yield Env(emu, KubeClient(api), ctl, cluster, ledger, authorizer, logs, harness)
                finally:
                    await harness.stop()
        finally:
            await api.close()
            await ledger.close()
            logger.removeHandler(logs)
            logger.setLevel(level)


def pod_spec(claim_template: str | None) -> dict[str, Any]:
    claims = [{"name": "gpu", "resourceClaimTemplateName": claim_template}] if claim_template else []
    return {
        "restartPolicy": "Never",
        "containers": [
            {"name": "main", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]} if claims else {}}
        ],
        **({"resourceClaims": claims} if claims else {}),
    }


def ray_cluster_spec() -> dict[str, Any]:
    """1 CPU head + 2 workers with 4 GPUs each: every GPU of both nodes."""
    return {
        "headGroupSpec": {"rayStartParams": {}, "template": {"spec": pod_spec(None)}},
        "workerGroupSpecs": [
            {"groupName": "gpu", "replicas": 2, "minReplicas": 2, "template": {"spec": pod_spec("gpu-4")}}
        ],
    }


def meta(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": "default",
        "labels": {"queueing.dra.io/queue-name": "lq", "queueing.dra.io/priority-class": "low"},
    }


@dataclass(frozen=True)
class Kind:
    kind: str
    group: str
    resource: Resource
    body: Callable[[str], dict[str, Any]]
    pods: int  # pods of the whole gang
    selector: Callable[[str], str]  # its pods
    finish: Callable[[Env, str], Any]  # make it finish (its operator or its user)


async def finish_rayjob(env: Env, name: str) -> None:
    # its run time, given now that the test is done with it: SUCCEEDED after it (stand-in operator)
    await env.admin.patch(
        RAYJOBS, name, {"metadata": {"annotations": {"simulate.queueing.dra.io/duration": "0.1s"}}}, "default"
    )


async def finish_raycluster(env: Env, name: str) -> None:
    await env.admin.patch(RAYCLUSTERS, name, {"spec": {"suspend": True}}, "default")  # its user is done


async def finish_jobset(env: Env, name: str) -> None:
    assert env.cluster.finish_pods("default", "", selector=f"jobset.sigs.k8s.io/jobset-name={name}") == 3


KINDS = [
    Kind(
        "RayJob", "ray.io", RAYJOBS,
        lambda n: {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": meta(n),
                   "spec": {"entrypoint": "python train.py", "shutdownAfterJobFinishes": True,
                            "rayClusterSpec": ray_cluster_spec()}},
        3, lambda n: f"ray.io/cluster={n}", finish_rayjob,
    ),
    Kind(
        "RayCluster", "ray.io", RAYCLUSTERS,
        lambda n: {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": meta(n), "spec": ray_cluster_spec()},
        3, lambda n: f"ray.io/cluster={n}", finish_raycluster,
    ),
    Kind(
        "JobSet", "jobset.x-k8s.io", JOBSETS,
        lambda n: {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": meta(n),
                   "spec": {"replicatedJobs": [
                       {"name": "leader", "replicas": 1, "template": {"spec": {"parallelism": 1, "completions": 1,
                        "template": {"spec": pod_spec("gpu-4")}}}},
                       # its labels go onto the child Jobs: they are the JobSet's, not queued themselves
                       {"name": "workers", "replicas": 2, "template": {
                        "metadata": {"labels": {"queueing.dra.io/queue-name": "lq"}},
                        "spec": {"parallelism": 1, "completions": 1,
                        "template": {"spec": pod_spec("gpu-2")}}}},
                   ]}},
        3, lambda n: f"jobset.sigs.k8s.io/jobset-name={n}", finish_jobset,
    ),
]  # fmt: skip


def live_pods(env: Env, selector: str) -> list[dict[str, Any]]:
    return [
        p
        for p in items(env.emu, "pods", labels=selector)
        if not p["metadata"].get("deletionTimestamp") and (p.get("status") or {}).get("phase") != "Succeeded"
    ]


def running(env: Env, selector: str, n: int) -> list[dict[str, Any]]:
    pods = [p for p in live_pods(env, selector) if (p.get("status") or {}).get("phase") == "Running"]
    return pods if len(pods) == n else []


def bound_as_planned(env: Env, wl: dict[str, Any], pods: list[dict[str, Any]]) -> bool:
    """Every pod runs on a planned node of its pod set and its claims hold exactly planned devices
    of that node; together they hold every planned device (the Workload's plan as it is now: a
    kube-scheduler allocation that differed has been written back into it)."""
    adm = wl["status"]["admission"]
    planned_nodes: dict[str, list[str]] = {}
    planned: set[tuple[str, str, str]] = set()
    for psa in adm["podSetAssignments"]:
        for p in psa["placements"]:
            planned_nodes.setdefault(psa["name"], []).append(p["nodeName"])
            planned |= {
                (d["driver"], d["pool"], d["device"]) for c in p.get("claims") or [] for d in c["devices"]
            }
    held: set[tuple[str, str, str]] = set()
    for pod in pods:
        ps = pod["metadata"]["labels"][POD_SET_LABEL]
        node = pod["spec"]["nodeName"]
        if node not in planned_nodes.get(ps, []):
            return False
        planned_nodes[ps].remove(node)
        for status in pod["status"].get("resourceClaimStatuses") or []:
            claim = get(env.emu, "resourceclaims", status["resourceClaimName"], "resource.k8s.io")
            alloc = ((claim or {}).get("status") or {}).get("allocation")
            if not alloc:
                return False
            devices = {(r["driver"], r["pool"], r["device"]) for r in alloc["devices"]["results"]}
            if any(pool != node for _, pool, _ in devices):
                return False
            held |= devices
    return held == planned and not any(planned_nodes.values())


async def no_quota_held(env: Env, timeout: float = 20.0) -> None:
    """Wait until the ledger holds no admission and no usage (a condition, polled)."""
    deadline = time.monotonic() + timeout
    while True:
        state = await env.ledger.load_state()
        if not state.admissions and all(v == 0 for v in state.usage.values()):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the ledger still holds {sorted(state.admissions)}")
        await asyncio.sleep(0.02)


async def test_a_kind_whose_crd_is_missing_is_disabled_with_one_line_until_its_crd_appears(env: Env) -> None:
    disabled = [line for line in env.logs.lines if "RayCluster" in line]
    assert disabled == [
        "integration RayCluster disabled: CRD rayclusters.ray.io is not installed (its informer starts when it is)"
    ]
    assert env.ctl.sources["RayJob"].ready and env.ctl.sources["JobSet"].ready
    assert env.ctl.sources["RayCluster"].informer is None
    crd = yaml.safe_load((TEST_CRDS / "ray.io_rayclusters.yaml").read_text())
    await env.admin.create(CRDS, crd)
    await eventually(lambda: env.ctl.sources["RayCluster"].ready, "the RayCluster informer runs")
    assert "integration RayCluster enabled: CRD rayclusters.ray.io is served" in env.logs.lines
    assert not [r for r in env.emu.authorizer.denied]  # type: ignore[union-attr]


async def test_a_bad_rayjob_gets_an_event_naming_its_field_and_stops_nobody(env: Env) -> None:
    bad = KINDS[0].body("bad-groups")
    bad["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["minReplicas"] = 3  # more than replicas (2)
    await env.admin.create(RAYJOBS, bad)
    good = await env.admin.create(JOBS, prio_job("next-in-line", "low", template="gpu-1"))
    assert good["spec"]["suspend"] is True

    def warning() -> dict[str, Any] | None:
        for e in items(env.emu, "events"):
            if e["reason"] == "InvalidRayJob" and e["involvedObject"]["name"] == "bad-groups":
                return e
        return None

    event = await eventually(warning, "a Warning Event on the RayJob")
    assert event["type"] == "Warning" and event["involvedObject"]["kind"] == "RayJob"
    assert event["message"] == (
        "RayJob default/bad-groups: spec.rayClusterSpec.workerGroupSpecs[0].minReplicas: "
        "3 is more than replicas (2)"
    )
    # the Job queued after it is admitted and runs; the bad RayJob has no Workload and stays held
    await eventually(lambda: running(env, "batch.kubernetes.io/job-name=next-in-line", 1), "the Job runs")
    assert not [
        w for w in items(env.emu, "workloads", "queueing.dra.io") if "bad-groups" in w["metadata"]["name"]
    ]
    assert get(env.emu, "rayjobs", "bad-groups", "ray.io")["spec"]["suspend"] is True  # type: ignore[index]
    await env.admin.delete(RAYJOBS, "bad-groups", "default")
    await env.admin.delete(JOBS, "next-in-line", "default", propagation_policy="Background")
    await eventually(lambda: not items(env.emu, "workloads", "queueing.dra.io"), "no Workload left")


async def test_a_rayjob_worker_group_is_admitted_partially_down_to_min_replicas(env: Env) -> None:
    await env.admin.create(JOBS, prio_job("blocker", "mid", template="gpu-1"))
    await eventually(lambda: running(env, "batch.kubernetes.io/job-name=blocker", 1), "the blocker runs")
    body = KINDS[0].body("partial")
    body["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["minReplicas"] = 1
    await env.admin.create(RAYJOBS, body)
    name = workload_name("RayJob", "ray.io", "partial")
    wl = await eventually(lambda: is_true(w := get(env.emu, "workloads", name, "queueing.dra.io"), "Admitted") and w,
                          "admitted with one worker")  # fmt: skip
    counts = {psa["name"]: psa["count"] for psa in wl["status"]["admission"]["podSetAssignments"]}
    assert counts == {"head": 1, "gpu": 1} and wl["spec"]["podSets"][1]["minCount"] == 1
    rayjob = await eventually(lambda: (r := get(env.emu, "rayjobs", "partial", "ray.io")) and not r["spec"]["suspend"] and r,
                              "the RayJob is started")  # fmt: skip
    assert rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] == 1
    assert rayjob["metadata"]["annotations"]["queueing.dra.io/original-replicas"] == '{"gpu": 2}'
    await eventually(lambda: running(env, "ray.io/cluster=partial", 2), "the head and one worker run")
    await env.admin.delete(RAYJOBS, "partial", "default", propagation_policy="Background")
    await env.admin.delete(JOBS, "blocker", "default", propagation_policy="Background")
    await eventually(lambda: not items(env.emu, "workloads", "queueing.dra.io"), "no Workload left")
    await eventually(lambda: not live_pods(env, "ray.io/cluster=partial"), "its pods are gone")
    await no_quota_held(env)  # the deleted Workloads' admissions are released in the ledger


@pytest.mark.parametrize("k", KINDS, ids=[k.kind for k in KINDS])
async def test_queued_gang_admitted_bound_preempted_requeued_finished(env: Env, k: Kind) -> None:
    emu, admin = env.emu, env.admin
    name = f"{k.kind.lower()}-e2e"
    wl_name = workload_name(k.kind, k.group, name)
    assert wl_name.startswith(f"{k.kind.lower()}-{name}-") and len(wl_name) == len(name) + len(k.kind) + 7

    def workload() -> dict[str, Any] | None:
        return get(emu, "workloads", wl_name, "queueing.dra.io")

    # a Job holds one GPU: the gang (every GPU of both nodes) does not fit
    await admin.create(JOBS, prio_job("blocker", "mid", template="gpu-1"))
    await eventually(lambda: running(env, "batch.kubernetes.io/job-name=blocker", 1), "the blocker runs")
    created = await admin.create(k.resource, k.body(name))
    assert created["spec"]["suspend"] is True  # deploy/'s admission policy

    # queued while held: its Workload, owned by it, pending with a reason; no pods
    wl = await eventually(lambda: cond(workload(), "QuotaReserved") and workload(), "the Workload is pending")
    (owner,) = wl["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        k.kind,
        name,
        created["metadata"]["uid"],
        True,
    )
    assert cond(wl, "QuotaReserved")["status"] == "False"  # type: ignore[index]
    assert sum(ps["count"] for ps in wl["spec"]["podSets"]) == k.pods
    assert get(emu, k.resource.plural, name, k.group)["spec"]["suspend"] is True  # type: ignore[index]
    assert not live_pods(env, k.selector(name))

    # the blocker goes: the whole gang is admitted at once and every pod lands on its planned devices
    await admin.delete(JOBS, "blocker", "default", propagation_policy="Background")
    wl = await eventually(lambda: is_true(workload(), "Admitted") and workload(), "the gang is admitted")
    assert wl["status"]["admission"]["plannedDevices"] == 8
    pods = await eventually(lambda: running(env, k.selector(name), k.pods), "every pod of the gang runs")
    assert all(p["metadata"]["labels"][WORKLOAD_UID_LABEL] == wl["metadata"]["uid"] for p in pods)
    # a JobSet's child Jobs (labelled with the queue through its template) have no Workload of their own
    assert not [
        w
        for w in items(emu, "workloads", "queueing.dra.io")
        if w["metadata"]["name"].startswith(f"job-{name}")
    ]
    await eventually(lambda: bound_as_planned(env, workload() or {}, running(env, k.selector(name), k.pods)),
                     "the pods hold the planned devices")  # fmt: skip
    state = await env.ledger.load_state()
    (active,) = state.admissions.values()
    assert active.name == wl_name and sum(state.usage.values()) == 8

    # a higher-priority Deployment's pod (1 GPU; every GPU is the gang's): the gang is evicted whole
    # (by that pod's Workload, recorded in the ledger), suspended, its pods gone, requeued
    serve_wl = await preempt_with_deployment(emu, admin, env.ledger, workload() or {})
    assert get(emu, k.resource.plural, name, k.group)["spec"]["suspend"] is True  # type: ignore[index]
    assert not live_pods(env, k.selector(name))
    requeued = await eventually(lambda: cond(workload(), "Requeued"), "the gang is requeued")
    assert requeued["status"] == "True" and "admission" not in (workload() or {})["status"]

    # the Deployment goes (its pod, its Workload, its quota): admitted again, as a whole
    await remove_deployment(emu, admin, env.ledger, serve_wl)
    await eventually(lambda: is_true(workload(), "Admitted"), "the gang is admitted again")
    await eventually(lambda: running(env, k.selector(name), k.pods), "every pod runs again")

    # finished: the Workload says so and the ledger holds no quota any more
    await k.finish(env, name)
    wl = await eventually(lambda: is_true(workload(), "Finished") and workload(), f"the {k.kind} finished")
    assert cond(wl, "Finished")["reason"] == "Succeeded"  # type: ignore[index]
    state = await env.ledger.load_state()
    assert not state.admissions and all(v == 0 for v in state.usage.values())
    await eventually(lambda: not live_pods(env, k.selector(name)), "its pods are gone")

    await admin.delete(k.resource, name, "default", propagation_policy="Background")
    await eventually(lambda: workload() is None, "its Workload goes with it")
    assert not env.cluster.errors
    assert not env.emu.authorizer.denied  # type: ignore[union-attr]


async def test_a_restart_recovers_a_running_rayjob_without_a_second_admission(env: Env) -> None:
    """Invariant 4: the restarted controller rebuilds the admission from the ledger and the Workload
    (its RayJob informer starts once the CRD informer lists the CRD); nothing is admitted twice and
    the running pods are left alone."""
    body = KINDS[0].body("resumed")
    await env.admin.create(RAYJOBS, body)
    name = workload_name("RayJob", "ray.io", "resumed")
    pods = await eventually(lambda: running(env, "ray.io/cluster=resumed", 3), "the RayJob runs")
    wl = get(env.emu, "workloads", name, "queueing.dra.io")
    assert wl is not None
    await env.harness.stop()
    env.ctl = ctl = await env.harness.start()
    assert ctl.sources["RayJob"].ready and wl["metadata"]["uid"] in ctl.admitted
    await eventually(lambda: ctl.stats.synced >= 1, "the restarted controller synced")
    # the same pods still run (the gang was not restarted), and nothing was admitted again
    assert sorted(p["metadata"]["name"] for p in running(env, "ray.io/cluster=resumed", 3)) == sorted(
        p["metadata"]["name"] for p in pods
    )
    assert ctl.stats.admissions == 0
    await finish_rayjob(env, "resumed")
    await eventually(lambda: is_true(get(env.emu, "workloads", name, "queueing.dra.io"), "Finished"),
                     "the recovered RayJob finishes")  # fmt: skip
    async with env.ledger.engine.connect() as c:
        query = select(m.Admission).where(m.Admission.workload_uid == wl["metadata"]["uid"])
        rows = (await c.execute(query)).all()
    assert len(rows) == 1 and rows[0].released_at_ms is not None
    await env.admin.delete(RAYJOBS, "resumed", "default", propagation_policy="Background")
    await eventually(lambda: not items(env.emu, "workloads", "queueing.dra.io"), "no Workload left")


async def test_every_integration_permission_was_used(env: Env) -> None:
    granted = {
        g
        for g in env.authorizer.granted(CONTROLLER_USER)
        if g.role.startswith("ClusterRole/queueing-controller-")
        and g.resource != "leaderworkersets"  # (tests/integrations/test_pod_gated.py checks its role)
    }
    assert {g.resource for g in granted} == {"rayjobs", "rayclusters", "jobsets"}
    used = {(g.role, g.rule, g.api_group, g.resource, g.verb) for g in env.authorizer.used}
    assert not [g for g in granted if (g.role, g.rule, g.api_group, g.resource, g.verb) not in used]
