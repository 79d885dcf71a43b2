"""Issue 19, the life of a workload and of its queues, end to end through the emulator (real HTTP, the
real kubernetes-asyncio client, the stand-in cluster, the controller under its RBAC rules):

* stop and resume like Kueue: ``spec.active: false`` evicts an admitted Workload (``InactiveWorkload``,
  Events, the ledger's eviction record, its Job suspended) and ``true`` requeues it (``Reactivated``);
* a LocalQueue with ``stopPolicy`` says ``Active=False Stopped``;
* an invalid ClusterQueue says so on its status, its LocalQueue and its workloads say it is inactive
  with that reason (not that it does not exist);
* ``spec.podSets`` cannot change while quota is reserved (the CRD's CEL rule); a Workload that no
  longer matches its Job is replaced (evicted first when admitted);
* ClusterQueue, LocalQueue, ResourceFlavor and Cohort carry the resource-in-use finalizer while
  workloads use them: their deletion waits (Terminating, with a condition naming the workloads), and
  nothing new is admitted through them.

One emulator, stand-in cluster and controller for the module (the tests are about behaviour, not
start-up); each test uses its own objects and gives its quota back.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy import select

from queueing.api.v1beta1 import RESOURCE_IN_USE_FINALIZER
from queueing.config import Config
from queueing.controller.controller import Controller
from queueing.kube.client import (
    CLUSTER_QUEUES,
    COHORTS,
    JOBS,
    LOCAL_QUEUES,
    RESOURCE_FLAVORS,
    WORKLOADS,
    ApiException,
    KubeClient,
    api_client_for_url,
)
from queueing.ledger import models as m
from queueing.ledger.migrate import upgrade_async
from queueing.ledger.repository import Ledger
from queueing.testing import Emulator
from queueing.testing.cluster import StandIns
from tests.controller.conftest import (
    GPU_CLASS,
    Harness,
    emulated_cluster,
    eventually,
    job,
)
from tests.controller.test_admission import cond, get, items, running, workload
from tests.kubectl.conftest import Kubectl

pytestmark = pytest.mark.asyncio(loop_scope="module")

GROUP = "queueing.dra.io"


@dataclass
class Env:
    emu: Emulator
    admin: KubeClient
    cluster: StandIns
    controller: Controller
    ledger: Ledger
    kubectl: Kubectl  # real kubectl, with the kubectl-queueing plugin on PATH
    harness: Harness


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    tmp: Path = tmp_path_factory.mktemp("lifecycle")
    async with emulated_cluster(__name__) as emu:
        ledger = Ledger.from_url(f"sqlite+aiosqlite:///{tmp / 'ledger.db'}")
        await upgrade_async(ledger.engine)
        api = api_client_for_url(emu.url, token="admin-token")
        harness = Harness(emu, ledger, Config())
        try:
            async with StandIns(emu) as cluster:
                ctl = await harness.start()
                yield Env(emu, KubeClient(api), cluster, ctl, ledger, Kubectl(emu, tmp), harness)
                await harness.stop()
        finally:
            await api.close()
            await ledger.close()


async def set_count(admin: KubeClient, workload_name: str, count: int) -> None:
    """A hand edit of the Workload's first podSet count (a JSON patch)."""
    patch = [{"op": "replace", "path": "/spec/podSets/0/count", "value": count}]
    await admin.patch(WORKLOADS, workload_name, patch, "default", patch_type="json")


def is_cond(obj: dict[str, Any] | None, type_: str, status: str, reason: str | None = None) -> bool:
    c = cond(obj, type_)
    return c is not None and c["status"] == status and (reason is None or c.get("reason") == reason)


def queue_object(emu: Emulator, plural: str, name: str, ns: str | None = None) -> dict[str, Any] | None:
    return get(emu, plural, name, GROUP, ns)


def events_for(emu: Emulator, kind: str, name: str) -> list[dict[str, Any]]:
    return [
        e
        for e in items(emu, "events")
        if e["involvedObject"]["kind"] == kind and e["involvedObject"]["name"] == name
    ]


async def evictions(ledger: Ledger, uid: str) -> list[Any]:
    async with ledger.engine.connect() as c:
        rows = (await c.execute(select(m.Eviction))).all()
    return [r for r in rows if r.workload_uid == uid]


def job_suspended(emu: Emulator, name: str) -> bool:
    j = get(emu, "jobs", name, "batch", "default")
    return bool(j is not None and j["spec"].get("suspend"))


def cluster_queue(name: str, gpus: Any, flavor: str = "default", cohort: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": [GPU_CLASS],
                "flavors": [{"name": flavor, "resources": [{"name": GPU_CLASS, "nominalQuota": gpus}]}],
            }
        ],
    }
    if cohort:
        spec["cohortName"] = cohort
    return {
        "apiVersion": f"{GROUP}/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": spec,
    }


def local_queue(name: str, cq: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1beta1",
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"clusterQueue": cq, **spec},
    }


async def test_spec_active_false_evicts_and_true_requeues(env: Env) -> None:
    emu, admin = env.emu, env.admin
    await admin.create(JOBS, job("stop-me"), "default")
    await eventually(lambda: running(emu, "stop-me", 1), "the Job runs")
    wl = workload(emu, "job-stop-me")
    assert wl is not None
    uid = wl["metadata"]["uid"]

    await env.kubectl.run("queueing", "stop", "workload", "job-stop-me")  # spec.active: false
    await eventually(
        lambda: (
            is_cond(workload(emu, "job-stop-me"), "Evicted", "True", "InactiveWorkload")
            and is_cond(workload(emu, "job-stop-me"), "QuotaReserved", "False")
        ),
        "evicted as InactiveWorkload, its quota released",
    )
    wl = workload(emu, "job-stop-me")
    assert is_cond(wl, "Requeued", "False", "InactiveWorkload")  # not requeued while inactive
    assert wl is not None and wl["status"].get("admission") is None
    assert job_suspended(emu, "stop-me")
    await eventually(lambda: not running(emu, "stop-me", 1), "its pod is gone")
    (row,) = await evictions(env.ledger, uid)
    assert row.reason == "InactiveWorkload"
    reasons = {e["reason"] for e in events_for(emu, "Workload", "job-stop-me")}
    assert {"Evicted", "Deactivated"} <= reasons
    assert any(e["reason"] == "Suspended" for e in events_for(emu, "Job", "stop-me"))

    await env.kubectl.run("queueing", "resume", "workload", "job-stop-me")  # spec.active: true
    await eventually(lambda: running(emu, "stop-me", 1), "it runs again once reactivated")
    wl = workload(emu, "job-stop-me")
    assert is_cond(wl, "Requeued", "True", "Reactivated")
    assert is_cond(wl, "QuotaReserved", "True") and wl is not None and wl["metadata"]["uid"] == uid
    assert any(e["reason"] == "Reactivated" for e in events_for(emu, "Workload", "job-stop-me"))
    env.cluster.finish_pods("default", "stop-me")
    await eventually(lambda: is_cond(workload(emu, "job-stop-me"), "Finished", "True"), "finished")


async def test_local_queue_stop_policy_says_stopped(env: Env) -> None:
    emu, admin = env.emu, env.admin
    await admin.create(LOCAL_QUEUES, local_queue("held", "team", stopPolicy="Hold"), "default")
    await eventually(
        lambda: is_cond(queue_object(emu, "localqueues", "held", "default"), "Active", "False", "Stopped"),
        "the stopped LocalQueue says Active=False Stopped",
    )
    await admin.patch(LOCAL_QUEUES, "held", {"spec": {"stopPolicy": "None"}}, "default")
    await eventually(
        lambda: is_cond(queue_object(emu, "localqueues", "held", "default"), "Active", "True"),
        "Active again once resumed",
    )
    await admin.delete(LOCAL_QUEUES, "held", "default")


async def test_invalid_cluster_queue_status_and_its_workloads(env: Env) -> None:
    emu, admin = env.emu, env.admin
    # the API accepts it (no CRD rule covers it), the model refuses it: one resource in two groups
    broken = cluster_queue("broken", 1)
    broken["spec"]["resourceGroups"].append(
        {
            "coveredResources": [GPU_CLASS],
            "flavors": [{"name": "other", "resources": [{"name": GPU_CLASS, "nominalQuota": 1}]}],
        }
    )
    await admin.create(CLUSTER_QUEUES, broken)
    await admin.create(LOCAL_QUEUES, local_queue("broken-lq", "broken"), "default")
    await eventually(
        lambda: is_cond(queue_object(emu, "clusterqueues", "broken"), "Active", "False", "InvalidSpec"),
        "the invalid ClusterQueue says Active=False InvalidSpec",
    )
    c = cond(queue_object(emu, "clusterqueues", "broken"), "Active")
    assert c is not None and "resourceGroups[1].coveredResources" in c["message"]
    await eventually(
        lambda: is_cond(
            queue_object(emu, "localqueues", "broken-lq", "default"),
            "Active",
            "False",
            "ClusterQueueIsInactive",
        ),
        "its LocalQueue says the ClusterQueue is inactive",
    )
    lc = cond(queue_object(emu, "localqueues", "broken-lq", "default"), "Active")
    assert lc is not None and "InvalidSpec" in lc["message"] and "coveredResources" in lc["message"]
    await admin.create(JOBS, job("on-broken", queue="broken-lq"), "default")

    def pending_message() -> str:
        qc = cond(workload(emu, "job-on-broken"), "QuotaReserved")
        return qc["message"] if qc is not None and qc["status"] == "False" else ""

    msg = await eventually(pending_message, "the Job's Workload is told why")
    assert "ClusterQueue broken is inactive: InvalidSpec" in msg and "coveredResources" in msg
    assert "doesn't exist" not in msg
    await admin.delete(JOBS, "on-broken", "default", propagation_policy="Background")
    await admin.delete(LOCAL_QUEUES, "broken-lq", "default")
    await admin.delete(CLUSTER_QUEUES, "broken")


async def test_pod_sets_immutable_while_admitted_and_replaced_when_the_job_changes(env: Env) -> None:
    emu, admin = env.emu, env.admin
    body = job("grow")
    body["spec"]["completions"] = 4  # parallelism 1 of 4 completions: one pod at a time
    await admin.create(JOBS, body, "default")
    await eventually(lambda: running(emu, "grow", 1), "the Job runs")
    wl = workload(emu, "job-grow")
    assert wl is not None
    old_uid = wl["metadata"]["uid"]

    # the CRD's CEL transition rule: podSets cannot change while QuotaReserved is True
    with pytest.raises(ApiException) as err:
        await set_count(admin, "job-grow", 3)
    assert err.value.status == 422
    assert "spec.podSets: field is immutable while QuotaReserved is True" in (err.value.body or "")
    rc, _, err_text = await env.kubectl.run(
        "patch", "workload", "job-grow", "--type", "json", "-p", '[{"op":"replace","path":"/spec/podSets/0/count","value":2}]',
        check=False,
    )  # fmt: skip
    assert rc != 0 and "spec.podSets: field is immutable while QuotaReserved is True" in err_text
    wl = workload(emu, "job-grow")
    assert wl is not None and wl["spec"]["podSets"][0]["count"] == 1

    # the Job changes: its Workload no longer matches, is evicted (ledger record) and replaced
    await admin.patch(JOBS, "grow", {"spec": {"parallelism": 2}}, "default")

    def replaced() -> dict[str, Any] | None:
        w = workload(emu, "job-grow")
        return w if w is not None and w["metadata"]["uid"] != old_uid else None

    new = await eventually(replaced, "a new Workload for the changed Job")
    assert new["spec"]["podSets"][0]["count"] == 2
    await eventually(lambda: running(emu, "grow", 2), "the changed Job runs with 2 pods")
    (row,) = await evictions(env.ledger, old_uid)
    assert row.reason == "JobChanged" and "no longer matches Job default/grow" in (row.message or "")
    assert any(e["reason"] == "WorkloadReplaced" for e in events_for(emu, "Job", "grow"))
    await admin.delete(JOBS, "grow", "default", propagation_policy="Background")

    # a pending Workload edited by hand (allowed: no quota reserved) is replaced by one matching its Job
    too_big = job("too-big", parallelism=3, template="gpu-4")
    await admin.create(JOBS, too_big, "default")
    await eventually(
        lambda: is_cond(workload(emu, "job-too-big"), "QuotaReserved", "False"), "pending: it never fits"
    )
    pending = workload(emu, "job-too-big")
    assert pending is not None
    await set_count(admin, "job-too-big", 1)

    def remade() -> dict[str, Any] | None:
        w = workload(emu, "job-too-big")
        return w if w is not None and w["metadata"]["uid"] != pending["metadata"]["uid"] else None

    again = await eventually(remade, "the edited Workload is replaced")
    assert again["spec"]["podSets"][0]["count"] == 3
    await admin.delete(JOBS, "too-big", "default", propagation_policy="Background")


async def test_queue_objects_in_use_wait_for_their_workloads(env: Env) -> None:
    emu, admin = env.emu, env.admin
    await admin.create(
        RESOURCE_FLAVORS,
        {"apiVersion": f"{GROUP}/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": "doomed"}},
    )
    await admin.create(
        COHORTS, {"apiVersion": f"{GROUP}/v1beta1", "kind": "Cohort", "metadata": {"name": "doomed"}}
    )
    await admin.create(CLUSTER_QUEUES, cluster_queue("doomed", 2, flavor="doomed", cohort="doomed"))
    await admin.create(LOCAL_QUEUES, local_queue("doomed", "doomed"), "default")
    await admin.create(LOCAL_QUEUES, local_queue("doomed-2", "doomed"), "default")
    await admin.create(JOBS, job("holder", queue="doomed"), "default")
    await eventually(lambda: running(emu, "holder", 1), "the holder runs")
    objects = [
        ("clusterqueues", CLUSTER_QUEUES, None, "ClusterQueue"),
        ("localqueues", LOCAL_QUEUES, "default", "LocalQueue"),
        ("resourceflavors", RESOURCE_FLAVORS, None, "ResourceFlavor"),
        ("cohorts", COHORTS, None, "Cohort"),
    ]
    for plural, _, ns, _ in objects:
        obj = queue_object(emu, plural, "doomed", ns)
        assert obj is not None and RESOURCE_IN_USE_FINALIZER in obj["metadata"].get("finalizers", []), plural

    for plural, _, ns, _ in objects:  # kubectl would wait for the finalizers: --wait=false
        await env.kubectl.run("delete", plural, "doomed", *(["-n", ns] if ns else []), "--wait=false")
    holder = "default/job-holder"

    def says_held(plural: str, ns: str | None, type_: str, status: str, reason: str) -> bool:
        obj = queue_object(emu, plural, "doomed", ns)
        c = cond(obj, type_)
        return bool(
            obj is not None
            and obj["metadata"].get("deletionTimestamp")
            and c is not None
            and (c["status"], c["reason"]) == (status, reason)
            and holder in c["message"]
        )

    await eventually(
        lambda: says_held("clusterqueues", None, "Active", "False", "Terminating"), "CQ terminating"
    )
    await eventually(
        lambda: says_held("localqueues", "default", "Active", "False", "Terminating"), "LQ terminating"
    )
    await eventually(
        lambda: says_held("resourceflavors", None, "Terminating", "True", "ResourceInUse"),
        "flavor terminating",
    )
    await eventually(
        lambda: says_held("cohorts", None, "Terminating", "True", "ResourceInUse"), "cohort terminating"
    )
    assert running(emu, "holder", 1)  # it runs on: a deletion waits for its workloads
    shown = await env.kubectl.out(
        "get", "clusterqueue", "doomed",
        "-o", "jsonpath={.metadata.deletionTimestamp} {.status.conditions[?(@.type==\"Active\")].message}",
    )  # fmt: skip
    stamp, message = shown.split(" ", 1)
    assert stamp and message.startswith("ClusterQueue doomed is being deleted") and holder in message

    # nothing new is admitted through them while they terminate
    await admin.create(JOBS, job("late", queue="doomed"), "default")
    await admin.create(JOBS, job("late-2", queue="doomed-2"), "default")

    def pending(name: str) -> str:
        c = cond(workload(emu, f"job-{name}"), "QuotaReserved")
        return c["message"] if c is not None and c["status"] == "False" else ""

    assert "LocalQueue default/doomed is terminating" in await eventually(
        lambda: pending("late"), "late waits"
    )
    assert "ClusterQueue doomed is inactive: Terminating" in await eventually(
        lambda: pending("late-2"), "late-2 waits"
    )

    # the holder finishes: the finalizers go and the API server deletes the objects
    env.cluster.finish_pods("default", "holder")
    for plural, _, ns, _ in objects:
        await eventually(
            lambda p=plural, n=ns: queue_object(emu, p, "doomed", n) is None, f"{plural} deleted"
        )
    assert queue_object(emu, "localqueues", "doomed-2", "default") is not None
    for name in ("holder", "late", "late-2"):
        await admin.delete(JOBS, name, "default", propagation_policy="Background")
    await admin.delete(LOCAL_QUEUES, "doomed-2", "default")


async def test_a_restart_puts_the_finalizer_on_queue_objects_already_in_use(env: Env) -> None:
    """Admissions made before the finalizer existed (an older version): the leader adds it at start."""
    emu, admin = env.emu, env.admin
    await admin.create(LOCAL_QUEUES, local_queue("older", "team"), "default")
    await admin.create(JOBS, job("older-job", queue="older"), "default")
    await eventually(lambda: running(emu, "older-job", 1), "the Job runs")
    drop = [{"op": "remove", "path": "/metadata/finalizers"}]
    await admin.patch(LOCAL_QUEUES, "older", drop, "default", patch_type="json")
    lq = queue_object(emu, "localqueues", "older", "default")
    assert lq is not None and not lq["metadata"].get("finalizers")

    await env.harness.stop()
    env.controller = await env.harness.start()
    lq = queue_object(emu, "localqueues", "older", "default")
    assert lq is not None and RESOURCE_IN_USE_FINALIZER in lq["metadata"].get("finalizers", [])
    env.cluster.finish_pods("default", "older-job")
    await eventually(lambda: is_cond(workload(emu, "job-older-job"), "Finished", "True"), "finished")
    await admin.delete(LOCAL_QUEUES, "older", "default")
    await eventually(
        lambda: queue_object(emu, "localqueues", "older", "default") is None, "deleted once unused"
    )
    await admin.delete(JOBS, "older-job", "default", propagation_policy="Background")
