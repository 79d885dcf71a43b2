"""examples/queues through the controller (emulator, real client, the controller under its RBAC):
the ledger's quota check is the core's, so the Cohort ``ml-research``'s own H200 counts. team-a
borrows one H200 beyond its 4 while team-b's 2-GPU Job is admitted within its nominal quota (the
old flat ledger model refused it: "would need 5 from the shared pool, which has 4"); later team-b
uses the cohort's GPU itself (2 of its own + 2 lent by team-a + the cohort's 1)."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from typing import Any

from queueing.kube.client import JOBS, KubeClient
from queueing.ledger.repository import Ledger
from queueing.ledger.state import CohortSpec
from queueing.testing import Emulator
from queueing.testing.cluster import StandIns
from tests.controller.conftest import REPO, Harness, eventually
from tests.controller.test_admission import get, is_true

sys.path.insert(0, str(REPO / "tests" / "fixtures" / "dra"))
import h200

EXAMPLE_QUEUES = ("resource-flavors", "cohort", "cluster-queues", "local-queues", "priority-classes")
GPU = "gpu.nvidia.com"
H200_LABELS = {"node.kubernetes.io/instance-type": "gpu-h200-8x"}  # and nvidia.com/gpu.product
TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def cluster() -> list[dict[str, Any]]:
    """One 8-GPU H200 node that the example flavor ``h200`` selects (labels and taint) and the two
    team namespaces with the labels the example ClusterQueues select."""
    node = h200.node("h200-0", H200_LABELS)
    node["spec"] = {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}
    objs: list[dict[str, Any]] = [
        *(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": f"team-{t}", "labels": {"team": t}},
            }
            for t in ("a", "b")
        ),
        node,
        *h200.node_slices("h200-0", h200.hardware(), mig=False),
    ]
    return objs


def gpu_job(ns: str, name: str, gpus: int) -> list[dict[str, Any]]:
    """A one-pod Job in ``ns`` (LocalQueue ``main``) with a claim for ``gpus`` whole H200s."""
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "gpus", "exactly": {"deviceClassName": GPU, "count": gpus}}]
                }
            }
        },
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": {"queueing.dra.io/queue-name": "main"}},
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "tolerations": [TOLERATION],
                    "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": name}],
                    "containers": [
                        {"name": "main", "image": "x", "resources": {"claims": [{"name": "gpus"}]}}
                    ],
                }
            },
        },
    }
    return [template, job]


def load_examples(emu: Emulator) -> None:
    """examples/queues and an H200 node, next to the conftest's default cluster (whose ClusterQueue
    ``team``, DeviceClass and nodes the example queues do not use)."""
    emu.load_objects(cluster())
    emu.load_objects(REPO / "examples" / "deviceclasses" / "gpu.nvidia.com.yaml")
    for name in EXAMPLE_QUEUES:
        emu.load_objects(REPO / "examples" / "queues" / f"{name}.yaml")


def workload(emu: Emulator, ns: str, name: str) -> dict[str, Any] | None:
    return get(emu, "workloads", f"job-{name}", "queueing.dra.io", ns)


def admitted(emu: Emulator, ns: str, name: str) -> dict[str, Any] | None:
    wl = workload(emu, ns, name)
    return wl if is_true(wl, "Admitted") else None


def h200_gpus(emu: Emulator, cq: str) -> str:
    """ "total/borrowed" H200 GPUs in a ClusterQueue's status (flavorsUsage)."""
    obj = get(emu, "clusterqueues", cq, "queueing.dra.io", None)
    for f in ((obj or {}).get("status") or {}).get("flavorsUsage") or []:
        for r in f["resources"]:
            if f["name"] == "h200" and r["name"] == GPU:
                return f"{r['total']}/{r.get('borrowed', '0')}"
    return ""


async def submit(emu: Emulator, admin: KubeClient, objs: list[dict[str, Any]]) -> None:
    """The claim template into the store, the Job through the API (so the admission policy runs)."""
    for obj in objs:
        if obj["kind"] == "Job":
            await admin.create(JOBS, obj)
        else:
            emu.load_objects([obj])


async def test_team_b_is_admitted_while_team_a_borrows_the_cohorts_gpu(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns, ledger: Ledger
) -> None:
    load_examples(emu)
    await harness.start()
    await submit(emu, admin, gpu_job("team-a", "borrower", 5))  # 4 nominal + 1 borrowed
    await eventually(lambda: admitted(emu, "team-a", "borrower"), "team-a's 5-GPU Job is admitted")
    await eventually(
        lambda: h200_gpus(emu, "team-a") == "5/1",
        "team-a borrows one H200",
    )
    await submit(emu, admin, gpu_job("team-b", "pair", 2))
    await eventually(
        lambda: admitted(emu, "team-b", "pair"), "team-b's 2-GPU Job is admitted while team-a borrows"
    )
    state = await ledger.load_state()
    assert state.usage[("team-a", "h200", GPU)] == 5 and state.usage[("team-b", "h200", GPU)] == 2
    assert state.cohorts["ml-research"].quotas[0].resource == GPU  # the Cohort's own quota is in the ledger

    # team-a is done; team-b may now use the tree's every lendable H200: its 2, team-a's 2 (lendingLimit)
    # and the cohort's own 1 -- 3 more beside the 2 it runs
    assert cluster.finish_pods("team-a", "borrower") == 1
    await eventually(
        lambda: is_true(workload(emu, "team-a", "borrower"), "Finished"), "team-a's Job finished"
    )
    await submit(emu, admin, gpu_job("team-b", "triple", 3))
    await eventually(lambda: admitted(emu, "team-b", "triple"), "team-b uses the cohort's own H200 too")
    state = await ledger.load_state()
    assert state.usage.get(("team-a", "h200", GPU), 0) == 0 and state.usage[("team-b", "h200", GPU)] == 5
    for name in ("pair", "triple"):
        wl = workload(emu, "team-b", name)
        assert not any(
            "ledger" in (c.get("message") or "") for c in (wl or {}).get("status", {}).get("conditions", [])
        )

    # the Cohort object is deleted: it waits (resource-in-use) while team-b's workloads use it, then the
    # ledger holds ml-research as an implicit cohort (no own quota); a stale spec written while the
    # controller is down is put right at its start
    cohorts = emu.store.resource("cohorts", "queueing.dra.io")
    emu.store.delete(cohorts, None, "ml-research")

    def terminating() -> bool:
        obj = emu.store.get(cohorts, None, "ml-research")
        c = next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == "Terminating"), {})
        return bool(obj["metadata"].get("deletionTimestamp")) and "team-b/job-pair" in c.get("message", "")

    await eventually(terminating, "the Cohort in use waits, naming its workloads")
    for name in ("pair", "triple"):
        assert cluster.finish_pods("team-b", name) == 1
    await ledger_eventually(
        ledger, lambda c: c.get("ml-research") == CohortSpec("ml-research"), "cohort implicit"
    )
    await harness.stop()
    await ledger.upsert_cohort(CohortSpec("ml-research", None, state.cohorts["ml-research"].quotas), at=0)
    await harness.start()
    await ledger_eventually(
        ledger, lambda c: c.get("ml-research") == CohortSpec("ml-research"), "stale spec reset"
    )
    assert not cluster.errors
    assert not emu.authorizer.denied  # type: ignore[union-attr]


async def ledger_eventually(
    ledger: Ledger, check: Callable[[dict[str, CohortSpec]], bool], what: str, timeout: float = 20.0
) -> None:
    """Wait until the ledger's cohorts satisfy ``check`` (polling; never a fixed sleep)."""
    deadline = time.monotonic() + timeout
    while not check(await ledger.cohorts()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        await asyncio.sleep(0.02)
