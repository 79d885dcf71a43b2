"""Pods queueing does not manage take node resources too: a DaemonSet-like pod using 30 of a node's 32
CPUs makes a 4-CPU Job go to the other node (the controller watches every pod, in the cluster
cache's light projection)."""

from __future__ import annotations

from typing import Any

from queueing.cache import differences
from queueing.kube.client import JOBS, PODS, KubeClient
from queueing.testing import Emulator
from queueing.testing.cluster import StandIns
from tests.controller.conftest import NODES, Harness, eventually, job
from tests.controller.test_admission import is_true, planned, workload


def cpu_job(name: str, cpu: str) -> dict[str, Any]:
    j = job(name)
    j["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] = {"cpu": cpu}
    return j


def daemon_pod(node: str, cpu: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"agent-{node}",
            "namespace": "default",
            "labels": {"app": "agent"},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "ds-1"}
            ],
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "agent", "image": "agent", "resources": {"requests": {"cpu": cpu}}}],
        },
    }


def set_cpu(emu: Emulator, node: str, cpu: str) -> None:
    rt = emu.store.resource("nodes")
    obj = emu.store.get(rt, None, node)
    obj["status"]["allocatable"]["cpu"] = cpu
    emu.store.update(rt, None, node, obj, subresource="status")


def cover_cpu(emu: Emulator) -> None:
    """The ClusterQueue of conftest covers cpu too (Jobs that request cpu are admissible)."""
    rt = emu.store.resource("clusterqueues", "queueing.dra.io")
    cq = emu.store.get(rt, None, "team")
    group = cq["spec"]["resourceGroups"][0]
    group["coveredResources"].append("cpu")
    group["flavors"][0]["resources"].append({"name": "cpu", "nominalQuota": "64"})
    emu.store.update(rt, None, "team", cq)


async def admitted_node(emu: Emulator, name: str) -> str:
    wl = await eventually(
        lambda: is_true(workload(emu, f"job-{name}"), "Admitted") and workload(emu, f"job-{name}"),
        f"Job {name} is admitted",
    )
    (placement,) = planned(wl)
    return str(placement["nodeName"])


async def test_a_daemonset_pod_sends_a_job_to_another_node(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns
) -> None:
    first, second = NODES
    cover_cpu(emu)
    for n in NODES:
        set_cpu(emu, n, "32")
    await admin.create(PODS, daemon_pod(first, "30"))
    ctl = await harness.start()
    await eventually(lambda: ctl.cache.pods.get(f"default/agent-{first}"), "the cache sees the agent pod")
    await admin.create(JOBS, cpu_job("four", "4"))
    assert await admitted_node(emu, "four") == second
    # the agent's node is where a Job goes that fits beside it
    await admin.create(JOBS, cpu_job("two", "2"))
    assert await admitted_node(emu, "two") == first
    assert ctl.cache.rebuilds == 1  # pods and claims came and went in place
    # the cache mirrors the informers, and its placer kept in place equals one built from scratch
    cache = ctl.cache
    assert cache.pods.keys() == set(ctl.all_pods.keys()) and f"default/agent-{first}" in cache.pods
    assert cache.claims == {c.key: c for c in ctl.claims.list()}
    assert cache.nodes == {n.key: n for n in ctl.nodes.list()}
    assert differences(cache.placer(), cache.from_scratch()) == []


def set_phase(emu: Emulator, namespace: str, name: str, phase: str) -> None:
    rt = emu.store.resource("pods")
    obj = emu.store.get(rt, namespace, name)
    obj["status"] = {**(obj.get("status") or {}), "phase": phase}
    emu.store.update(rt, namespace, name, obj, subresource="status")


async def test_the_pods_watch_sends_only_what_takes_a_node(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns
) -> None:
    """The all-pods informer is sent neither queueing's own pods nor finished ones (the API server
    filters them), and a foreign pod that finishes leaves it, giving its node's CPUs back: a Job that
    fits only beside nothing waits while the agent runs and is admitted to its node once it ended."""
    first, second = NODES
    cover_cpu(emu)
    for n in NODES:
        set_cpu(emu, n, "32")
    await admin.create(PODS, daemon_pod(first, "30"))
    done = daemon_pod(second, "30")
    done["metadata"]["name"] = "finished-agent"
    await admin.create(PODS, done)
    set_phase(emu, "default", "finished-agent", "Succeeded")  # a finished pod takes nothing
    ctl = await harness.start()
    await eventually(lambda: ctl.cache.pods.get(f"default/agent-{first}"), "the cache sees the agent pod")
    assert ctl.all_pods.get_key("default/finished-agent") is None
    await admin.create(JOBS, cpu_job("big", "31"))
    assert await admitted_node(emu, "big") == second
    # the Job's pods run (the stand-in Job controller and scheduler): the controller's pods informer
    # has them, the all-pods informer does not
    await eventually(lambda: ctl.pods.list(), "the Job's pod is seen")
    assert not [p for p in ctl.all_pods.list() if p.name.startswith("big")]
    await admin.create(JOBS, cpu_job("next", "31"))
    await eventually(
        lambda: (
            (w := workload(emu, "job-next"))
            and any(
                c["type"] == "QuotaReserved" and c["status"] == "False"
                for c in (w.get("status") or {}).get("conditions") or []
            )
        ),
        "the second 31-CPU Job waits",
    )
    set_phase(emu, "default", f"agent-{first}", "Succeeded")
    assert await admitted_node(emu, "next") == first
    await eventually(lambda: f"default/agent-{first}" not in ctl.cache.pods, "the ended agent left the cache")
    assert not ctl.cache.pods and not ctl.all_pods.list()
    assert differences(ctl.cache.placer(), ctl.cache.from_scratch()) == []
