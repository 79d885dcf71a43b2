"""The API emulator through the real kubernetes-asyncio client over HTTP."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException

from queueing.kube.client import JOBS, NAMESPACES, NODES, PODS, KubeClient, Resource
from queueing.testing import Emulator

WIDGETS = Resource("test.queueing.dra.io", "v1", "widgets", True, "Widget")
WORKLOADS = Resource("queueing.dra.io", "v1beta1", "workloads", True, "Workload")
# the least a real API server takes as a Job's template
JOB_TEMPLATE: dict[str, Any] = {
    "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}
}


def pod(
    name: str, labels: dict[str, str] | None = None, node: str | None = None, **spec: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
        "spec": {"containers": [{"name": "main", "image": "busybox"}], **spec},
    }
    if node:
        body["spec"]["nodeName"] = node
    return body


def status_of(exc: ApiException) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(exc.body)
    return result


# ---------------------------------------------------------------- discovery and the generated client
async def test_discovery_lists_builtin_and_crd_resources(kube: KubeClient) -> None:
    core = await kube.request("GET", "/api/v1")
    pods = next(r for r in core["resources"] if r["name"] == "pods")
    assert pods["namespaced"] is True and pods["kind"] == "Pod" and "po" in pods["shortNames"]
    assert "watch" in pods["verbs"]
    assert any(r["name"] == "pods/status" for r in core["resources"])
    groups = {g["name"] for g in (await kube.request("GET", "/apis"))["groups"]}
    assert {
        "batch",
        "resource.k8s.io",
        "scheduling.k8s.io",
        "coordination.k8s.io",
        "queueing.dra.io",
    } <= groups
    ours = await kube.request("GET", "/apis/queueing.dra.io/v1beta1")
    wl = next(r for r in ours["resources"] if r["name"] == "workloads")
    assert wl["kind"] == "Workload" and wl["namespaced"] is True
    assert any(r["name"] == "workloads/status" for r in ours["resources"])
    cq = next(r for r in ours["resources"] if r["name"] == "clusterqueues")
    assert cq["namespaced"] is False


async def test_generated_typed_client_works(kube: KubeClient) -> None:
    core = k8s.CoreV1Api(kube.api)
    created = await core.create_namespaced_pod("default", pod("typed"))
    assert created.metadata.uid and created.metadata.resource_version
    assert created.status.phase == "Pending"
    listed = await core.list_namespaced_pod("default")
    assert [p.metadata.name for p in listed.items] == ["typed"]
    patched = await core.patch_namespaced_pod("typed", "default", {"metadata": {"labels": {"a": "b"}}})
    assert patched.metadata.labels == {"a": "b"}
    custom = k8s.CustomObjectsApi(kube.api)
    w = await custom.create_namespaced_custom_object(
        "test.queueing.dra.io", "v1", "default", "widgets", {"metadata": {"name": "w"}, "spec": {"size": 2}}
    )
    assert w["kind"] == "Widget" and w["apiVersion"] == "test.queueing.dra.io/v1"
    batch = k8s.BatchV1Api(kube.api)
    job = {
        "metadata": {"name": "j"},
        "spec": {
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}
        },
    }
    assert (await batch.create_namespaced_job("default", job)).metadata.name == "j"


# ---------------------------------------------------------------- CRUD semantics
async def test_create_sets_metadata_and_generate_name(kube: KubeClient) -> None:
    obj = await kube.create(
        PODS, {"metadata": {"generateName": "worker-", "namespace": "default"}, "spec": {}}
    )
    meta = obj["metadata"]
    assert meta["name"].startswith("worker-") and len(meta["name"]) == len("worker-") + 5
    assert meta["uid"] and meta["creationTimestamp"].endswith("Z") and meta["generation"] == 1
    assert int(meta["resourceVersion"]) > 0
    got = await kube.get(PODS, meta["name"], "default")
    assert got == obj


async def test_errors_are_status_objects(kube: KubeClient) -> None:
    await kube.create(PODS, pod("p"))
    with pytest.raises(ApiException) as dup:
        await kube.create(PODS, pod("p"))
    assert dup.value.status == 409
    assert status_of(dup.value)["reason"] == "AlreadyExists"
    assert status_of(dup.value)["details"] == {"name": "p", "group": "", "kind": "pods"}
    with pytest.raises(ApiException) as missing:
        await kube.get(PODS, "nope", "default")
    st = status_of(missing.value)
    assert (missing.value.status, st["kind"], st["reason"], st["message"]) == (
        404, "Status", "NotFound", 'pods "nope" not found'
    )  # fmt: skip
    with pytest.raises(ApiException) as no_ns:
        await kube.create(PODS, {**pod("q"), "metadata": {"name": "q", "namespace": "ghost"}})
    assert no_ns.value.status == 404 and 'namespaces "ghost" not found' in status_of(no_ns.value)["message"]


async def test_stale_resource_version_conflicts_and_rv_increases(kube: KubeClient) -> None:
    first = await kube.create(PODS, pod("p"))
    second = await kube.patch(PODS, "p", {"metadata": {"labels": {"x": "1"}}}, "default")
    assert int(second["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])
    stale = dict(first, metadata={**first["metadata"], "labels": {"x": "2"}})
    with pytest.raises(ApiException) as err:
        await kube.replace(PODS, stale)
    st = status_of(err.value)
    assert err.value.status == 409 and st["reason"] == "Conflict"
    assert "the object has been modified" in st["message"]
    # the current resourceVersion succeeds; an unchanged PUT is a no-op (same resourceVersion)
    fresh = dict(second, metadata={**second["metadata"], "labels": {"x": "2"}})
    third = await kube.replace(PODS, fresh)
    assert third["metadata"]["labels"] == {"x": "2"}
    again = await kube.replace(PODS, third)
    assert again["metadata"]["resourceVersion"] == third["metadata"]["resourceVersion"]
    # a JSON patch with a resourceVersion precondition conflicts too
    with pytest.raises(ApiException) as err2:
        await kube.patch(
            PODS, "p", {"metadata": {"resourceVersion": first["metadata"]["resourceVersion"]}}, "default"
        )
    assert err2.value.status == 409


async def test_status_subresource_and_generation(kube: KubeClient) -> None:
    w = await kube.create(
        WIDGETS,
        {
            "metadata": {"name": "w", "namespace": "default"},
            "spec": {"size": 1},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        },
    )
    assert "status" not in w  # status is dropped on create when the status subresource is enabled
    assert w["spec"]["color"] == "red"  # schema default applied
    w2 = await kube.patch(
        WIDGETS,
        "w",
        {"spec": {"size": 2}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        "default",
    )
    assert w2["metadata"]["generation"] == 2 and "status" not in w2
    w3 = await kube.patch(
        WIDGETS,
        "w",
        {"spec": {"size": 9}, "status": {"conditions": [{"type": "Ready", "status": "False"}]}},
        "default",
        subresource="status",
    )
    assert w3["spec"]["size"] == 2, "a /status write must not change spec"
    assert w3["status"]["conditions"][0]["status"] == "False"
    assert w3["metadata"]["generation"] == 2, "status writes do not bump generation"
    w4 = await kube.patch(WIDGETS, "w", {"metadata": {"labels": {"a": "b"}}}, "default")
    assert w4["metadata"]["generation"] == 2, "metadata changes do not bump generation"
    # PUT on /status with a stale resourceVersion conflicts
    with pytest.raises(ApiException) as err:
        await kube.replace(WIDGETS, w3, subresource="status")
    assert err.value.status == 409


async def test_patch_types(kube: KubeClient) -> None:
    deployments = Resource("apps", "v1", "deployments", True, "Deployment")
    containers = [
        {"name": "main", "image": "x"},
        {"name": "side", "image": "x", "env": [{"name": "A", "value": "1"}]},
    ]
    await kube.create(deployments, {"metadata": {"name": "d", "namespace": "default"},
                                    "spec": {"template": {"spec": {"containers": containers}}}})  # fmt: skip
    # strategic merge: containers merged by name, env merged by name
    out = await kube.patch(
        deployments, "d", {"spec": {"template": {"spec": {"containers": [{"name": "side", "env": [{"name": "B", "value": "2"}]}]}}}},
        "default", patch_type="strategic",
    )  # fmt: skip
    got = out["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in got] == ["main", "side"]
    assert got[1]["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    # merge patch: null deletes, lists replace
    out = await kube.patch(
        deployments, "d", {"spec": {"template": {"spec": {"containers": [{"name": "only", "image": "y"}]}}, "paused": None}},
        "default",
    )  # fmt: skip
    assert [c["name"] for c in out["spec"]["template"]["spec"]["containers"]] == ["only"]
    # strategic merge on a gated pod: remove one gate with $patch: delete, add a nodeSelector
    await kube.create(
        PODS, pod("g", schedulingGates=[{"name": "queueing.dra.io/placement"}, {"name": "other"}])
    )
    out = await kube.patch(
        PODS, "g",
        {"spec": {"schedulingGates": [{"name": "queueing.dra.io/placement", "$patch": "delete"}],
                  "nodeSelector": {"kubernetes.io/hostname": "node-1"}}},
        "default", patch_type="strategic",
    )  # fmt: skip
    assert out["spec"]["schedulingGates"] == [{"name": "other"}]
    assert out["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "node-1"}
    # JSON patch: test + remove; a failed test is rejected without change
    out = await kube.patch(
        PODS, "g", [{"op": "test", "path": "/spec/schedulingGates/0/name", "value": "other"},
                    {"op": "remove", "path": "/spec/schedulingGates"}],
        "default", patch_type="json",
    )  # fmt: skip
    assert "schedulingGates" not in out["spec"]
    with pytest.raises(ApiException) as err:
        await kube.patch(
            PODS, "g", [{"op": "test", "path": "/spec/nodeName", "value": "x"}], "default", patch_type="json"
        )
    assert err.value.status == 400


async def test_builtin_update_rules_and_binding(kube: KubeClient) -> None:
    await kube.create(PODS, pod("p", schedulingGates=[{"name": "queueing.dra.io/placement"}]))
    # while gated: nodeSelector additions are allowed, other spec changes and new gates are not
    await kube.patch(PODS, "p", {"spec": {"nodeSelector": {"kubernetes.io/hostname": "n1"}}}, "default")
    for bad, field in (
        ({"spec": {"nodeName": "n1"}}, "spec"),
        ({"spec": {"nodeSelector": {"kubernetes.io/hostname": "n2"}}}, "spec.nodeSelector"),
        (
            {"spec": {"schedulingGates": [{"name": "queueing.dra.io/placement"}, {"name": "new"}]}},
            "spec.schedulingGates",
        ),
    ):
        with pytest.raises(ApiException) as err:
            await kube.patch(PODS, "p", bad, "default")
        assert err.value.status == 422
        assert status_of(err.value)["details"]["causes"][0]["field"] == field
    with pytest.raises(ApiException) as err:
        await kube.bind("p", "default", "n1")
    assert err.value.status == 409 and "non-empty .spec.schedulingGates" in status_of(err.value)["message"]
    await kube.patch(PODS, "p", {"spec": {"schedulingGates": None}}, "default")
    await kube.bind("p", "default", "n1")
    bound = await kube.get(PODS, "p", "default")
    assert bound["spec"]["nodeName"] == "n1"
    assert bound["status"]["conditions"][0]["type"] == "PodScheduled"
    with pytest.raises(ApiException) as err:
        await kube.bind("p", "default", "n2")
    assert err.value.status == 409
    with pytest.raises(ApiException) as err:  # gates and nodeName together on create
        await kube.create(PODS, pod("q", node="n1", schedulingGates=[{"name": "g"}]))
    assert status_of(err.value)["details"]["causes"][0]["field"] == "spec.nodeName"
    # Jobs: the template is mutable (scheduling directives only) while suspended and never started
    tmpl = {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}
    await kube.create(
        JOBS, {"metadata": {"name": "j", "namespace": "default"}, "spec": {"suspend": True, "template": tmpl}}
    )
    gate = {
        "spec": {
            "template": {"spec": {"schedulingGates": [{"name": "queueing.dra.io/placement"}]}},
            "suspend": False,
        }
    }
    await kube.patch(JOBS, "j", gate, "default")  # gate added and unsuspended in one write: allowed
    with pytest.raises(ApiException) as err:
        await kube.patch(JOBS, "j", {"spec": {"template": {"spec": {"nodeSelector": {"a": "b"}}}}}, "default")
    assert status_of(err.value)["details"]["causes"][0]["field"] == "spec.template"
    # ResourceClaims: spec immutable, allocation cannot be replaced
    claims = Resource("resource.k8s.io", "v1", "resourceclaims", True, "ResourceClaim")
    spec = {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}
    await kube.create(claims, {"metadata": {"name": "c", "namespace": "default"}, "spec": spec})
    alloc = {
        "devices": {
            "results": [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"}]
        }
    }
    await kube.patch(claims, "c", {"status": {"allocation": alloc}}, "default", subresource="status")
    other = {
        "devices": {
            "results": [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-1"}]
        }
    }
    with pytest.raises(ApiException) as err:
        await kube.patch(claims, "c", {"status": {"allocation": other}}, "default", subresource="status")
    assert status_of(err.value)["details"]["causes"][0]["field"] == "status.allocation"
    with pytest.raises(ApiException) as err:
        await kube.patch(claims, "c", {"spec": {"devices": {"requests": []}}}, "default")
    assert status_of(err.value)["details"]["causes"][0]["field"] == "spec"


async def test_label_and_field_selectors(kube: KubeClient) -> None:
    await kube.create(PODS, pod("a", {"app": "x", "tier": "web"}, node="n1"))
    await kube.create(PODS, pod("b", {"app": "y"}, node="n2"))
    await kube.create(PODS, pod("c", {"tier": "db"}))

    async def names(label: str | None = None, field: str | None = None) -> list[str]:
        return [i["metadata"]["name"] for i in (await kube.list(PODS, "default", label, field))["items"]]

    assert await names("app=x") == ["a"]
    assert await names("app==x") == ["a"]
    assert await names("app!=x") == ["b", "c"]
    assert await names("app in (x, y)") == ["a", "b"]
    assert await names("app notin (x)") == ["b", "c"]
    assert await names("tier") == ["a", "c"]
    assert await names("!tier") == ["b"]
    assert await names("app in (x,y),tier") == ["a"]
    assert await names(field="spec.nodeName=n2") == ["b"]
    assert await names(field="spec.nodeName!=n2") == ["a", "c"]
    assert await names(field="metadata.name=c,status.phase=Pending") == ["c"]
    assert await names(field="metadata.namespace=default") == ["a", "b", "c"]
    with pytest.raises(ApiException) as err:
        await names("app in (x")
    assert err.value.status == 400


async def test_pagination_with_continue(kube: KubeClient) -> None:
    for i in range(5):
        await kube.create(PODS, pod(f"p{i}"))
    page = await kube.request("GET", PODS.path("default"), {"limit": 2})
    assert (
        len(page["items"]) == 2
        and page["metadata"]["continue"]
        and page["metadata"]["remainingItemCount"] == 3
    )
    everything = await kube.list(PODS, "default", limit=2)  # follows continue tokens
    assert [i["metadata"]["name"] for i in everything["items"]] == [f"p{i}" for i in range(5)]


async def test_cluster_scoped_and_cross_namespace_routing(kube: KubeClient) -> None:
    await kube.create(NODES, {"metadata": {"name": "n1", "labels": {"gpu": "h200"}}})
    assert (await kube.get(NODES, "n1"))["metadata"].get("namespace") is None
    await kube.create(NAMESPACES, {"metadata": {"name": "team-a"}})
    await kube.create(PODS, {**pod("x"), "metadata": {"name": "x", "namespace": "team-a"}})
    await kube.create(PODS, pod("y"))
    everywhere = await kube.list(PODS)
    assert sorted((i["metadata"]["namespace"], i["metadata"]["name"]) for i in everywhere["items"]) == [
        ("default", "y"), ("team-a", "x")
    ]  # fmt: skip
    ns = await kube.get(NAMESPACES, "team-a")
    assert ns["status"]["phase"] == "Active"


async def test_finalizers_and_deletion(kube: KubeClient) -> None:
    await kube.create(
        PODS, {**pod("f"), "metadata": {"name": "f", "namespace": "default", "finalizers": ["x/y"]}}
    )
    deleting = await kube.delete(PODS, "f", "default")
    assert deleting["metadata"]["deletionTimestamp"]
    assert (await kube.get(PODS, "f", "default"))["metadata"]["deletionTimestamp"]
    with pytest.raises(ApiException) as err:
        await kube.patch(PODS, "f", {"metadata": {"finalizers": ["x/y", "new/one"]}}, "default")
    assert err.value.status == 422
    await kube.patch(PODS, "f", {"metadata": {"finalizers": None}}, "default")
    with pytest.raises(ApiException) as gone:
        await kube.get(PODS, "f", "default")
    assert gone.value.status == 404


async def test_garbage_collection_by_owner_references(kube: KubeClient) -> None:
    job = await kube.create(
        JOBS, {"metadata": {"name": "j", "namespace": "default"}, "spec": {"template": JOB_TEMPLATE}}
    )
    owner = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "j",
        "uid": job["metadata"]["uid"],
        "controller": True,
    }
    await kube.create(
        PODS, {**pod("j-1"), "metadata": {"name": "j-1", "namespace": "default", "ownerReferences": [owner]}}
    )
    await kube.delete(JOBS, "j", "default", propagation_policy="Background")
    assert (await kube.list(PODS, "default"))["items"] == []
    # batch Jobs orphan their pods by default, like the real API server
    job = await kube.create(
        JOBS, {"metadata": {"name": "k", "namespace": "default"}, "spec": {"template": JOB_TEMPLATE}}
    )
    owner = {**owner, "name": "k", "uid": job["metadata"]["uid"]}
    await kube.create(
        PODS, {**pod("k-1"), "metadata": {"name": "k-1", "namespace": "default", "ownerReferences": [owner]}}
    )
    await kube.delete(JOBS, "k", "default")
    left = await kube.get(PODS, "k-1", "default")
    assert "ownerReferences" not in left["metadata"]


async def test_objects_created_for_an_absent_owner_are_collected(kube: KubeClient) -> None:
    """The garbage collector's absent-owner rule: a controller that creates a dependent for an owner
    deleted meanwhile (it had not read the deletion yet) leaves nothing behind; a dependent with one
    owner gone and one present only loses the dangling reference; a kind the server does not serve
    cannot be resolved and is left alone."""
    job = await kube.create(
        JOBS, {"metadata": {"name": "j", "namespace": "default"}, "spec": {"template": JOB_TEMPLATE}}
    )
    gone = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": job["metadata"]["uid"]}
    await kube.delete(JOBS, "j", "default", propagation_policy="Background")
    made = await kube.create(
        PODS, {**pod("late"), "metadata": {"name": "late", "namespace": "default", "ownerReferences": [gone]}}
    )
    assert made["metadata"]["name"] == "late"  # the create itself succeeds, as on a real server
    assert (await kube.list(PODS, "default"))["items"] == []
    # an owner of the same name but another UID (recreated) is absent too
    again = await kube.create(
        JOBS, {"metadata": {"name": "j", "namespace": "default"}, "spec": {"template": JOB_TEMPLATE}}
    )
    await kube.create(
        PODS,
        {**pod("stale"), "metadata": {"name": "stale", "namespace": "default", "ownerReferences": [gone]}},
    )
    assert (await kube.list(PODS, "default"))["items"] == []
    present = {**gone, "uid": again["metadata"]["uid"]}
    foreign = {"apiVersion": "example.com/v1", "kind": "Unknown", "name": "x", "uid": "0000"}
    await kube.create(
        PODS,
        {
            **pod("both"),
            "metadata": {"name": "both", "namespace": "default", "ownerReferences": [gone, present, foreign]},
        },
    )
    left = await kube.get(PODS, "both", "default")
    assert left["metadata"]["ownerReferences"] == [present, foreign]


# ---------------------------------------------------------------- CRD schema validation
async def test_crd_schema_validation_reports_field_paths(kube: KubeClient) -> None:
    bad = {
        "metadata": {"name": "bad", "namespace": "default"},
        "spec": {
            "color": "blue",
            "zone": "much-too-long",
            "tags": ["a", "b", "c"],
            "quantity": 1.5,
            "labels": {"k": 1},
        },
    }
    with pytest.raises(ApiException) as err:
        await kube.create(WIDGETS, bad)
    st = status_of(err.value)
    assert err.value.status == 422 and st["reason"] == "Invalid"
    fields = {c["field"]: c["reason"] for c in st["details"]["causes"]}
    assert fields == {
        "spec.size": "FieldValueRequired",
        "spec.color": "FieldValueNotSupported",
        "spec.zone": "FieldValueTooLong",
        "spec.tags": "FieldValueTooMany",
        "spec.quantity": "FieldValueTypeInvalid",
        "spec.labels.k": "FieldValueTypeInvalid",
    }
    assert st["message"].startswith('Widget.test.queueing.dra.io "bad" is invalid: [')
    with pytest.raises(ApiException) as err:
        await kube.create(
            WIDGETS, {"metadata": {"name": "big", "namespace": "default"}, "spec": {"size": 11}}
        )
    assert "spec.size in body should be less than or equal to 10" in status_of(err.value)["message"]
    ok = await kube.create(
        WIDGETS,
        {"metadata": {"name": "ok", "namespace": "default"},
         "spec": {"size": 3, "quantity": "2Gi", "unknown": 1, "blob": {"anything": {"goes": [1]}}}},
    )  # fmt: skip
    assert "unknown" not in ok["spec"], "fields outside the schema are pruned"
    assert ok["spec"]["blob"] == {"anything": {"goes": [1]}}, "preserve-unknown-fields keeps everything"
    # updates are validated too
    with pytest.raises(ApiException) as err:
        await kube.patch(WIDGETS, "ok", {"spec": {"size": 0}}, "default")
    assert status_of(err.value)["details"]["causes"][0]["field"] == "spec.size"


async def test_repo_workload_crd_is_enforced(kube: KubeClient) -> None:
    with pytest.raises(ApiException) as err:
        await kube.create(
            WORKLOADS, {"metadata": {"name": "w", "namespace": "default"}, "spec": {"queueName": "q"}}
        )
    causes = status_of(err.value)["details"]["causes"]
    assert {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.podSets"} in causes


async def test_crds_created_through_the_api_are_served(kube: KubeClient, emu: Emulator) -> None:
    crds = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", False)
    crd = {
        "metadata": {"name": "gadgets.example.com"},
        "spec": {"group": "example.com", "scope": "Cluster",
                 "names": {"plural": "gadgets", "kind": "Gadget"},
                 "versions": [{"name": "v1", "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]},
    }  # fmt: skip
    created = await kube.create(crds, crd)
    assert {c["type"] for c in created["status"]["conditions"]} == {"Established", "NamesAccepted"}
    gadgets = Resource("example.com", "v1", "gadgets", False)
    await kube.create(gadgets, {"metadata": {"name": "g1"}, "spec": {"x": 1}})
    assert (await kube.get(gadgets, "g1"))["spec"] == {"x": 1}
    await kube.delete(crds, "gadgets.example.com")
    with pytest.raises(ApiException) as err:
        await kube.get(gadgets, "g1")
    assert err.value.status == 404


# ---------------------------------------------------------------- tables
async def test_table_output_uses_printer_columns(kube: KubeClient, emu: Emulator) -> None:
    await kube.create(
        WIDGETS, {"metadata": {"name": "w", "namespace": "default"}, "spec": {"size": 4, "zone": "z1"}}
    )
    await kube.patch(
        WIDGETS,
        "w",
        {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        "default",
        subresource="status",
    )
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    async with (
        aiohttp.ClientSession() as s,
        s.get(emu.url + WIDGETS.path("default"), headers={"Accept": accept}) as r,
    ):
        tab = await r.json()
    assert tab["kind"] == "Table"
    assert [c["name"] for c in tab["columnDefinitions"]] == ["Name", "Size", "Color", "Ready", "Zone"]
    assert tab["columnDefinitions"][4]["priority"] == 1
    assert tab["rows"][0]["cells"] == ["w", 4, "red", "True", "z1"]
    assert tab["rows"][0]["object"]["kind"] == "PartialObjectMetadata"


# ---------------------------------------------------------------- watch
async def read_events(emu: Emulator, path: str, n: int, **params: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as s, s.get(emu.url + path, params={"watch": "1", **params}) as r:
        async for line in r.content:
            out.append(json.loads(line))
            if len(out) >= n:
                break
    return out


async def test_watch_from_resource_version_with_bookmarks(kube: KubeClient, emu: Emulator) -> None:
    await kube.create(PODS, pod("before"))
    lst = await kube.list(PODS, "default")
    rv = lst["metadata"]["resourceVersion"]
    await kube.create(PODS, pod("a"))
    await kube.patch(PODS, "a", {"metadata": {"labels": {"k": "v"}}}, "default")
    await kube.delete(PODS, "a", "default")
    emu.send_bookmarks()  # nobody is watching yet: nothing happens
    events = await read_events(emu, PODS.path("default"), 3, resourceVersion=rv)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")
    ]  # fmt: skip
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert rvs == sorted(rvs) and rvs[0] > int(rv)


async def test_watch_bookmark_and_timeout(kube: KubeClient, emu: Emulator) -> None:
    import asyncio

    async def watch() -> list[dict[str, Any]]:
        return await read_events(
            emu, PODS.path("default"), 2, resourceVersion="0", allowWatchBookmarks="true"
        )

    await kube.create(PODS, pod("x"))
    task = asyncio.create_task(watch())
    while emu.open_watches == 0:
        await asyncio.sleep(0.01)
    emu.send_bookmarks()
    events = await task
    assert events[0]["type"] == "ADDED"  # resourceVersion=0: the current state first
    assert events[1]["type"] == "BOOKMARK"
    assert events[1]["object"]["metadata"]["resourceVersion"] == str(emu.store.rv)
    # timeoutSeconds ends the stream
    params = {"watch": "1", "resourceVersion": str(emu.store.rv), "timeoutSeconds": "1"}
    async with aiohttp.ClientSession() as s, s.get(emu.url + PODS.path("default"), params=params) as r:
        assert await r.read() == b""  # nothing happened within the second: the stream just ends


async def test_watch_label_selector_transitions(kube: KubeClient, emu: Emulator) -> None:
    rv = (await kube.list(PODS, "default"))["metadata"]["resourceVersion"]
    await kube.create(PODS, pod("p", {"team": "a"}))
    await kube.patch(PODS, "p", {"metadata": {"labels": {"team": "b"}}}, "default")
    await kube.patch(PODS, "p", {"metadata": {"labels": {"team": "a"}}}, "default")
    events = await read_events(emu, PODS.path("default"), 3, resourceVersion=rv, labelSelector="team=a")
    assert [e["type"] for e in events] == ["ADDED", "DELETED", "ADDED"]


async def test_watch_gone_after_compaction(kube: KubeClient, emu: Emulator) -> None:
    rv = (await kube.create(PODS, pod("p")))["metadata"]["resourceVersion"]
    await kube.patch(PODS, "p", {"metadata": {"labels": {"k": "v"}}}, "default")
    emu.faults.compact()
    events = await read_events(emu, PODS.path("default"), 1, resourceVersion=rv)
    assert events[0]["type"] == "ERROR"
    assert events[0]["object"]["code"] == 410 and events[0]["object"]["reason"] == "Expired"
    # a small history window compacts by itself
    emu.store.history_limit = 2
    for i in range(3):
        await kube.patch(PODS, "p", {"metadata": {"labels": {"k": str(i)}}}, "default")
    assert emu.store.compacted_rv > int(rv)


async def test_watch_through_kubernetes_asyncio_raises_410(kube: KubeClient, emu: Emulator) -> None:
    from kubernetes_asyncio import watch

    rv = (await kube.create(PODS, pod("p")))["metadata"]["resourceVersion"]
    await kube.patch(PODS, "p", {"metadata": {"labels": {"k": "v"}}}, "default")
    emu.faults.compact()  # the patch's event is forgotten: watching from before it is impossible
    core = k8s.CoreV1Api(kube.api)
    w = watch.Watch()
    with pytest.raises(ApiException) as err:
        async for _ in w.stream(core.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=5):
            pass
    assert err.value.status == 410
    await w.close()


# ---------------------------------------------------------------- faults, counts, authorization
async def test_fault_injection_and_counts(kube: KubeClient, emu: Emulator) -> None:
    emu.faults.fail_next(500, verb="create", resource="pods", count=2)
    for _ in range(2):
        with pytest.raises(ApiException) as err:
            await kube.create(PODS, pod("p"))
        assert err.value.status == 500 and status_of(err.value)["reason"] == "InternalError"
    await kube.create(PODS, pod("p"))
    emu.faults.fail_next(409, verb="patch", resource="pods/status")
    with pytest.raises(ApiException) as err:
        await kube.patch(PODS, "p", {"status": {"phase": "Running"}}, "default", subresource="status")
    assert err.value.status == 409 and status_of(err.value)["reason"] == "Conflict"
    await kube.patch(PODS, "p", {"status": {"phase": "Running"}}, "default", subresource="status")
    assert emu.counts[("create", "pods")] == 3
    assert emu.counts[("patch", "pods/status")] == 2
    snap = emu.counts.snapshot()
    await kube.get(PODS, "p", "default")
    await kube.delete(PODS, "p", "default")
    assert emu.counts.since(snap) == {("get", "pods"): 1, ("delete", "pods"): 1}
    assert emu.counts.writes() == 6 and emu.counts.writes("pods/status") == 2
    assert emu.faults.injected == 3


async def test_latency_injection_delays_only_matching_requests(kube: KubeClient, emu: Emulator) -> None:
    import time

    emu.faults.add_latency(0.3, verb="get", resource="nodes", count=1)
    await kube.create(NODES, {"metadata": {"name": "n"}})
    t0 = time.monotonic()
    await kube.get(NODES, "n")
    assert time.monotonic() - t0 >= 0.3


async def test_authorizer_hook_and_access_log(kube: KubeClient, emu: Emulator) -> None:
    emu.tokens["ctl-token"] = "system:serviceaccount:queueing-system:controller"
    emu.authorizer = lambda a: a.user == "admin" or (a.verb in ("get", "list") and a.resource == "pods")
    from queueing.kube.client import api_client_for_url

    api = api_client_for_url(emu.url, token="ctl-token")
    ctl = KubeClient(api)
    try:
        assert (await ctl.list(PODS, "default"))["items"] == []
        with pytest.raises(ApiException) as err:
            await ctl.create(PODS, pod("p"))
        st = status_of(err.value)
        assert err.value.status == 403 and st["reason"] == "Forbidden"
        assert 'cannot create resource "pods"' in st["message"]
        used = {(a.verb, a.resource) for a in emu.access if a.user.endswith(":controller")}
        assert used == {("list", "pods")}
    finally:
        await api.close()
    bad = api_client_for_url(emu.url, token="wrong")
    try:
        with pytest.raises(ApiException) as err:
            await KubeClient(bad).list(PODS)
        assert err.value.status == 401
    finally:
        await bad.close()


async def test_field_validation_strict_warn_and_list_map_duplicates(kube: KubeClient, emu: Emulator) -> None:
    body = {"metadata": {"name": "w", "namespace": "default"}, "spec": {"size": 1, "bogus": True}}
    with pytest.raises(ApiException) as err:
        await kube.request("POST", WIDGETS.path("default"), {"fieldValidation": "Strict"}, body)
    assert err.value.status == 400
    assert status_of(err.value)["message"] == 'strict decoding error: unknown field "spec.bogus"'
    resp = await kube.raw("POST", WIDGETS.path("default"), {"fieldValidation": "Warn"}, body)
    try:
        assert resp.status == 201
        assert resp.headers.getall("Warning") == ['299 - "unknown field \\"spec.bogus\\""']
    finally:
        resp.release()
    wl = {
        "metadata": {"name": "dup", "namespace": "default"},
        "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1, "template": {}}]},
    }
    await kube.create(WORKLOADS, wl)
    cond = {
        "type": "Admitted",
        "status": "True",
        "reason": "R",
        "message": "m",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    with pytest.raises(ApiException) as err:
        await kube.patch(
            WORKLOADS, "dup", {"status": {"conditions": [cond, cond]}}, "default", subresource="status"
        )
    causes = status_of(err.value)["details"]["causes"]
    assert causes == [
        {
            "reason": "FieldValueDuplicate",
            "message": 'Duplicate value: {"type":"Admitted"}',
            "field": "status.conditions[1]",
        }
    ]


async def test_python_admission_hooks_mutate_like_a_webhook(kube: KubeClient, emu: Emulator) -> None:
    from queueing.testing.store import AdmissionRequest

    def suspend_queued_jobs(req: AdmissionRequest) -> dict[str, Any]:
        obj = req.object
        labels = obj["metadata"].get("labels") or {}
        if (
            req.resource.plural == "jobs"
            and req.operation == "CREATE"
            and "queueing.dra.io/queue-name" in labels
        ):
            obj.setdefault("spec", {})["suspend"] = True
        return obj

    emu.store.admission_hooks.append(suspend_queued_jobs)
    queued = {
        "metadata": {"name": "q", "namespace": "default", "labels": {"queueing.dra.io/queue-name": "a"}},
        "spec": {"template": JOB_TEMPLATE},
    }
    plain = {"metadata": {"name": "p", "namespace": "default"}, "spec": {"template": JOB_TEMPLATE}}
    assert (await kube.create(JOBS, queued))["spec"]["suspend"] is True
    assert (await kube.create(JOBS, plain))["spec"]["suspend"] is False  # the default, not mutated


async def test_server_side_apply_creates_then_merges(kube: KubeClient) -> None:
    path = PODS.path("default", "ssa")
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "ssa", "labels": {"a": "1"}},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }
    with pytest.raises(ApiException) as err:
        await kube.request("PATCH", path, body=body, content_type="application/apply-patch+yaml")
    assert err.value.status == 422
    q = {"fieldManager": "test"}
    created = await kube.request("PATCH", path, q, body, content_type="application/apply-patch+yaml")
    assert created["metadata"]["labels"] == {"a": "1"}
    again = await kube.request(
        "PATCH", path, q, {"metadata": {"labels": {"b": "2"}}}, content_type="application/apply-patch+yaml"
    )
    assert again["metadata"]["labels"] == {"a": "1", "b": "2"}
    assert again["metadata"]["uid"] == created["metadata"]["uid"]


async def test_load_objects_and_writes_by_user(kube: KubeClient, emu: Emulator, tmp_path: Any) -> None:
    (tmp_path / "objs.yaml").write_text(
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, namespace: team-a}\nspec: {template: {spec: {restartPolicy: Never, containers: [{name: c}]}}}\n---\n"
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a}\n---\n"
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high}\nvalue: 1000\n"
    )
    created = emu.load_objects(tmp_path)
    assert created == ["Namespace/team-a", "Job/j", "PriorityClass/high"]  # namespaces first
    assert (await kube.get(JOBS, "j", "team-a"))["metadata"]["uid"]
    with pytest.raises(ValueError, match="Widget v9: not served"):
        emu.load_objects([{"apiVersion": "v9", "kind": "Widget", "metadata": {"name": "x"}}])
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "new-ns"}}
    errors: list[str] = []
    assert emu.load_objects([cm], on_error=lambda d, e: errors.append(str(e))) == []
    assert errors == ['namespaces "new-ns" not found']
    assert emu.load_objects([cm], create_namespaces=True) == ["Namespace/new-ns", "ConfigMap/c"]
    emu.tokens["ctl-token"] = "controller"
    from queueing.kube.client import api_client_for_url

    api = api_client_for_url(emu.url, token="ctl-token")
    try:
        await KubeClient(api).patch(JOBS, "j", {"spec": {"suspend": True}}, "team-a")
    finally:
        await api.close()
    await kube.patch(JOBS, "j", {"spec": {"suspend": False}}, "team-a")
    assert emu.writes_by("controller") == {("patch", "jobs"): 1}
    assert emu.writes_by("controller").writes() == 1 and emu.counts.writes("jobs") == 2


async def test_slow_response_after_the_write_leaves_the_client_uncertain(
    kube: KubeClient, emu: Emulator
) -> None:
    import asyncio

    emu.faults.add_latency(30, verb="create", resource="pods", count=1, after=True)
    with pytest.raises(asyncio.TimeoutError):
        await kube.request("POST", PODS.path("default"), body=pod("slow"), timeout=0.2)
    # the write happened although the client gave up: a retry sees AlreadyExists
    assert (await kube.get(PODS, "slow", "default"))["metadata"]["name"] == "slow"
    with pytest.raises(ApiException) as err:
        await kube.create(PODS, pod("slow"))
    assert err.value.status == 409


async def test_openapi_v3_publishes_crd_schemas_with_their_gvk(emu: Emulator) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{emu.url}/openapi/v3") as r:
            root = await r.json()
        url = root["paths"]["apis/queueing.dra.io/v1beta1"]["serverRelativeURL"]
        async with http.get(emu.url + url) as r:
            doc = await r.json()
        async with http.get(f"{emu.url}/openapi/v3/apis/batch/v1") as r:
            batch = await r.json()
    schemas = doc["components"]["schemas"]
    wl = schemas["io.dra.queueing.v1beta1.Workload"]
    assert wl["x-kubernetes-group-version-kind"] == [
        {"group": "queueing.dra.io", "kind": "Workload", "version": "v1beta1"}
    ]
    crd = emu.store.get(emu.store.resource("customresourcedefinitions", "apiextensions.k8s.io"), None,
                        "workloads.queueing.dra.io")  # fmt: skip
    assert (
        wl["properties"]["spec"]
        == crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    )
    # every $ref resolves inside the document
    refs: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "$ref" in node:
                refs.append(node["$ref"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(doc)
    assert "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" in refs
    for ref in refs:
        assert ref.removeprefix("#/components/schemas/") in schemas, ref
    kinds = {g["kind"] for s in schemas.values() for g in s.get("x-kubernetes-group-version-kind", [])}
    assert {"Workload", "WorkloadList", "ClusterQueue", "LocalQueue", "ResourceFlavor", "Cohort"} <= kinds
    # built-in kinds: the PATCH operation kubectl needs for server-side field validation, no schema
    (op,) = [p["patch"] for path, p in batch["paths"].items() if path.endswith("/jobs/{name}")]
    assert op["x-kubernetes-group-version-kind"]["kind"] == "Job"
    assert batch["components"]["schemas"] == {}
