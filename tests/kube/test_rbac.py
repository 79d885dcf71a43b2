"""The emulator's RBAC authorizer (used by the deploy/ end-to-end tests to enforce least privilege)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from queueing.kube.client import CONFIGMAPS, JOBS, NAMESPACES, PODS, KubeClient, Resource, api_client_for_url
from queueing.testing import Emulator
from queueing.testing.rbac import Grant, RbacAuthorizer

SA = "system:serviceaccount:queueing-system:controller"
WORKLOADS = Resource("queueing.dra.io", "v1beta1", "workloads", True, "Workload")
RBAC = "rbac.authorization.k8s.io"
CLUSTER_ROLES = Resource(RBAC, "v1", "clusterroles", False, "ClusterRole")
CLUSTER_ROLE_BINDINGS = Resource(RBAC, "v1", "clusterrolebindings", False, "ClusterRoleBinding")
ROLES = Resource(RBAC, "v1", "roles", True, "Role")
ROLE_BINDINGS = Resource(RBAC, "v1", "rolebindings", True, "RoleBinding")

CLUSTER_ROLE = {
    "apiVersion": f"{RBAC}/v1", "kind": "ClusterRole", "metadata": {"name": "queueing-controller"},
    "rules": [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["queueing.dra.io"], "resources": ["workloads/status"], "verbs": ["update", "patch"]},
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["list"]},
    ],
}  # fmt: skip
BINDING = {
    "apiVersion": f"{RBAC}/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "queueing-controller"},
    "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "queueing-controller"},
    "subjects": [{"kind": "ServiceAccount", "name": "controller", "namespace": "queueing-system"}],
}  # fmt: skip
ROLE = {
    "apiVersion": f"{RBAC}/v1", "kind": "Role", "metadata": {"name": "leader", "namespace": "queueing-system"},
    "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "update"], "resourceNames": ["lock"]}],
}  # fmt: skip
ROLE_BINDING = {
    "apiVersion": f"{RBAC}/v1", "kind": "RoleBinding", "metadata": {"name": "leader", "namespace": "queueing-system"},
    "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": "leader"},
    "subjects": [{"kind": "ServiceAccount", "name": "controller"}],
}  # fmt: skip


async def test_rbac_objects_from_the_api_are_enforced(kube: KubeClient, emu: Emulator) -> None:
    await kube.create(NAMESPACES, {"metadata": {"name": "queueing-system"}})
    await kube.create(CLUSTER_ROLES, CLUSTER_ROLE)
    await kube.create(CLUSTER_ROLE_BINDINGS, BINDING)
    await kube.create(ROLES, ROLE)
    await kube.create(ROLE_BINDINGS, ROLE_BINDING)
    await kube.create(CONFIGMAPS, {"metadata": {"name": "lock", "namespace": "queueing-system"}})
    await kube.create(CONFIGMAPS, {"metadata": {"name": "other", "namespace": "queueing-system"}})
    rbac = RbacAuthorizer.from_store(emu.store)
    emu.authorizer = rbac
    emu.tokens["sa-token"] = SA
    api = api_client_for_url(emu.url, token="sa-token")
    ctl = KubeClient(api)
    try:
        await ctl.list(PODS)  # cluster-wide list through the ClusterRoleBinding
        await ctl.get(CONFIGMAPS, "lock", "queueing-system")  # resourceNames
        for call in (
            ctl.get(CONFIGMAPS, "other", "queueing-system"),  # not in resourceNames
            ctl.create(PODS, {"metadata": {"name": "p", "namespace": "default"}}),  # verb not granted
            ctl.list(CONFIGMAPS, "default"),  # the Role only applies in its namespace
        ):
            with pytest.raises(ApiException) as err:
                await call
            assert err.value.status == 403
    finally:
        await api.close()
    assert [(d.verb, d.resource, d.namespace) for d in rbac.denied] == [
        ("get", "configmaps", "queueing-system"), ("create", "pods", "default"), ("list", "configmaps", "default")
    ]  # fmt: skip
    unused = {str(g) for g in rbac.unused(SA)}
    assert unused == {
        "ClusterRole/queueing-controller rule 0: get pods (core)",
        "ClusterRole/queueing-controller rule 0: watch pods (core)",
        "ClusterRole/queueing-controller rule 1: update workloads/status (queueing.dra.io)",
        "ClusterRole/queueing-controller rule 1: patch workloads/status (queueing.dra.io)",
        "ClusterRole/queueing-controller rule 2: list jobs (batch)",
        "Role/queueing-system/leader rule 0: update configmaps (core)",
    }


async def test_rbac_from_objects_status_subresource_and_superuser(kube: KubeClient, emu: Emulator) -> None:
    rbac = RbacAuthorizer.from_objects([CLUSTER_ROLE, BINDING])
    emu.authorizer = rbac
    emu.tokens["sa-token"] = SA
    await kube.create(WORKLOADS, {"metadata": {"name": "w", "namespace": "default"},
                                  "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1, "template": {}}]}})  # fmt: skip
    api = api_client_for_url(emu.url, token="sa-token")
    ctl = KubeClient(api)
    try:
        await ctl.patch(WORKLOADS, "w", {"status": {"reason": "NoFit"}}, "default", subresource="status")
        with pytest.raises(ApiException) as err:
            await ctl.patch(WORKLOADS, "w", {"spec": {"active": False}}, "default")
        assert err.value.status == 403
        assert json.loads(err.value.body)["message"] == (
            f'workloads.queueing.dra.io "w" is forbidden: User "{SA}" cannot patch resource "workloads" '
            'in API group "queueing.dra.io" in the namespace "default"'
        )
        await ctl.list(JOBS, "default")
    finally:
        await api.close()
    assert (
        Grant("ClusterRole/queueing-controller", 1, "queueing.dra.io", "workloads/status", "patch")
        in rbac.used
    )
    assert not any(d.user == "admin" for d in rbac.denied)  # the admin kubeconfig bypasses RBAC


async def test_kubectl_auth_can_i_and_impersonation(kube: KubeClient, emu: Emulator, tmp_path: Any) -> None:
    from tests.kube.test_kubectl import Kubectl

    emu.authorizer = rbac = RbacAuthorizer.from_objects([CLUSTER_ROLE, BINDING])
    kubectl = Kubectl(emu, tmp_path)
    assert (await kubectl("auth", "can-i", "list", "pods", "--as", SA)).strip() == "yes"
    assert (await kubectl("auth", "can-i", "delete", "pods", "--as", SA, ok=False)).strip().startswith("no")
    assert (
        await kubectl(
            "auth", "can-i", "patch", "workloads.queueing.dra.io", "--subresource=status", "--as", SA
        )
    ).strip() == "yes"
    assert rbac.denied == []  # questions are not denied requests
    listed = await kubectl("get", "jobs", "--as", SA)  # the ClusterRole grants list on jobs
    assert "No resources found" in listed
    refused = await kubectl("get", "configmaps", "--as", SA, ok=False)
    assert f'User "{SA}" cannot list resource "configmaps"' in refused
    assert [(d.verb, d.resource) for d in rbac.denied] == [("list", "configmaps")]
