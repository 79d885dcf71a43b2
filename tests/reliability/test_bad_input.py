"""Bad input through the controller on the emulator: each bad object yields a condition or an Event with
a clear message naming what is wrong, and the controller keeps serving everyone else (a good Job
created after the bad ones is admitted and runs)."""

from __future__ import annotations

from typing import Any

import pytest

from queueing.kube.client import JOBS, KubeClient
from queueing.testing import Emulator
from queueing.testing.cluster import StandIns
from tests.controller.conftest import GPU_CLASS, Harness, eventually, job
from tests.controller.test_admission import cond, items, running, workload


def template(name: str, device_class: str, count: int = 1, cel: str | None = None) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class, "count": count}
    if cel is not None:
        exactly["selectors"] = [{"cel": {"expression": cel}}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
    }


def cover(emu: Emulator, device_class: str) -> None:
    """The ClusterQueue has quota for ``device_class`` too (so the quota check is not what fails)."""
    rt = emu.store.resource("clusterqueues", "queueing.dra.io")
    cq = emu.store.get(rt, None, "team")
    group = cq["spec"]["resourceGroups"][0]
    group["coveredResources"].append(device_class)
    group["flavors"][0]["resources"].append({"name": device_class, "nominalQuota": 8})
    emu.store.update(rt, None, "team", cq)


def set_quota(emu: Emulator, nominal: int) -> None:
    rt = emu.store.resource("clusterqueues", "queueing.dra.io")
    cq = emu.store.get(rt, None, "team")
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = nominal
    emu.store.update(rt, None, "team", cq)


def messages(emu: Emulator, name: str) -> str:
    """Everything a user sees about ``job-NAME`` / ``NAME``: QuotaReserved message, Events."""
    out = []
    c = cond(workload(emu, f"job-{name}"), "QuotaReserved")
    if c is not None and c["status"] == "False":
        out.append(c.get("message") or "")
    for e in items(emu, "events"):
        if (e["involvedObject"]["name"] in (name, f"job-{name}") and e["type"] == "Warning") or (
            e["involvedObject"]["name"] == f"job-{name}" and e["reason"] in ("Inadmissible", "Pending")
        ):
            out.append(e.get("message") or "")
    return "\n".join(out)


# case -> (objects to load unvalidated, the bad Job, words the message must contain)
CASES: dict[str, tuple[list[dict[str, Any]], dict[str, Any], tuple[str, ...]]] = {
    "malformed CEL in a DeviceClass": (
        [
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": "broken-class"},
                "spec": {"selectors": [{"cel": {"expression": "device.driver == "}}]},
            },
            template("uses-broken-class", "broken-class"),
        ],
        job("bad", template="uses-broken-class"),
        ("DeviceClass broken-class", "spec.selectors[0].cel.expression", "syntax error"),
    ),
    "malformed CEL in a claim": (
        [template("bad-cel", GPU_CLASS, cel='device.attributes["x"].index >>> 1')],
        job("bad", template="bad-cel"),
        (
            "claim gpu of pod default/job-bad-main-0 (from ResourceClaimTemplate default/bad-cel)",
            "selectors[0].cel.expression",
            "syntax error",
        ),
    ),
    "unknown DeviceClass": (
        [template("unknown-class", "no-such-class")],
        job("bad", template="unknown-class"),
        ("no-such-class",),
    ),
    "more than 32 devices": (
        [template("too-many", GPU_CLASS, count=33)],
        job("bad", template="too-many"),
        ("33 > 8",),  # the quota says it first
    ),
    "unknown DeviceClass with quota for it": (
        [template("unknown-covered", "no-such-class"), {"kind": "_cover", "name": "no-such-class"}],
        job("bad", template="unknown-covered"),
        ("no-such-class",),
    ),
    "more than 32 devices within quota": (
        [template("too-many", GPU_CLASS, count=33), {"kind": "_quota", "value": 64}],
        job("bad", template="too-many"),
        ("33",),
    ),
    "unknown queue name": ([], job("bad", queue="no-such-queue"), ("no-such-queue",)),
    "invalid queue name": (
        [],
        job("bad", queue="Not_A.Valid-Queue_"),
        ("Job default/bad", "is not a valid name"),
    ),
    "missing claim template": ([], job("bad", template="never-created"), ("never-created",)),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_bad_input_is_reported_and_others_are_served(
    case: str, emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns
) -> None:
    objects, bad_job, words = CASES[case]
    # stored as they are (an API server refuses malformed CEL at creation; older objects may have it)
    emu.store.api_validation = False
    emu.load_objects([o for o in objects if not o["kind"].startswith("_")])
    emu.store.api_validation = True
    for o in objects:
        if o["kind"] in ("DeviceClass", "_cover"):
            cover(emu, o.get("name") or o["metadata"]["name"])
        elif o["kind"] == "_quota":
            set_quota(emu, o["value"])
    await harness.start()
    await admin.create(JOBS, bad_job)
    await admin.create(JOBS, job("good"))
    await eventually(lambda: running(emu, "good", 1), f"the good Job runs ({case})")
    msg = await eventually(
        lambda: (m := messages(emu, "bad")) and all(w.lower() in m.lower() for w in words) and m,
        f"a message naming {words} ({case}); got {messages(emu, 'bad')!r}",
    )
    print(f"\n{case}: {msg}")
    assert "Traceback" not in msg
    assert not running(emu, "bad", 1)
    assert harness.controller is not None and harness.controller._task is not None
    assert not harness.controller._task.done()
    assert not cluster.errors


# ------------------------------------------------------------------ queue configuration
def bad_cq(
    name: str = "bad-cq",
    *,
    cohort: str | None = None,
    covered: tuple[str, ...] = (GPU_CLASS,),
    flavors: list[dict[str, Any]] | None = None,
    **quota: Any,
) -> dict[str, Any]:
    """A ClusterQueue with a gpu quota of 4 in flavor ``default`` (``quota`` adds e.g. lendingLimit)."""
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": list(covered),
                "flavors": flavors
                or [{"name": "default", "resources": [{"name": GPU_CLASS, "nominalQuota": 4, **quota}]}],
            }
        ],
    }
    if cohort is not None:
        spec["cohortName"] = cohort
    return {
        "apiVersion": "queueing.dra.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": spec,
    }


def cohort(name: str, parent: str) -> dict[str, Any]:
    return {
        "apiVersion": "queueing.dra.io/v1beta1",
        "kind": "Cohort",
        "metadata": {"name": name},
        "spec": {"parentName": parent},
    }


BAD_LQ = {
    "apiVersion": "queueing.dra.io/v1beta1",
    "kind": "LocalQueue",
    "metadata": {"name": "bad-lq", "namespace": "default"},
    "spec": {"clusterQueue": "bad-cq"},
}

FLAVOR_TWICE = bad_cq()
FLAVOR_TWICE["spec"]["resourceGroups"].append(
    {
        "coveredResources": ["cpu"],
        "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": 8}]}],
    }
)
# (a flavor twice in one group's list is refused by the API server itself: a duplicate list-map key)
LENDING_ROOT_COHORT = {
    "apiVersion": "queueing.dra.io/v1beta1",
    "kind": "Cohort",
    "metadata": {"name": "bad-cohort"},
    "spec": {
        "resourceGroups": [
            {
                "coveredResources": [GPU_CLASS],
                "flavors": [
                    {
                        "name": "default",
                        "resources": [{"name": GPU_CLASS, "nominalQuota": 4, "lendingLimit": 2}],
                    }
                ],
            }
        ]
    },
}
TAINTED_FLAVOR = {
    "apiVersion": "queueing.dra.io/v1beta1",
    "kind": "ResourceFlavor",
    "metadata": {"name": "bad-flavor"},
    "spec": {"nodeTaints": [{"key": "gpu", "value": "yes", "effect": "Sometimes"}]},
}
BAD_FLAVOR_CQ = bad_cq(
    flavors=[{"name": "bad-flavor", "resources": [{"name": GPU_CLASS, "nominalQuota": 4}]}]
)

CQ = ("ClusterQueue", "bad-cq")
# case -> (queue objects, {(kind, name): words a message on that object must contain})
QUEUE_CASES: dict[str, tuple[list[dict[str, Any]], dict[tuple[str, str], tuple[str, ...]]]] = {
    "borrowingLimit without a cohort": (
        [bad_cq(borrowingLimit=2)],
        {CQ: ("resources[0].borrowingLimit", "must not be set when cohortName is empty")},
    ),
    "lendingLimit without a cohort": (
        [bad_cq(lendingLimit=2)],
        {CQ: ("resources[0].lendingLimit", "must not be set when cohortName is empty")},
    ),
    "lendingLimit above nominalQuota": (
        [bad_cq(cohort="pool", lendingLimit=6)],
        {CQ: ("lendingLimit", "must be less than or equal to nominalQuota (6 > 4)")},
    ),
    "negative nominalQuota": (
        [bad_cq(flavors=[{"name": "default", "resources": [{"name": GPU_CLASS, "nominalQuota": -1}]}])],
        {CQ: ("nominalQuota", "non-negative")},
    ),
    "a flavor in two resource groups": (
        [FLAVOR_TWICE],
        {CQ: ("resourceGroups[1].flavors[0].name", "flavor 'default' is already used in resourceGroups[0]")},
    ),
    "coveredResources mismatch": (
        [bad_cq(covered=(GPU_CLASS, "cpu"))],
        {CQ: ("flavors[0].resources", "must list exactly the coveredResources")},
    ),
    "lendingLimit in a root Cohort": (
        [
            LENDING_ROOT_COHORT,
            bad_cq(
                cohort="bad-cohort",
                flavors=[{"name": "nowhere", "resources": [{"name": GPU_CLASS, "nominalQuota": 4}]}],
            ),
        ],
        {("Cohort", "bad-cohort"): ("Cohort bad-cohort", "lendingLimit", "parentName")},
    ),
    "invalid ResourceFlavor": (
        [TAINTED_FLAVOR, BAD_FLAVOR_CQ],
        {("ResourceFlavor", "bad-flavor"): ("nodeTaints[0].effect",), CQ: ("bad-flavor",)},
    ),
    "cohort cycle": (
        [cohort("ring-a", "ring-b"), cohort("ring-b", "ring-a"), bad_cq(cohort="ring-a")],
        {
            CQ: ("cycle", "ring-a -> ring-b -> ring-a"),
            ("Cohort", "ring-a"): ("parent cycle", "ring-a -> ring-b -> ring-a"),
            ("Cohort", "ring-b"): ("parent cycle", "ring-b -> ring-a -> ring-b"),
        },
    ),
}


def queue_messages(emu: Emulator, kind: str, name: str) -> str:
    """The ``Active=False`` message of ClusterQueue NAME and the Warning Events on the object."""
    out = []
    if kind == "ClusterQueue":
        obj = emu.store.get(emu.store.resource("clusterqueues", "queueing.dra.io"), None, name)
        c = cond(obj, "Active")
        if c is not None and c["status"] == "False":
            out.append(c.get("message") or "")
    for e in items(emu, "events"):
        about = e["involvedObject"]
        if about["kind"] == kind and about["name"] == name and e["type"] == "Warning":
            out.append(e.get("message") or "")
    return "\n".join(out)


@pytest.mark.parametrize("case", list(QUEUE_CASES))
async def test_bad_queue_configuration_is_reported_and_others_are_served(
    case: str, emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns
) -> None:
    """Each object is loaded as it is (a real API server with our CRDs refuses most of these at creation,
    by the CRDs' validation rules; the controller must cope with those that got in anyway, e.g. from an
    older CRD). A Job queued to ``bad-cq`` waits with a message, a good Job in another queue runs."""
    objects, expected = QUEUE_CASES[case]
    emu.store.api_validation = (
        False  # the CRDs' rules refuse most of these (tests/kube/test_emulator_validation.py)
    )
    emu.load_objects([*objects, BAD_LQ])
    emu.store.api_validation = True
    await harness.start()
    await admin.create(JOBS, job("bad", queue="bad-lq"))
    await admin.create(JOBS, job("good"))
    await eventually(lambda: running(emu, "good", 1), f"the good Job runs ({case})")
    for (kind, name), words in expected.items():
        msg = await eventually(
            lambda kind=kind, name=name, words=words: (
                (m := queue_messages(emu, kind, name)) and all(w.lower() in m.lower() for w in words) and m
            ),
            f"a message on {kind} {name} naming {words} ({case}); got {queue_messages(emu, kind, name)!r}",
        )
        print(f"\n{case}: {kind} {name}: {msg}")
        assert "Traceback" not in msg
    # the Job queued to bad-cq says why it waits
    why = await eventually(lambda: messages(emu, "bad"), f"a message on the Job's Workload ({case})")
    print(f"  Job: {why}")
    assert "bad-cq" in why
    assert not running(emu, "bad", 1)
    assert harness.controller is not None and harness.controller._task is not None
    assert not harness.controller._task.done()
    assert not cluster.errors


async def test_a_cluster_queue_on_a_cohort_cycle_is_inactive_with_nothing_pending(
    emu: Emulator, harness: Harness
) -> None:
    """No workload waits, so no scheduling cycle runs: the ClusterQueue's status says all the same
    that it is inactive, and why."""
    emu.load_objects([cohort("ring-a", "ring-b"), cohort("ring-b", "ring-a"), bad_cq(cohort="ring-a")])
    await harness.start()
    msg = await eventually(
        lambda: (m := queue_messages(emu, *CQ)) and "ring-a -> ring-b -> ring-a" in m and m,
        f"Active=False on bad-cq naming the cycle; got {queue_messages(emu, *CQ)!r}",
    )
    assert "cycle" in msg.lower()
