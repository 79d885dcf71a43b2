"""The visibility API as `queueing run` serves it (ControllerProcess, `visibility.*` configuration,
HTTPS), behind the emulator's aggregation layer: errors as Kubernetes Status objects, RBAC of the
group as the API server checks it (deploy/'s viewer ClusterRole), a missing certificate that stops
only the visibility API, and the order on its own (admission fair sharing, nominated preemptors)."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import yaml

from queueing.api.v1beta1 import Workload
from queueing.config import Config
from queueing.controller.process import ControllerProcess
from queueing.controller.visibility import GROUP, VERSION, ordered_pending, summary
from queueing.kube.client import JOBS, KubeClient, api_client_for_url
from queueing.ledger.repository import Ledger
from queueing.scheduling.snapshot import LocalQueueSpec, WorkloadInfo
from queueing.testing import Emulator
from queueing.testing.cluster import StandIns
from queueing.testing.rbac import RbacAuthorizer
from tests.controller.conftest import CONTROLLER_TOKEN, eventually, job
from tests.controller.test_admission import cond, running, workload
from tests.kubectl.conftest import Kubectl

ROOT = Path(__file__).resolve().parents[2]
API = "/apis/visibility.queueing.dra.io/v1beta1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def self_signed(tmp: Path) -> tuple[str, str]:
    cert, key = tmp / "tls.crt", tmp / "tls.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return str(cert), str(key)


def process_config(**visibility: str) -> Config:
    return Config(
        leader_election={"leader_elect": False},
        metrics={"bind_address": f"127.0.0.1:{free_port()}"},
        health={"health_probe_bind_address": f"127.0.0.1:{free_port()}"},
        visibility=visibility,
    )


async def test_served_over_https_with_status_errors_and_rbac(
    emu: Emulator, admin: KubeClient, ledger: Ledger, cluster: StandIns, kubectl: Kubectl, tmp_path: Path
) -> None:
    cert, key = self_signed(tmp_path)
    config = process_config(bind_address="127.0.0.1:0", cert_file=cert, key_file=key)  # any free port
    api = api_client_for_url(emu.url, token=CONTROLLER_TOKEN)
    proc = ControllerProcess(KubeClient(api, timeout=5.0), ledger, config, identity="only")
    try:
        await proc.start()
        assert proc.visibility is not None and proc.visibility.error is None
        port = proc.visibility.port
        assert port
        emu.aggregation.register(GROUP, VERSION, f"https://127.0.0.1:{port}")
        await admin.create(JOBS, job("wide", template="gpu-4", parallelism=2))
        await eventually(lambda: running(emu, "wide", 2), "wide runs")
        await admin.create(JOBS, job("next", template="gpu-4"))  # (after: same-second creations go by name)
        await eventually(lambda: cond(workload(emu, "job-next"), "QuotaReserved"), "next was looked at")
        got = json.loads(await kubectl.out("get", "--raw", f"{API}/clusterqueues/team/pendingworkloads"))
        assert [i["metadata"]["name"] for i in got["items"]] == ["job-next"]
        # discovery through the aggregation layer
        assert GROUP in await kubectl.out("api-versions")
        resources = json.loads(await kubectl.out("get", "--raw", API))
        assert {r["name"] for r in resources["resources"]} >= {"clusterqueues/pendingworkloads"}

        # errors are Status objects (read with the Python client: the same HTTP path as kubectl's)
        for path, code, message in (
            (f"{API}/clusterqueues/nope/pendingworkloads", 404, 'clusterqueue.visibility.queueing.dra.io "nope" not found'),
            (f"{API}/namespaces/default/localqueues/nope/pendingworkloads", 404, 'localqueue.visibility.queueing.dra.io "nope" not found'),
            (f"{API}/clusterqueues/team/pendingworkloads?limit=x", 400, "limit: not an integer: 'x'"),
        ):  # fmt: skip
            status = await admin.raw("GET", path)
            body = json.loads(await status.read())
            status.release()
            assert (status.status, body["kind"], body["code"], body["message"]) == (
                code,
                "Status",
                code,
                message,
            )

        # RBAC, checked by the API server (here the emulator) before it proxies
        path = f"{API}/clusterqueues/team/pendingworkloads"
        rc, _, err = await kubectl.run("get", "--raw", path, "--as", "alice", check=False)
        assert rc != 0 and 'cannot get resource "clusterqueues/pendingworkloads" in API group "visibility.queueing.dra.io"' in err, err  # fmt: skip
        docs = [d for f in ("rbac.yaml", "visibility.yaml") for d in yaml.safe_load_all((ROOT / "deploy/base" / f).read_text()) if d]  # fmt: skip
        binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                   "metadata": {"name": "alice-views"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                               "name": "queueing-pending-workloads-viewer"},
                   "subjects": [{"kind": "User", "name": "alice"}]}  # fmt: skip
        emu.authorizer = RbacAuthorizer.from_objects([*docs, binding])
        got = json.loads(await kubectl.out("get", "--raw", path, "--as", "alice"))
        assert got["items"][0]["metadata"]["name"] == "job-next"
    finally:
        emu.aggregation.unregister(GROUP, VERSION)
        await proc.stop()
        await api.close()


async def test_a_missing_certificate_stops_only_the_visibility_api(
    emu: Emulator, admin: KubeClient, ledger: Ledger, cluster: StandIns, kubectl: Kubectl, tmp_path: Path
) -> None:
    port = free_port()
    config = process_config(
        bind_address=f"127.0.0.1:{port}",
        cert_file=str(tmp_path / "none.crt"),
        key_file=str(tmp_path / "none.key"),
    )
    api = api_client_for_url(emu.url, token=CONTROLLER_TOKEN)
    proc = ControllerProcess(KubeClient(api, timeout=5.0), ledger, config, identity="only")
    try:
        await proc.start()
        assert proc.visibility is not None and proc.visibility.error is not None
        assert "none.crt" in proc.visibility.error
        emu.aggregation.register(GROUP, VERSION, f"https://127.0.0.1:{port}")
        await admin.create(JOBS, job("runs", template="gpu-1"))
        await eventually(lambda: running(emu, "runs", 1), "the controller admits all the same")
        rc, _, err = await kubectl.run(
            "get", "--raw", f"{API}/clusterqueues/team/pendingworkloads", check=False
        )
        assert (rc != 0 and "ServiceUnavailable" in err) or "error trying to reach service" in err, err
        # the plugin still lists, and says why positions are missing
        rc, out, err = await kubectl.run("queueing", "list", "workloads")
        assert rc == 0 and "job-runs" in out
        await admin.create(JOBS, job("waits", template="gpu-4", parallelism=2))
        await eventually(lambda: cond(workload(emu, "job-waits"), "QuotaReserved"), "waits was looked at")
        rc, out, err = await kubectl.run("queueing", "list", "workloads", "--status", "pending")
        assert rc == 0 and "job-waits" in out and "positions in ClusterQueue team unavailable" in err, err
    finally:
        emu.aggregation.unregister(GROUP, VERSION)
        await proc.stop()
        await api.close()


def info(name: str, queue: str, priority: int = 0, created: float = 0.0) -> tuple[Workload, WorkloadInfo]:
    wl = Workload.model_validate(
        {"apiVersion": "queueing.dra.io/v1beta1", "kind": "Workload",
         "metadata": {"name": name, "namespace": "ns", "creationTimestamp": "2026-12-01T00:00:00Z"},
         "spec": {"queueName": queue, "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": []}}}]}}
    )  # fmt: skip
    return wl, WorkloadInfo("ns", name, queue, (), priority=priority, creation_time=created)


def test_the_order_nominated_first_then_fair_sharing_then_priority() -> None:
    lqs = [
        LocalQueueSpec("ns", "a", "cq"),
        LocalQueueSpec("ns", "b", "cq"),
        LocalQueueSpec("ns", "c", "other"),
    ]
    pending = [info("a1", "a", 5, 1), info("a2", "a", 5, 2), info("b1", "b", 9, 3), info("b2", "b", 0, 0),
               info("c1", "c"), info("x", "missing")]  # fmt: skip
    got = ordered_pending(pending, lqs, frozenset())
    assert [(e.info.name, e.position_in_cluster_queue, e.position_in_local_queue) for e in got["cq"]] == [
        ("b1", 0, 0), ("a1", 1, 0), ("a2", 2, 1), ("b2", 3, 1),
    ]  # fmt: skip
    assert [e.info.name for e in got["other"]] == ["c1"] and "missing" not in str(got)
    # a nominated preemptor goes first; with admission fair sharing, the less used LocalQueue first
    got = ordered_pending(pending, lqs, frozenset({"ns/b2"}))
    assert [e.info.name for e in got["cq"]] == ["b2", "b1", "a1", "a2"]
    got = ordered_pending(pending, lqs, frozenset(), frozenset({"cq"}), {"ns/a": 1.0, "ns/b": 2.0})
    assert [e.info.name for e in got["cq"]] == ["a1", "a2", "b1", "b2"]
    got = ordered_pending(pending, lqs, frozenset(), frozenset(), {"ns/a": 1.0, "ns/b": 2.0})
    assert [e.info.name for e in got["cq"]] == ["b1", "a1", "a2", "b2"]  # not that ClusterQueue's mode
    stopped = [LocalQueueSpec("ns", "a", "cq", stop_policy="Hold"), *lqs[1:]]
    assert [e.info.name for e in ordered_pending(pending, stopped, frozenset())["cq"]] == ["b1", "b2"]
    inactive = [(w, WorkloadInfo("ns", "z", "a", (), priority=99, active=False)) for w, _ in pending[:1]]
    assert ordered_pending(inactive, lqs, frozenset()) == {}
    page = summary(ordered_pending(pending, lqs, frozenset())["cq"], 2, 1)
    assert [i["metadata"]["name"] for i in page["items"]] == ["a1", "a2"]
    assert page["items"][0] == {
        "metadata": {"name": "a1", "namespace": "ns", "creationTimestamp": "2026-12-01T00:00:00Z"},
        "priority": 5, "localQueueName": "a", "positionInClusterQueue": 1, "positionInLocalQueue": 0,
    }  # fmt: skip
