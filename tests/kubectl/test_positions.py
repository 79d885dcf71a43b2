"""Acceptance (issue #20): `kubectl queueing list workloads --clusterqueue team-a` shows positions that
match the visibility API and the order the controller admits them in.

ClusterQueue team-a (4 GPUs) is full with four running 1-GPU Jobs; five more wait, of three priorities
and in two LocalQueues. Both views are read (the visibility API through `kubectl get --raw`, proxied
by the emulator's aggregation layer to the controller; the plugin through real kubectl), then
capacity is freed one GPU at a time and each freed GPU must go to the workload that was at position 0.
At every step the command as written (no ``--status``: the admitted rows first, without a position)
shows the positions the visibility API reads at that step, and the expected order.
"""

from __future__ import annotations

import json
from typing import Any

from queueing.controller.visibility import VisibilityServer
from queueing.kube.client import JOBS, KubeClient
from queueing.testing import Emulator
from queueing.testing.cluster import StandIns
from tests.controller.conftest import GPU_CLASS, eventually, job
from tests.controller.test_admission import cond, is_true, running, workload
from tests.kubectl.conftest import Kubectl, priority_classes, table

API = "/apis/visibility.queueing.dra.io/v1beta1"


def team_a() -> list[dict[str, Any]]:
    return [
        {"apiVersion": "queueing.dra.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "team-a"},
         "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": [GPU_CLASS], "flavors": [
             {"name": "default", "resources": [{"name": GPU_CLASS, "nominalQuota": 4}]}]}]}},
        {"apiVersion": "queueing.dra.io/v1beta1", "kind": "LocalQueue",
         "metadata": {"name": "qa", "namespace": "default"}, "spec": {"clusterQueue": "team-a"}},
        {"apiVersion": "queueing.dra.io/v1beta1", "kind": "LocalQueue",
         "metadata": {"name": "qb", "namespace": "default"}, "spec": {"clusterQueue": "team-a"}},
        *priority_classes(("high", 100), ("mid", 50)),
    ]  # fmt: skip


def queued(name: str, queue: str, priority: str | None) -> dict[str, Any]:
    j = job(name, template="gpu-1", queue=queue)
    if priority:
        j["metadata"]["labels"]["queueing.dra.io/priority-class"] = priority
    return j


def pending(emu: Emulator, name: str) -> bool:
    c = cond(workload(emu, f"job-{name}"), "QuotaReserved")
    return c is not None and c["status"] == "False"


async def visibility_order(kubectl: Kubectl, path: str) -> list[tuple[str, int, int, int]]:
    got = json.loads(await kubectl.out("get", "--raw", path))
    assert (
        got["kind"] == "PendingWorkloadsSummary" and got["apiVersion"] == "visibility.queueing.dra.io/v1beta1"
    )
    return [
        (i["metadata"]["name"], i["positionInClusterQueue"], i["positionInLocalQueue"], i["priority"])
        for i in got["items"]
    ]


async def test_positions_match_the_visibility_api_and_the_admission_order(
    emu: Emulator, admin: KubeClient, cluster: StandIns, visibility: VisibilityServer, kubectl: Kubectl
) -> None:
    emu.load_objects(team_a())
    for i in range(4):
        await admin.create(JOBS, queued(f"hold-{i}", "qa", None))
    await eventually(lambda: all(running(emu, f"hold-{i}", 1) for i in range(4)), "the holders run")
    # within a priority, creation order is name order: the expected order holds whether or not two
    # creations fall into the same second (the queue's last tie-break is the key)
    waiting = [("p-a", "qa", None), ("p-b", "qa", "high"), ("p-c", "qb", "mid"), ("p-d", "qb", "high"),
               ("p-e", "qa", None)]  # fmt: skip
    for name, queue, prio in waiting:
        await admin.create(JOBS, queued(name, queue, prio))
    await eventually(lambda: all(pending(emu, n) for n, _, _ in waiting), "all five are pending")
    expected = ["job-p-b", "job-p-d", "job-p-c", "job-p-a", "job-p-e"]

    # the visibility API, as `kubectl get --raw` reads it through the aggregation layer
    order = await visibility_order(kubectl, f"{API}/clusterqueues/team-a/pendingworkloads")
    assert [o[0] for o in order] == expected
    assert [o[1] for o in order] == [0, 1, 2, 3, 4]
    assert dict((o[0], o[2]) for o in order) == {
        "job-p-b": 0,
        "job-p-a": 1,
        "job-p-e": 2,
        "job-p-d": 0,
        "job-p-c": 1,
    }
    assert dict((o[0], o[3]) for o in order) == {
        "job-p-b": 100,
        "job-p-d": 100,
        "job-p-c": 50,
        "job-p-a": 0,
        "job-p-e": 0,
    }
    lq = await visibility_order(kubectl, f"{API}/namespaces/default/localqueues/qb/pendingworkloads")
    assert lq == [("job-p-d", 1, 0, 100), ("job-p-c", 2, 1, 50)]
    page = await visibility_order(kubectl, f"{API}/clusterqueues/team-a/pendingworkloads?limit=2&offset=1")
    assert [o[0] for o in page] == expected[1:3]
    raw = json.loads(
        await kubectl.out("get", "--raw", f"{API}/clusterqueues/team-a/pendingworkloads?limit=1")
    )
    assert raw["items"][0]["localQueueName"] == "qa" and raw["items"][0]["metadata"]["creationTimestamp"]
    assert raw["items"][0]["metadata"]["ownerReferences"][0]["kind"] == "Job"

    while expected:
        # the acceptance command as written (no --status): every workload of team-a, the admitted ones
        # first without a position, then the pending ones in admission order with their position ...
        rows = table(await kubectl.out("queueing", "list", "workloads", "--clusterqueue", "team-a"))
        assert {r["CLUSTERQUEUE"] for r in rows} == {"team-a"}
        positioned = [(r["NAME"], r["POSITION"]) for r in rows if r["POSITION"]]
        assert positioned == [(n, str(i)) for i, n in enumerate(expected)], rows
        assert [r["NAME"] for r in rows[-len(expected) :]] == expected, rows
        assert all(not pending(emu, r["NAME"].removeprefix("job-")) for r in rows[: -len(expected)]), rows
        # ... the same positions as the visibility API reads at this step ...
        order = await visibility_order(kubectl, f"{API}/clusterqueues/team-a/pendingworkloads")
        assert positioned == [(o[0], str(o[1])) for o in order]
        if len(expected) == len(waiting):  # ... and --status pending lists just those, in that order
            args = ("list", "workloads", "--clusterqueue", "team-a", "--status", "pending")
            rows = table(await kubectl.out("queueing", *args))
            assert [(r["NAME"], r["POSITION"]) for r in rows] == positioned, rows
        # free one GPU: the workload at position 0 gets it, and only that one (the admission order)
        holder = next(n for n in [*(f"hold-{i}" for i in range(4)), "p-b", "p-d", "p-c", "p-a"]
                      if running(emu, n, 1))  # fmt: skip
        assert cluster.finish_pods("default", holder) == 1
        head, *expected = expected
        await eventually(lambda h=head: is_true(workload(emu, h), "QuotaReserved"), f"{head} admitted")  # type: ignore[misc]
        await eventually(lambda h=head: running(emu, h.removeprefix("job-"), 1), f"{head} runs")  # type: ignore[misc]
        assert all(pending(emu, n.removeprefix("job-")) for n in expected), [
            workload(emu, n) for n in expected
        ]

    _, out, _ = await kubectl.run(
        "queueing", "list", "workloads", "--clusterqueue", "team-a", "--status", "pending"
    )
    assert out.startswith("No resources found"), out
