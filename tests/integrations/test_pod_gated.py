"""The pod-gated kinds end to end (StatefulSet, Deployment, LeaderWorkerSet): through the real
kubernetes-asyncio client against the emulator, which runs deploy/'s MutatingAdmissionPolicies (the
queue name copied into the pod templates, the admission gate on the pods), with the stand-in
controllers of queueing/testing creating the pods. Per kind: queued while held; admitted as a gang
only when every pod's claims fit; pods bound to the planned devices; evicted by a higher-priority
Deployment's pod and requeued; done, with the quota released in the ledger.

One emulator, controller and stand-in cluster for the module (each test leaves it empty)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
import yaml
from sqlalchemy import select

from queueing.config import Config
from queueing.kube.client import JOBS, KubeClient, Resource, api_client_for_url
from queueing.ledger import models as m
from queueing.ledger.repository import Ledger
from queueing.testing import Emulator, run_emulator
from queueing.testing.cluster import StandIns
from queueing.testing.rbac import RbacAuthorizer
from tests.controller.conftest import (
    CONTROLLER_TOKEN,
    CONTROLLER_USER,
    CRDS,
    REPO,
    Harness,
    cluster_objects,
    eventually,
    sqlite_ledger,
)
from tests.controller.test_admission import claim_devices, cond, get, is_true, items
from tests.controller.test_eviction import plan_devices, prio_job, priority_classes

pytestmark = pytest.mark.asyncio(loop_scope="module")

TEST_CRDS = REPO / "queueing" / "testing" / "crds"
DEPLOYMENTS = Resource("apps", "v1", "deployments", True, "Deployment")
STATEFULSETS = Resource("apps", "v1", "statefulsets", True, "StatefulSet")
LWS = Resource("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", True, "LeaderWorkerSet")
GATE = "queueing.dra.io/admission"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def emu() -> AsyncIterator[Emulator]:
    async with run_emulator(crds_dir=CRDS, bookmark_interval=None) as e:
        e.load_crds(TEST_CRDS)
        e.tokens[CONTROLLER_TOKEN] = CONTROLLER_USER
        for policy in ("mutating-admission-policy.yaml", "pod-gate-policy.yaml"):
            e.load_objects(REPO / "deploy" / "base" / policy)
        e.load_objects(cluster_objects())
        priority_classes(e)
        rbac = [
            d
            for f in ("rbac.yaml", "rbac-integrations.yaml")  # the base's and the CRD kinds' roles
            for d in yaml.safe_load_all((REPO / "deploy" / "base" / f).read_text())
        ]
        e.authorizer = RbacAuthorizer.from_objects([d for d in rbac if d])
        yield e


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def ledger(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Ledger]:
    async with sqlite_ledger(tmp_path_factory.mktemp("ledger")) as lg:
        yield lg


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(emu: Emulator) -> AsyncIterator[StandIns]:
    async with StandIns(emu) as s:
        yield s


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def harness(emu: Emulator, ledger: Ledger, cluster: StandIns) -> AsyncIterator[Harness]:
    h = Harness(emu, ledger, Config())
    await h.start()
    try:
        yield h
    finally:
        await h.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def admin(emu: Emulator) -> AsyncIterator[KubeClient]:
    api = api_client_for_url(emu.url, token="admin-token")
    try:
        yield KubeClient(api)
    finally:
        await api.close()


# ---------------------------------------------------------------------------- objects
def pod_template(template: str, priority: str, app: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": app, "queueing.dra.io/priority-class": priority}},
        "spec": {
            "containers": [{"name": "main", "image": "vllm", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
        },
    }


def apps_object(kind: str, name: str, replicas: int, template: str, priority: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "default", "labels": {"queueing.dra.io/queue-name": "lq"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": pod_template(template, priority, name),
        },
    }


def lws_object(name: str, replicas: int, size: int, template: str, priority: str) -> dict[str, Any]:
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": "default", "labels": {"queueing.dra.io/queue-name": "lq"}},
        "spec": {
            "replicas": replicas,
            "leaderWorkerTemplate": {"size": size, "workerTemplate": pod_template(template, priority, name)},
        },
    }


# ---------------------------------------------------------------------------- reading
def pods_of(emu: Emulator, app: str) -> list[dict[str, Any]]:
    return [p for p in items(emu, "pods", labels=f"app={app}") if not p["metadata"].get("deletionTimestamp")]


def phase(p: dict[str, Any]) -> str:
    return (p.get("status") or {}).get("phase", "")


def all_running(emu: Emulator, app: str, n: int) -> list[dict[str, Any]] | None:
    pods = pods_of(emu, app)
    return pods if len(pods) == n and all(phase(p) == "Running" for p in pods) else None


def gated(p: dict[str, Any]) -> bool:
    return any(g["name"] == GATE for g in p["spec"].get("schedulingGates") or [])


def workloads(emu: Emulator, prefix: str) -> list[dict[str, Any]]:
    return sorted(
        (w for w in items(emu, "workloads", "queueing.dra.io") if w["metadata"]["name"].startswith(prefix)),
        key=lambda w: w["metadata"]["name"],
    )


def admitted(emu: Emulator, prefix: str) -> list[dict[str, Any]]:
    return [w for w in workloads(emu, prefix) if is_true(w, "Admitted")]


def bound_as_planned(emu: Emulator, wl: dict[str, Any], pods: list[dict[str, Any]]) -> None:
    """Every pod runs on its planned node, its claim holds exactly its planned devices."""
    plan = {
        (psa["name"], p["index"]): p
        for psa in wl["status"]["admission"]["podSetAssignments"]
        for p in psa["placements"]
    }
    assert len(plan) == len(pods)
    for pod in pods:
        meta = pod["metadata"]
        p = plan[
            (
                meta["labels"]["queueing.dra.io/pod-set"],
                int(meta["annotations"]["queueing.dra.io/placement-index"]),
            )
        ]
        assert pod["spec"]["nodeName"] == p["nodeName"]
        claim = get(
            emu,
            "resourceclaims",
            pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"],
            "resource.k8s.io",
        )
        assert claim is not None
        assert claim_devices(claim) == {
            (d["driver"], d["pool"], d["device"]) for d in p["claims"][0]["devices"]
        }


async def released(ledger: Ledger, uid: str, timeout: float = 20.0) -> bool:
    """The ledger holds no admission of ``uid`` (waited for: a deleted Workload's is released in the
    controller's next sync)."""
    deadline = time.monotonic() + timeout
    while uid in (await ledger.load_state()).admissions:
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def evictions_of(ledger: Ledger, uid: str) -> list[Any]:
    async with ledger.engine.connect() as c:
        return list((await c.execute(select(m.Eviction).where(m.Eviction.workload_uid == uid))).all())


async def preempt_with_deployment(
    emu: Emulator, admin: KubeClient, ledger: Ledger, victim: dict[str, Any]
) -> dict[str, Any]:
    """A high-priority Deployment's pod (1 GPU; every GPU is taken) evicts ``victim`` whole: its
    Workload is evicted, its quota released in the ledger, and it is pending again."""
    await admin.create(DEPLOYMENTS, apps_object("Deployment", "serve", 1, "gpu-1", "high"))
    serve = await eventually(lambda: all_running(emu, "serve", 1), "the serving pod runs")
    (serve_wl,) = admitted(emu, f"pod-{serve[0]['metadata']['name']}-")
    bound_as_planned(emu, serve_wl, serve)
    uid = victim["metadata"]["uid"]
    name = victim["metadata"]["name"]
    wl = get(emu, "workloads", name, "queueing.dra.io")
    evicted = cond(wl, "Evicted")
    assert evicted is not None and evicted["reason"] == "Preempted"
    assert serve_wl["metadata"]["name"] in evicted["message"]
    (row,) = await evictions_of(ledger, uid)
    assert row.preemptor_uid == serve_wl["metadata"]["uid"]
    assert await released(ledger, uid)
    return serve_wl


async def remove_deployment(
    emu: Emulator, admin: KubeClient, ledger: Ledger, serve_wl: dict[str, Any]
) -> None:
    await admin.delete(DEPLOYMENTS, "serve", "default")
    await eventually(lambda: not pods_of(emu, "serve"), "the serving pod is gone")
    await eventually(lambda: not workloads(emu, serve_wl["metadata"]["name"]), "its Workload goes with it")
    assert await released(ledger, serve_wl["metadata"]["uid"])


async def test_statefulset(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns, ledger: Ledger
) -> None:
    # one GPU taken: the 2 × 4 GPU StatefulSet does not fit, none of its pods starts
    await admin.create(JOBS, prio_job("blocker", "mid"))
    await eventually(lambda: admitted(emu, "job-blocker"), "the blocker runs")
    await admin.create(STATEFULSETS, apps_object("StatefulSet", "web", 2, "gpu-4", "low"))
    (wl,) = await eventually(lambda: workloads(emu, "statefulset-web-"), "the StatefulSet's Workload")
    assert wl["metadata"]["ownerReferences"][0]["kind"] == "StatefulSet"
    assert [(ps["name"], ps["count"]) for ps in wl["spec"]["podSets"]] == [("main", 2)]
    pods = pods_of(emu, "web")
    assert len(pods) == 2 and all(gated(p) and not p["spec"].get("nodeName") for p in pods)
    assert not is_true(wl, "QuotaReserved")

    # the blocker ends: the gang is admitted whole and bound as planned
    cluster.finish_pods("default", "blocker")
    pods = await eventually(lambda: all_running(emu, "web", 2), "the StatefulSet's pods run")
    (wl,) = admitted(emu, "statefulset-web-")
    bound_as_planned(emu, wl, pods)
    assert len(plan_devices(wl)) == 8

    # a serving pod of higher priority takes a GPU: the whole StatefulSet is evicted and waits again
    serve_wl = await preempt_with_deployment(emu, admin, ledger, wl)
    waiting = await eventually(
        lambda: len(p := pods_of(emu, "web")) == 2 and all(gated(x) for x in p) and p, "its pods back, gated"
    )
    assert all(not p["spec"].get("nodeName") for p in waiting)
    requeued = workloads(emu, "statefulset-web-")[0]
    assert requeued["metadata"]["uid"] == wl["metadata"]["uid"] and not is_true(requeued, "QuotaReserved")

    # the serving Deployment goes: the StatefulSet is admitted again; scaled to 0 it is done
    await remove_deployment(emu, admin, ledger, serve_wl)
    pods = await eventually(lambda: all_running(emu, "web", 2), "the StatefulSet runs again")
    bound_as_planned(emu, admitted(emu, "statefulset-web-")[0], pods)
    await admin.patch(STATEFULSETS, "web", {"spec": {"replicas": 0}}, "default")
    await eventually(
        lambda: is_true(workloads(emu, "statefulset-web-")[0], "Finished"), "Finished when scaled to 0"
    )
    assert await released(ledger, wl["metadata"]["uid"])
    await admin.delete(STATEFULSETS, "web", "default")
    await eventually(lambda: not workloads(emu, "statefulset-web-"), "its Workload goes with it")
    assert not cluster.errors


async def test_deployment(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns, ledger: Ledger
) -> None:
    # 3 pods × 4 GPUs, 8 GPUs: two run, the third waits gated (each pod is one Workload)
    await admin.create(DEPLOYMENTS, apps_object("Deployment", "low", 3, "gpu-4", "low"))
    await eventually(
        lambda: len(admitted(emu, "pod-low-")) == 2 and len(workloads(emu, "pod-low-")) == 3,
        "2 of 3 admitted",
    )

    def two_run() -> list[dict[str, Any]] | None:
        pods = pods_of(emu, "low")
        return pods if sorted(phase(p) for p in pods) == ["Pending", "Running", "Running"] else None

    pods = await eventually(two_run, "two of its pods run")
    (waiting,) = [p for p in pods if phase(p) == "Pending"]
    assert gated(waiting) and not waiting["spec"].get("nodeName")
    for wl in admitted(emu, "pod-low-"):
        assert wl["metadata"]["ownerReferences"][0]["kind"] == "Pod"
        (pod,) = [p for p in pods if p["metadata"]["name"] == wl["metadata"]["ownerReferences"][0]["name"]]
        bound_as_planned(emu, wl, [pod])

    # a higher-priority serving pod evicts one of them: its pod is deleted, its quota released, and the
    # ReplicaSet's new pod waits gated with a new Workload
    victims = {w["metadata"]["uid"]: w for w in admitted(emu, "pod-low-")}
    await admin.create(DEPLOYMENTS, apps_object("Deployment", "serve", 1, "gpu-1", "high"))
    await eventually(lambda: all_running(emu, "serve", 1), "the serving pod runs")
    evicted = [
        u for u in victims if not get(emu, "workloads", victims[u]["metadata"]["name"], "queueing.dra.io")
    ]
    assert len(evicted) == 1
    (row,) = await evictions_of(ledger, evicted[0])
    assert row.reason == "Preempted" and await released(ledger, evicted[0])
    await eventually(
        lambda: len(pods_of(emu, "low")) == 3 and len(workloads(emu, "pod-low-")) == 3, "replaced"
    )
    assert len(admitted(emu, "pod-low-")) == 1
    assert [phase(p) for p in pods_of(emu, "low")].count("Running") == 1

    # the serving pod ends: Finished, released; the waiting ones get its GPU back only when 4 fit
    (serve,) = pods_of(emu, "serve")
    (serve_wl,) = workloads(emu, f"pod-{serve['metadata']['name']}-")
    cluster.finish_pods("default", "", selector="app=serve")
    await eventually(
        lambda: is_true(workloads(emu, f"pod-{serve['metadata']['name']}-")[0], "Finished"), "Finished"
    )
    assert await released(ledger, serve_wl["metadata"]["uid"])
    await eventually(lambda: len(admitted(emu, "pod-low-")) == 2, "a waiting pod admitted again")
    await admin.delete(DEPLOYMENTS, "serve", "default")
    uids = [w["metadata"]["uid"] for w in workloads(emu, "pod-low-")]
    await admin.delete(DEPLOYMENTS, "low", "default")
    await eventually(lambda: not workloads(emu, "pod-"), "every pod's Workload goes with its pod")
    for uid in uids:
        assert await released(ledger, uid)
    assert not cluster.errors


async def test_leaderworkerset(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns, ledger: Ledger
) -> None:
    # 2 groups of a leader and a worker × 2 GPUs (4 GPUs a group), one GPU taken: one group runs
    await admin.create(JOBS, prio_job("blocker2", "mid"))
    await eventually(lambda: admitted(emu, "job-blocker2"), "the blocker runs")
    await admin.create(LWS, lws_object("vllm", 2, 2, "gpu-2", "low"))
    await eventually(
        lambda: (
            len(workloads(emu, "leaderworkerset-vllm-")) == 2
            and len(admitted(emu, "leaderworkerset-vllm-")) == 1
            and [phase(p) for p in pods_of(emu, "vllm")].count("Running") == 2
        ),
        "one group admitted and running",
    )
    (running_wl,) = admitted(emu, "leaderworkerset-vllm-")
    assert [(ps["name"], ps["count"]) for ps in running_wl["spec"]["podSets"]] == [
        ("leader", 1),
        ("worker", 1),
    ]
    group_of = {w["metadata"]["name"]: w for w in workloads(emu, "leaderworkerset-vllm-")}
    by_group: dict[str, list[dict[str, Any]]] = {}
    for p in pods_of(emu, "vllm"):
        by_group.setdefault(p["metadata"]["labels"]["queueing.dra.io/pod-group"], []).append(p)
    assert set(by_group) == set(group_of) and all(len(v) == 2 for v in by_group.values())
    waiting = next(k for k in by_group if k != running_wl["metadata"]["name"])
    assert all(
        gated(p) and phase(p) == "Pending" for p in by_group[waiting]
    )  # neither pod of the gang starts
    bound_as_planned(emu, running_wl, by_group[running_wl["metadata"]["name"]])

    cluster.finish_pods("default", "blocker2")
    pods = await eventually(lambda: all_running(emu, "vllm", 4), "both groups run")
    for wl in admitted(emu, "leaderworkerset-vllm-"):
        bound_as_planned(
            emu,
            wl,
            [
                p
                for p in pods
                if p["metadata"]["labels"]["queueing.dra.io/pod-group"] == wl["metadata"]["name"]
            ],
        )

    # the serving pod evicts one group, whole: both its pods are deleted and come back gated
    before = {w["metadata"]["uid"] for w in admitted(emu, "leaderworkerset-vllm-")}
    await admin.create(DEPLOYMENTS, apps_object("Deployment", "serve", 1, "gpu-1", "high"))
    await eventually(lambda: all_running(emu, "serve", 1), "the serving pod runs")
    await eventually(
        lambda: (
            [phase(p) for p in pods_of(emu, "vllm")].count("Running") == 2 and len(pods_of(emu, "vllm")) == 4
        ),
        "one group evicted",
    )
    gone = before - {w["metadata"]["uid"] for w in admitted(emu, "leaderworkerset-vllm-")}
    assert len(gone) == 1
    (row,) = await evictions_of(ledger, next(iter(gone)))
    assert row.reason == "Preempted" and await released(ledger, next(iter(gone)))
    serve_wl = admitted(emu, "pod-serve-")[0]
    await remove_deployment(emu, admin, ledger, serve_wl)
    await eventually(lambda: all_running(emu, "vllm", 4), "the group runs again")

    # scaled down to 1 group: the second group's pods go, it is Finished, its quota released; then all
    uids = {w["metadata"]["name"]: w["metadata"]["uid"] for w in workloads(emu, "leaderworkerset-vllm-")}
    assert all(
        w["metadata"]["ownerReferences"][0]["kind"] == "LeaderWorkerSet"
        for w in workloads(emu, "leaderworkerset-vllm-")
    )
    await admin.patch(LWS, "vllm", {"spec": {"replicas": 1}}, "default")
    await eventually(lambda: len(pods_of(emu, "vllm")) == 2, "group 1 deleted")
    await eventually(
        lambda: [is_true(w, "Finished") for w in workloads(emu, "leaderworkerset-vllm-")] == [False, True],
        "group 1 Finished",
    )
    assert await released(ledger, workloads(emu, "leaderworkerset-vllm-")[1]["metadata"]["uid"])
    await admin.delete(LWS, "vllm", "default")
    await eventually(lambda: not workloads(emu, "leaderworkerset-vllm-"), "all gone")
    for uid in uids.values():
        assert await released(ledger, uid)
    assert not cluster.errors


async def test_every_pod_gated_permission_was_used(emu: Emulator, harness: Harness) -> None:
    """The LeaderWorkerSet role of rbac-integrations.yaml was used (and nothing was denied)."""
    authorizer = emu.authorizer
    assert isinstance(authorizer, RbacAuthorizer)
    granted = {g for g in authorizer.granted(CONTROLLER_USER) if g.resource == "leaderworkersets"}
    assert {g.verb for g in granted} == {"list", "watch"}
    used = {(g.role, g.rule, g.api_group, g.resource, g.verb) for g in authorizer.used}
    assert all((g.role, g.rule, g.api_group, g.resource, g.verb) in used for g in granted)
    assert not authorizer.denied
