"""Isolation by object (issue 18): one bad object never stops admission for anyone else.

Each case, through the emulator and the controller: a good Job is admitted; the bad object (and a Job
that needs it) arrives — loaded as it is, since a real API server accepts these too (or an older CRD
let them in); another good Job is admitted while it is there; the bad object (or the Job needing it)
gets a condition or reason naming the field; the bad object is deleted; a third good Job is admitted.
Throughout, no sync of the controller fails (``stats.errors`` stays 0: the error stayed with its
object instead of failing the cycle for everyone) and its loop keeps running."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from queueing.config import Config
from queueing.controller.controller import Controller
from queueing.controller.isolation import isolate_cycle
from queueing.dra.verify import VerifyError
from queueing.kube.client import (
    CLUSTER_QUEUES,
    COHORTS,
    DEVICE_CLASSES,
    JOBS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_SLICES,
    KubeClient,
    Resource,
)
from queueing.ledger.repository import Ledger
from queueing.testing import Emulator
from queueing.testing.cluster import StandIns
from tests.controller.conftest import GPU_CLASS, Harness, eventually, job
from tests.controller.test_admission import cond, items, running, workload
from tests.controller.test_postgres import pg_ledger  # noqa: F401

LIST_300 = "[" + ",".join(str(i) for i in range(300)) + "]"
# three nested comprehensions over 300 elements: CEL's iteration budget is exceeded at evaluation
EXPENSIVE_CEL = f"{LIST_300}.all(x, {LIST_300}.all(y, {LIST_300}.all(z, x + y + z >= 0)))"
HUGE = "1e100"  # passes the CRD's quantity pattern; NUMERIC(38, 9) in the ledger cannot hold it
QUOTA_FIELD = "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"


def quota(gpus: Any) -> list[dict[str, Any]]:
    return [
        {
            "coveredResources": [GPU_CLASS],
            "flavors": [{"name": "default", "resources": [{"name": GPU_CLASS, "nominalQuota": gpus}]}],
        }
    ]


def cluster_queue(name: str, gpus: Any = 4, cohort: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"namespaceSelector": {}, "resourceGroups": quota(gpus)}
    if cohort:
        spec["cohortName"] = cohort
    return {
        "apiVersion": "queueing.dra.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": spec,
    }


def local_queue(name: str, cq: str) -> dict[str, Any]:
    return {
        "apiVersion": "queueing.dra.io/v1beta1",
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"clusterQueue": cq},
    }


def device_class(name: str, cel: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": cel}}]},
    }


def claim_template(name: str, device_class_name: str, cel: str | None = None) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class_name, "count": 1}
    if cel is not None:
        exactly["selectors"] = [{"cel": {"expression": cel}}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
    }


HUGE_DRIVER = "huge.example.com"
HUGE_SLICE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceSlice",
    "metadata": {"name": "node-a-huge"},
    "spec": {
        "driver": HUGE_DRIVER,
        "nodeName": "node-a",
        "pool": {"name": "node-a-huge", "generation": 1, "resourceSliceCount": 1},
        "devices": [{"name": "dev-0", "capacity": {"memory": {"value": HUGE}}}],
    },
}


def cover_in_team(emu: Emulator, resource: str) -> None:
    """ClusterQueue ``team`` has quota for ``resource`` too (so that a Job needing it reaches placement)."""
    rt = emu.store.resource("clusterqueues", "queueing.dra.io")
    cq = emu.store.get(rt, None, "team")
    group = cq["spec"]["resourceGroups"][0]
    group["coveredResources"].append(resource)
    group["flavors"][0]["resources"].append({"name": resource, "nominalQuota": 8})
    emu.store.update(rt, None, "team", cq)


def cq_inactive(emu: Emulator, name: str) -> str:
    obj = emu.store.get(emu.store.resource("clusterqueues", "queueing.dra.io"), None, name)
    c = cond(obj, "Active")
    return f"{c['reason']}: {c['message']}" if c is not None and c["status"] == "False" else ""


def pending_message(emu: Emulator, job_name: str) -> str:
    c = cond(workload(emu, f"job-{job_name}"), "QuotaReserved")
    return c.get("message") or "" if c is not None and c["status"] == "False" else ""


# case -> (objects, covered resource or None, the bad Job, [(what to read, words it must contain)], deletions)
Case = tuple[
    list[dict[str, Any]],
    str | None,
    dict[str, Any],
    list[tuple[str, tuple[str, ...]]],
    list[tuple[Resource, str, str | None]],
]
CASES: dict[str, Case] = {
    "ClusterQueue nominalQuota 1e100": (
        [cluster_queue("huge-cq", HUGE), local_queue("huge-lq", "huge-cq")],
        None,
        job("bad-cq", queue="huge-lq"),
        [
            ("cq:huge-cq", ("ClusterQueue huge-cq", "nominalQuota", "1e100", "too large")),
            ("job:bad-cq", ("ClusterQueue huge-cq is inactive", "nominalQuota", "1e100")),
        ],
        [(CLUSTER_QUEUES, "huge-cq", None)],
    ),
    "Cohort nominalQuota 1e100": (
        [
            {
                "apiVersion": "queueing.dra.io/v1beta1",
                "kind": "Cohort",
                "metadata": {"name": "huge-cohort"},
                "spec": {"resourceGroups": quota(HUGE)},
            },
            cluster_queue("member-cq", 4, cohort="huge-cohort"),
            local_queue("member-lq", "member-cq"),
        ],
        None,
        job("bad-cohort", queue="member-lq"),
        [("warn:Cohort:huge-cohort", ("Cohort huge-cohort", "nominalQuota", "1e100", "too large"))],
        [(COHORTS, "huge-cohort", None)],
    ),
    "ClusterQueue nominalQuota -5 (the model rejects it)": (
        [cluster_queue("negative-cq", -5), local_queue("negative-lq", "negative-cq")],
        None,
        job("bad-negative", queue="negative-lq"),
        [
            ("cq:negative-cq", ("ClusterQueue negative-cq", "nominalQuota", "non-negative")),
            ("job:bad-negative", ("ClusterQueue negative-cq is inactive: InvalidSpec", "nominalQuota")),
        ],
        [(CLUSTER_QUEUES, "negative-cq", None)],
    ),
    "DeviceClass with a CEL selector over budget": (
        [device_class("costly-class", EXPENSIVE_CEL), claim_template("uses-costly-class", "costly-class")],
        "costly-class",
        job("bad-class", template="uses-costly-class"),
        [("job:bad-class", ("DeviceClass costly-class", "spec.selectors[0].cel.expression", "budget"))],
        [(DEVICE_CLASSES, "costly-class", None)],
    ),
    "ResourceSlice device with memory 1e100": (
        [
            device_class(HUGE_DRIVER, f'device.driver == "{HUGE_DRIVER}"'),
            claim_template("uses-huge", HUGE_DRIVER),
            HUGE_SLICE,
        ],
        HUGE_DRIVER,
        job("bad-slice", template="uses-huge"),
        [
            (
                "job:bad-slice",
                ("ledger:", f"device {HUGE_DRIVER}/node-a-huge/dev-0 memory", "1e100", "too large"),
            )
        ],
        [(RESOURCE_SLICES, "node-a-huge", None)],
    ),
    "ResourceClaimTemplate with a CEL selector over budget": (
        [claim_template("costly-template", GPU_CLASS, EXPENSIVE_CEL)],
        None,
        job("bad-template", template="costly-template"),
        [
            (
                "job:bad-template",
                ("ResourceClaimTemplate default/costly-template", "selectors[0].cel.expression", "budget"),
            )
        ],
        [(RESOURCE_CLAIM_TEMPLATES, "costly-template", "default")],
    ),
}


def warnings_on(emu: Emulator, kind: str, name: str) -> str:
    return "\n".join(
        e.get("message") or ""
        for e in items(emu, "events")
        if e["type"] == "Warning"
        and e["involvedObject"]["kind"] == kind
        and e["involvedObject"]["name"] == name
    )


def read(emu: Emulator, what: str) -> str:
    """``cq:NAME``: ClusterQueue NAME's Active=False reason and message, and the Warning Events on it (an
    API server refuses even a status write to an object whose spec breaks a CRD rule on an atomic list
    item: then the Event is what says it); ``job:NAME``: the QuotaReserved message of Job NAME's
    Workload; ``warn:KIND:NAME``: the Warning Events on that object."""
    kind, name = what.split(":", 1)
    if kind == "cq":
        return "\n".join(m for m in (cq_inactive(emu, name), warnings_on(emu, "ClusterQueue", name)) if m)
    if kind == "warn":
        return warnings_on(emu, *name.split(":", 1))
    return pending_message(emu, name)


async def admit_and_finish(emu: Emulator, admin: KubeClient, cluster: StandIns, name: str) -> None:
    """A good Job is admitted and runs (then finishes, giving its quota back)."""
    await admin.create(JOBS, job(name))
    await eventually(lambda: running(emu, name, 1), f"the good Job {name} runs", timeout=30)
    cluster.finish_pods("default", name)


def alive(c: Controller) -> None:
    assert c._task is not None and not c._task.done()
    assert c.stats.errors == 0, "a sync failed: the bad object's error reached everyone"


async def test_bad_objects_stay_with_themselves(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns
) -> None:
    """Every case of ``CASES`` at once (each with its own bad Job), while good Jobs keep arriving."""
    c = await harness.start()
    await admit_and_finish(emu, admin, cluster, "good-1")

    for objects, covered, bad_job, _, _ in CASES.values():
        if covered:
            cover_in_team(emu, covered)
        # as it is: a real API server with our CRDs refuses most of these at creation
        # (tests/kube/test_emulator_validation.py); objects stored before a rule existed get in anyway
        emu.store.api_validation = False
        emu.load_objects(objects)
        emu.store.api_validation = True
        await admin.create(JOBS, bad_job)
    await admit_and_finish(emu, admin, cluster, "good-2")
    for case, (_, _, bad_job, expected, _) in CASES.items():
        for what, words in expected:
            msg = await eventually(
                lambda what=what, words=words: (m := read(emu, what)) and all(w in m for w in words) and m,
                f"{what} names {words} ({case}); got {read(emu, what)!r}",
                timeout=30,
            )
            print(f"\n{case}: {what}: {msg}")
            assert "Traceback" not in msg and "[SQL" not in msg
        if bad_job["metadata"]["name"] != "bad-cohort":  # a rejected Cohort may be as if absent
            assert not running(emu, bad_job["metadata"]["name"], 1), case
    alive(c)

    for *_, deletions in CASES.values():
        for res, name, ns in deletions:
            await admin.delete(res, name, ns)
    await admit_and_finish(emu, admin, cluster, "good-3")
    alive(c)
    assert not cluster.errors


async def test_a_job_with_a_large_annotation_does_not_break_the_jobs_watch(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns
) -> None:
    """5 MB of annotation (more than aiohttp's default line limit of the watch, 4 MiB here) on one Job:
    the Jobs informer keeps its watch (no error, no re-list) and the other Jobs are admitted."""
    c = await harness.start()
    big = job("big")
    big["metadata"]["annotations"] = {"example.com/blob": "x" * (5 * 2**20)}
    await admin.create(JOBS, big)
    await eventually(lambda: c.jobs.get("big", "default") is not None, "the informer holds the big Job")
    for name in ("after-1", "after-2"):
        await admit_and_finish(emu, admin, cluster, name)
    assert c.jobs.stats.errors == 0 and c.jobs.stats.lists == 1, c.jobs.stats
    await eventually(lambda: running(emu, "big", 1), "the big Job itself is admitted too", timeout=30)
    alive(c)


def test_isolate_cycle_leaves_out_exactly_the_workloads_that_fail() -> None:
    """The bisection of ``isolate_cycle``: with 2 bad workloads among 40, only those 2 are left out, each
    with the error; an error that is no workload's (it fails with none pending) is raised; verify
    mode's ``VerifyError`` always is."""
    pending = [f"wl-{i}" for i in range(40)]
    bad = {"wl-7", "wl-31"}

    def cycle(items: Sequence[str] | None) -> list[str]:
        for w in pending if items is None else items:
            if w in bad:
                raise RuntimeError(f"INTERNAL: Iteration budget exceeded ({w})")
        return list(pending if items is None else items)

    result, left_out = isolate_cycle(cycle, lambda: pending, str)
    assert result == [w for w in pending if w not in bad]
    assert sorted(left_out) == sorted(bad)
    assert "RuntimeError: INTERNAL: Iteration budget exceeded (wl-7)" in left_out["wl-7"]

    def broken(items: Sequence[str] | None) -> list[str]:
        raise ValueError("not about any workload")

    with pytest.raises(ValueError):
        isolate_cycle(broken, lambda: pending, str)

    def differs(items: Sequence[str] | None) -> list[str]:
        raise VerifyError("fast path differs", "a", "b")

    with pytest.raises(VerifyError):
        isolate_cycle(differs, lambda: pending, str)


async def test_a_refused_cluster_queue_after_a_restart_and_once_fixed(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns
) -> None:
    """A refused ClusterQueue's Warning Event, as client-go's recorder does it: the restarted
    controller's create of the same Event is refused (409 AlreadyExists) and becomes an update of its
    count — one Event object, not a dropped one. Then the refusal is lifted by the next write the ledger
    accepts: the queue is active again and its waiting Job admitted."""

    def recorded() -> list[dict[str, Any]]:
        return [
            e
            for e in items(emu, "events")
            if e["type"] == "Warning" and e["involvedObject"]["name"] == "huge-cq"
        ]

    emu.store.api_validation = False  # the CRD's rule refuses it at creation; an older object has it
    emu.load_objects([cluster_queue("huge-cq", HUGE), local_queue("huge-lq", "huge-cq")])
    emu.store.api_validation = True
    await harness.start()
    await admin.create(JOBS, job("waits", queue="huge-lq"))
    await eventually(lambda: [e["count"] for e in recorded()] == [1], "the Warning Event on huge-cq")
    await harness.stop()
    c = await harness.start()
    await eventually(lambda: [e["count"] for e in recorded()] == [2], "the same Event, its count 2")
    assert c.events.updated == 1 and c.events.failed == 0
    await eventually(lambda: "1e100" in read(emu, "cq:huge-cq"), "huge-cq is inactive, and says why")

    await admin.patch(CLUSTER_QUEUES, "huge-cq", {"spec": {"resourceGroups": quota(4)}})
    await eventually(lambda: running(emu, "waits", 1), "admitted once the quota fits", timeout=30)
    await eventually(lambda: not cq_inactive(emu, "huge-cq"), "huge-cq is active again")
    alive(c)


LONG_RESOURCE = ".".join(["r" * 62] * 4) + "/gpu-memory"  # a valid qualified name of 262 characters


@pytest.mark.postgres
async def test_a_cluster_queue_the_database_refuses_is_isolated_on_postgresql(
    emu: Emulator,
    admin: KubeClient,
    cluster: StandIns,
    pg_ledger: Ledger,  # noqa: F811
) -> None:
    """What no check before the write knows: PostgreSQL refuses the row (a resource name longer than the
    ledger's 253-character column: SQLSTATE 22001). The refusal stays with that ClusterQueue."""
    cq = cluster_queue("long-cq")
    cq["spec"]["resourceGroups"][0]["coveredResources"].append(LONG_RESOURCE)
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"].append(
        {"name": LONG_RESOURCE, "nominalQuota": 1}
    )
    emu.load_objects([cq, local_queue("long-lq", "long-cq")])
    harness = Harness(emu, pg_ledger, Config())
    try:
        c = await harness.start()
        await admin.create(JOBS, job("bad", queue="long-lq"))
        await admit_and_finish(emu, admin, cluster, "good")
        msg = await eventually(
            lambda: (m := cq_inactive(emu, "long-cq")) and "LedgerRejected" in m and m, "long-cq is inactive"
        )
        print(f"\n{msg}")
        assert "ClusterQueue long-cq: the ledger refused it: value too long" in msg and "[SQL" not in msg
        await eventually(
            lambda: "ClusterQueue long-cq is inactive" in pending_message(emu, "bad"), "bad says why it waits"
        )
        alive(c)
    finally:
        await harness.stop()


def test_a_refused_cohort_makes_its_whole_subtree_inactive() -> None:
    """``Quarantine.inactive``: every ClusterQueue under a refused Cohort (through its parents) is inactive
    with the Cohort's message; the others, and a ClusterQueue in a parent cycle, are not."""
    from queueing.api.v1beta1 import ClusterQueue, Cohort
    from queueing.controller.isolation import Quarantine

    def co(name: str, parent: str | None = None) -> Cohort:
        spec = {"parentName": parent} if parent else {}
        return Cohort.model_validate({"metadata": {"name": name}, "spec": spec})

    cqs = [
        ClusterQueue.model_validate(cluster_queue(n, 4, cohort=c))
        for n, c in (("leaf", "child"), ("mid", "root"), ("other", "elsewhere"), ("alone", None))
    ]
    cohorts = [co("root"), co("child", "root"), co("elsewhere"), co("a", "b"), co("b", "a")]
    q = Quarantine(rejected={("Cohort", "root"): "Cohort root: spec...nominalQuota: 1e100 is too large"})
    assert q.inactive(cqs, cohorts) == {
        "leaf": "LedgerRejected: Cohort root: spec...nominalQuota: 1e100 is too large",
        "mid": "LedgerRejected: Cohort root: spec...nominalQuota: 1e100 is too large",
    }
    q.rejected[("ClusterQueue", "alone")] = "ClusterQueue alone: x"
    assert q.inactive(cqs, cohorts)["alone"] == "LedgerRejected: ClusterQueue alone: x"
    looped = [ClusterQueue.model_validate(cluster_queue("in-loop", 4, cohort="a"))]
    assert q.inactive(looped, cohorts) == {}  # a parent cycle ends the walk
