"""The controller's cluster cache through a stream of real informer events: creates, updates and
deletes of nodes, slices, claims, pods and a ClusterQueue are written to the API (the emulator), and
after each one, once the informers have it, the cache equals the informers' caches and its placer,
kept in place, equals one built from scratch from the same objects (an admitted Job's plan holds
devices meanwhile)."""

from __future__ import annotations

import random
from typing import Any

from queueing.cache import differences
from queueing.kube.client import JOBS, KubeClient
from queueing.testing import Emulator
from tests.controller.conftest import GPU_CLASS, Harness, eventually, job
from tests.controller.test_admission import is_true, workload

NODES = ("node-a", "node-b", "node-c")


def node(name: str, cpu: int, zone: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "zone": zone}},
        "status": {"allocatable": {"cpu": str(cpu), "memory": "512Gi", "pods": "110"}},
    }


def gpu_slice(node_name: str, n: int, generation: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-gpus"},
        "spec": {
            "driver": GPU_CLASS,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": generation, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}", "attributes": {"index": {"int": i}}} for i in range(n)],
        },
    }


def claim(name: str, devices: list[tuple[str, int]], owner: dict[str, Any] | None) -> dict[str, Any]:
    """``owner``: the pod whose claim it is (a claim made from its template); the garbage collector
    deletes a claim created for a pod that does not exist."""
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if owner is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
            }
        ]
    body: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": GPU_CLASS}}]}},
    }
    if devices:
        results = [{"request": "g", "driver": GPU_CLASS, "pool": n, "device": f"gpu-{i}"} for n, i in devices]
        body["status"] = {"allocation": {"devices": {"results": results}}}
    return body


def pod(name: str, node_name: str, cpu: int, phase: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "other"}},
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": str(cpu)}}}],
        },
        "status": {"phase": phase},
    }


class Writer:
    """Writes objects to the emulator's store as a cluster would (create, update, delete)."""

    def __init__(self, emu: Emulator) -> None:
        self.store = emu.store

    def put(self, plural: str, group: str, obj: dict[str, Any]) -> str:
        rt = self.store.resource(plural, group)
        ns = obj["metadata"].get("namespace")
        name = obj["metadata"]["name"]
        try:
            old = self.store.get(rt, ns, name)
        except Exception:
            return str(self.store.create(rt, ns, obj)["metadata"]["resourceVersion"])
        obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": old["metadata"]["resourceVersion"]}}
        if plural == "pods":  # a pod's spec is immutable: what changes is its status
            obj = {**obj, "spec": old["spec"]}
        out = self.store.update(rt, ns, name, obj)
        if "status" in obj and rt.status_subresource and plural != "nodes":
            out = self.store.update(rt, ns, name, {**out, "status": obj["status"]}, subresource="status")
        return str(out["metadata"]["resourceVersion"])

    def owner_pod(self, name: str) -> dict[str, Any]:
        """The pod ``name`` (one that ended, requesting nothing), created on first use."""
        rt = self.store.resource("pods", "")
        try:
            return self.store.get(rt, "default", name)
        except Exception:
            return self.store.create(rt, "default", pod(name, NODES[0], 0, "Succeeded"))

    def delete(self, plural: str, group: str, ns: str | None, name: str) -> bool:
        rt = self.store.resource(plural, group)
        try:
            self.store.get(rt, ns, name)
        except Exception:
            return False
        self.store.delete(rt, ns, name)
        return True


async def test_the_cache_equals_a_rebuild_after_every_informer_event(
    emu: Emulator, admin: KubeClient, harness: Harness
) -> None:
    ctl = await harness.start()
    await admin.create(JOBS, job("held", parallelism=2, template="gpu-2"))
    await eventually(lambda: is_true(workload(emu, "job-held"), "Admitted"), "the Job is admitted")
    assert ctl.admissions  # its plan holds devices through the stream
    w = Writer(emu)
    rng = random.Random(16)
    informer = {
        "nodes": ctl.nodes,
        "resourceslices": ctl.slices,
        "resourceclaims": ctl.claims,
        "pods": ctl.all_pods,
        "clusterqueues": ctl.cluster_queues,
    }
    for step in range(40):
        kind = rng.choice(
            ["nodes", "resourceslices", "resourceclaims", "resourceclaims", "pods", "pods", "clusterqueues"]
        )
        group = {"resourceslices": "resource.k8s.io", "resourceclaims": "resource.k8s.io"}.get(kind, "")
        group = "queueing.dra.io" if kind == "clusterqueues" else group
        delete = rng.random() < 0.25 and kind != "clusterqueues"
        n = rng.choice(NODES)
        if kind == "nodes":
            obj = node(n, rng.choice([16, 32, 64]), rng.choice(["a", "b"]))
        elif kind == "resourceslices":
            obj = gpu_slice(n, rng.randint(1, 4), rng.randint(1, 3))
        elif kind == "resourceclaims":
            devices = [(rng.choice(NODES), rng.randint(0, 3)) for _ in range(rng.randint(0, 2))]
            name = f"c{rng.randint(0, 4)}"
            obj = claim(
                name, sorted(set(devices)), w.owner_pod(f"{name}-pod") if rng.random() < 0.5 else None
            )
        elif kind == "pods":
            obj = pod(f"p{rng.randint(0, 4)}", n, rng.randint(1, 8), rng.choice(["Running", "Succeeded"]))
        else:
            cq = emu.store.get(emu.store.resource("clusterqueues", "queueing.dra.io"), None, "team")
            cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = rng.choice(
                [8, 16]
            )
            obj = cq
        meta = obj["metadata"]
        inf = informer[kind]
        key = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
        if delete:
            if w.delete(kind, group, meta.get("namespace"), meta["name"]):
                await eventually(
                    lambda inf=inf, key=key: inf.get_key(key) is None, f"step {step}: {key} gone"
                )
        elif kind == "pods" and obj["status"]["phase"] == "Succeeded":
            # a finished pod is not sent to the all-pods informer (its field selector): one that
            # was there leaves it with a DELETED event, one that was not is never sent
            w.put(kind, group, obj)
            await eventually(lambda inf=inf, key=key: inf.get_key(key) is None, f"step {step}: {key} left")
        else:
            rv = w.put(kind, group, obj)
            await eventually(
                lambda inf=inf, key=key, rv=rv: (
                    (o := inf.get_key(key)) is not None and o.metadata.resource_version == rv
                ),
                f"step {step}: {kind} {key} at {rv}",
            )
        cache = ctl.cache
        assert cache.nodes == {o.key: o for o in ctl.nodes.list()}
        assert cache.slices == {o.key: o for o in ctl.slices.list()}
        assert cache.claims == {o.key: o for o in ctl.claims.list()}
        assert cache.pods.keys() == set(ctl.all_pods.keys())
        assert differences(cache.placer(), cache.from_scratch()) == [], f"step {step}: {kind} {key}"
    assert ctl.cache.rebuilds > 1  # nodes and slices changed: the placer was built again
