"""`kubectl queueing` through real kubectl (the plugin found on PATH) against the emulator and the
running controller: create, list, stop/resume (and what the controller makes of it), explain, errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from queueing.commands.kubectl_plugin import main
from queueing.controller.visibility import VisibilityServer
from queueing.kube.client import CLUSTER_QUEUES, JOBS, LOCAL_QUEUES, WORKLOADS, KubeClient
from queueing.testing import Emulator
from queueing.testing.cluster import StandIns
from tests.controller.conftest import GPU_CLASS, eventually, job
from tests.controller.test_admission import cond, is_true, running, workload
from tests.kubectl.conftest import Kubectl, table

API = "/apis/visibility.queueing.dra.io/v1beta1"


async def test_create_list_stop_resume(
    emu: Emulator, admin: KubeClient, cluster: StandIns, visibility: VisibilityServer, kubectl: Kubectl
) -> None:
    # create: kueuectl's quota flags, validated by our models before anything is sent
    out = await kubectl.out(
        "queueing", "create", "clusterqueue", "team-b", "--cohort", "org",
        "--nominal-quota", f"default:{GPU_CLASS}=2;cpu=8", "--borrowing-limit", f"default:{GPU_CLASS}=1",
        "--queuing-strategy", "StrictFIFO", "--reclaim-within-cohort", "Any",
    )  # fmt: skip
    assert out == "clusterqueue.queueing.dra.io/team-b created\n"
    cq = await admin.get(CLUSTER_QUEUES, "team-b")
    assert cq["spec"]["cohortName"] == "org" and cq["spec"]["queueingStrategy"] == "StrictFIFO"
    assert cq["spec"]["preemption"]["reclaimWithinCohort"] == "Any"
    assert cq["spec"]["resourceGroups"] == [
        {"coveredResources": [GPU_CLASS, "cpu"], "flavors": [{"name": "default", "resources": [
            {"name": GPU_CLASS, "nominalQuota": "2", "borrowingLimit": "1"}, {"name": "cpu", "nominalQuota": "8"}]}]}
    ]  # fmt: skip
    rc, _, err = await kubectl.run("queueing", "create", "localqueue", "qx", "-c", "nope", check=False)
    assert rc == 1 and "ClusterQueue nope not found" in err, err

    # stop / resume a workload: spec.active; the controller deactivates it and it leaves the queue
    await admin.create(JOBS, job("big", template="gpu-4", parallelism=2, queue="lq"))
    await admin.create(JOBS, job("small", template="gpu-1", queue="lq"))
    await eventually(lambda: running(emu, "big", 2), "big runs")
    await eventually(lambda: (c := cond(workload(emu, "job-small"), "QuotaReserved")) and c["status"] == "False",
                     "small is pending")  # fmt: skip
    rows = table(await kubectl.out("queueing", "list", "workloads"))
    assert {r["NAME"]: r["POSITION"] for r in rows} == {"job-big": "", "job-small": "0"}, rows
    assert await kubectl.out("queueing", "stop", "workload", "job-small") == (
        "workload.queueing.dra.io/job-small stopped\n"
    )
    assert (await admin.get(WORKLOADS, "job-small", "default"))["spec"]["active"] is False
    got = await kubectl.out("get", "--raw", f"{API}/clusterqueues/team/pendingworkloads")
    assert yaml.safe_load(got)["items"] == []  # deactivated: not in the queue
    await kubectl.out("queueing", "resume", "workload", "job-small")
    assert (await admin.get(WORKLOADS, "job-small", "default"))["spec"]["active"] is True

    # stop a ClusterQueue: HoldAndDrain (drains the admitted), or Hold with --keep-already-running
    await kubectl.out("queueing", "stop", "clusterqueue", "team", "--keep-already-running")
    assert (await admin.get(CLUSTER_QUEUES, "team"))["spec"]["stopPolicy"] == "Hold"
    await kubectl.out("queueing", "resume", "cq", "team")
    assert (await admin.get(CLUSTER_QUEUES, "team"))["spec"]["stopPolicy"] == "None"
    await kubectl.out("queueing", "stop", "localqueue", "lq")
    assert (await admin.get(LOCAL_QUEUES, "lq", "default"))["spec"]["stopPolicy"] == "HoldAndDrain"
    await eventually(lambda: is_true(workload(emu, "job-big"), "Evicted"), "big is drained")
    await kubectl.out("queueing", "resume", "localqueue", "lq")
    assert (await admin.get(LOCAL_QUEUES, "lq", "default"))["spec"]["stopPolicy"] == "None"

    rc, _, err = await kubectl.run("queueing", "stop", "workload", "nope", check=False)
    assert rc == 1 and "not found" in err, err


async def test_explain_and_status_filters(
    emu: Emulator, admin: KubeClient, cluster: StandIns, visibility: VisibilityServer, kubectl: Kubectl,
    tmp_path: object,
) -> None:  # fmt: skip
    await admin.create(JOBS, job("one", template="gpu-4", parallelism=2))
    await admin.create(JOBS, job("two", template="gpu-1"))
    await eventually(lambda: running(emu, "one", 2), "one runs")
    await eventually(lambda: (c := cond(workload(emu, "job-two"), "QuotaReserved")) and c["status"] == "False",
                     "two is pending")  # fmt: skip
    rows = table(await kubectl.out("queueing", "list", "workloads", "--status", "admitted"))
    assert [r["NAME"] for r in rows] == ["job-one"]
    rows = table(await kubectl.out("queueing", "list", "workloads", "-A", "--status", "pending"))
    assert [(r["NAMESPACE"], r["NAME"], r["POSITION"]) for r in rows] == [("default", "job-two", "0")]
    ledger = f"sqlite+aiosqlite:///{tmp_path}/ledger.db"  # the harness's ledger
    out = await kubectl.out("queueing", "explain", "job-two", "--url", ledger)
    assert "Pending" in out and "insufficient unused quota" in out, out
    assert (
        "Position:  1 of 1 pending in ClusterQueue team, 1 of 1 in LocalQueue default/lq "
        "(the controller's admission order, from its visibility API)"
    ) in out, out


def test_create_flags_offline(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The quota flags and --dry-run client need no cluster (the plugin's main, in this process)."""
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "current-context": "c",
                                      "contexts": [{"name": "c", "context": {"namespace": "team-x"}}]}))  # fmt: skip
    argv = ["--kubeconfig", str(config), "--dry-run", "client", "-o", "yaml"]
    assert main(["create", "lq", "qb", "-c", "team-b", *argv]) == 0
    lq = yaml.safe_load(capsys.readouterr().out)
    assert lq["metadata"] == {"name": "qb", "namespace": "team-x"} and lq["spec"] == {
        "clusterQueue": "team-b"
    }
    assert main(["create", "cq", "two", "--nominal-quota", "a:cpu=1;memory=1Gi,b:cpu=2;memory=2Gi",
                 "--nominal-quota", "g:gpu.example.com=8", "--lending-limit", "g:gpu.example.com=2",
                 "--namespace-selector", "team=x", "--cohort", "org", *argv]) == 0  # fmt: skip
    cq = yaml.safe_load(capsys.readouterr().out)["spec"]
    assert cq["namespaceSelector"] == {"matchLabels": {"team": "x"}}
    assert [(g["coveredResources"], [f["name"] for f in g["flavors"]]) for g in cq["resourceGroups"]] == [
        (["cpu", "memory"], ["a", "b"]), (["gpu.example.com"], ["g"]),
    ]  # fmt: skip
    assert cq["resourceGroups"][1]["flavors"][0]["resources"] == [
        {"name": "gpu.example.com", "nominalQuota": "8", "lendingLimit": "2"}
    ]
    for flags, message in (
        (["--nominal-quota", "default:cpu=lots"], "--nominal-quota: default:cpu:"),
        (["--nominal-quota", "cpu=1"], "expected FLAVOR:RESOURCE=QUANTITY"),
        (["--lending-limit", "default:cpu=1"], "no --nominal-quota for this flavor and resource"),
        (["--namespace-selector", "team"], "--namespace-selector: 'team' is not KEY=VALUE"),
        (
            ["--nominal-quota", "f:cpu=1", "--lending-limit", "f:cpu=1"],
            "lendingLimit: must not be set when cohortName is empty",
        ),
    ):
        assert main(["create", "cq", "bad", *flags, *argv]) == 2
        assert message in capsys.readouterr().err
