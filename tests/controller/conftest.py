"""End-to-end fixtures: the API emulator (real HTTP, real kubernetes-asyncio client), the stand-ins for
the Job controller / resourceclaim controller / kube-scheduler / kubelet, a SQLite ledger in tmp_path,
and the controller running as its service account under the RBAC rules of deploy/base/rbac.yaml, with
the MutatingAdmissionPolicy of deploy/base suspending queued Jobs."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from queueing.config import Config
from queueing.controller.controller import Controller
from queueing.kube.client import KubeClient, api_client_for_url
from queueing.ledger.migrate import upgrade_async
from queueing.ledger.repository import Ledger
from queueing.testing import Emulator, run_emulator
from queueing.testing.cluster import StandIns
from queueing.testing.rbac import RbacAuthorizer
from tests.controller.rbac_seen import RBAC_SEEN

REPO = Path(__file__).resolve().parents[2]
CRDS = REPO / "crds"
CONTROLLER_USER = "system:serviceaccount:queueing-system:queueing-controller"
CONTROLLER_TOKEN = "controller-token"
GPU_CLASS = "gpu.example.com"
NODES = ("node-a", "node-b")
GPUS_PER_NODE = 4


class ManualTime:
    """An injected controller clock (epoch seconds) that moves only when the test says so."""

    def __init__(self) -> None:
        self.t = time.time()

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


async def eventually(check: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
    """Wait until ``check()`` is truthy (a condition with a generous timeout, never a fixed sleep)."""
    deadline = time.monotonic() + timeout
    while True:
        v = check()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        await asyncio.sleep(0.01)


def cluster_objects(gpus_per_node: int = GPUS_PER_NODE, nominal: int = 8) -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "queueing-system"}},
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": GPU_CLASS},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{GPU_CLASS}"'}}]},
        },
        {"apiVersion": "queueing.dra.io/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": "default"}},
        {
            "apiVersion": "queueing.dra.io/v1beta1",
            "kind": "ClusterQueue",
            "metadata": {"name": "team"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": [GPU_CLASS],
                        "flavors": [
                            {"name": "default", "resources": [{"name": GPU_CLASS, "nominalQuota": nominal}]}
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": "queueing.dra.io/v1beta1",
            "kind": "LocalQueue",
            "metadata": {"name": "lq", "namespace": "default"},
            "spec": {"clusterQueue": "team"},
        },
    ]
    for count in (1, 2, 4):
        objs.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": f"gpu-{count}", "namespace": "default"},
                "spec": {
                    "spec": {
                        "devices": {
                            "requests": [
                                {"name": "gpu", "exactly": {"deviceClassName": GPU_CLASS, "count": count}}
                            ]
                        }
                    }
                },
            }
        )
    for node in NODES:
        objs.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": node, "labels": {"kubernetes.io/hostname": node}},
                "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"}},
            }
        )
        objs.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{node}-gpus"},
                "spec": {
                    "driver": GPU_CLASS,
                    "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                    "devices": [
                        {
                            "name": f"gpu-{i}",
                            "attributes": {"index": {"int": i}},
                            "capacity": {"memory": {"value": "80Gi"}},
                        }
                        for i in range(gpus_per_node)
                    ],
                },
            }
        )
    return objs


def job(
    name: str,
    *,
    parallelism: int = 1,
    template: str | None = "gpu-1",
    shared_claim: str | None = None,
    queue: str = "lq",
    suspend: bool | None = None,
) -> dict[str, Any]:
    claims: list[dict[str, Any]] = []
    if template:
        claims.append({"name": "gpu", "resourceClaimTemplateName": template})
    if shared_claim:
        claims.append({"name": "shared", "resourceClaimName": shared_claim})
    spec: dict[str, Any] = {
        "parallelism": parallelism,
        "completions": parallelism,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "main",
                        "image": "busybox",
                        "resources": {"claims": [{"name": c["name"]} for c in claims]} if claims else {},
                    }
                ],
                **({"resourceClaims": claims} if claims else {}),
            }
        },
    }
    if suspend is not None:
        spec["suspend"] = suspend
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default", "labels": {"queueing.dra.io/queue-name": queue}},
        "spec": spec,
    }


@asynccontextmanager
async def emulated_cluster(test_id: str) -> AsyncIterator[Emulator]:
    """The emulator with the CRDs, deploy/'s admission policy and RBAC rules and ``cluster_objects()``;
    what the controller was granted and used goes to ``RBAC_SEEN`` when it ends."""
    async with run_emulator(crds_dir=CRDS, bookmark_interval=None) as e:
        e.tokens[CONTROLLER_TOKEN] = CONTROLLER_USER
        # the real MutatingAdmissionPolicy of deploy/ suspends queued Jobs (run by the emulator)
        e.load_objects(REPO / "deploy" / "base" / "mutating-admission-policy.yaml")
        e.load_objects(cluster_objects())
        rbac = list(yaml.safe_load_all((REPO / "deploy" / "base" / "rbac.yaml").read_text()))
        authorizer = RbacAuthorizer.from_objects([d for d in rbac if d])
        e.authorizer = authorizer
        yield e
        RBAC_SEEN["granted"].update(authorizer.granted(CONTROLLER_USER))
        RBAC_SEEN["used"].update((g.role, g.rule, g.api_group, g.resource, g.verb) for g in authorizer.used)
        RBAC_SEEN["tests"].add(test_id)


@pytest.fixture
async def emu(request: pytest.FixtureRequest) -> AsyncIterator[Emulator]:
    async with emulated_cluster(request.node.nodeid) as e:
        yield e


@pytest.fixture
async def admin(emu: Emulator) -> AsyncIterator[KubeClient]:
    api = api_client_for_url(emu.url, token="admin-token")
    try:
        yield KubeClient(api)
    finally:
        await api.close()


@pytest.fixture
async def ledger(tmp_path: Path) -> AsyncIterator[Ledger]:
    lg = Ledger.from_url(f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}")
    await upgrade_async(lg.engine)
    try:
        yield lg
    finally:
        await lg.close()


class Harness:
    """A controller process that can be started, stopped and restarted against the same ledger."""

    def __init__(self, emu: Emulator, ledger: Ledger, config: Config, **controller_kwargs: Any) -> None:
        self.emu, self.ledger, self.config = emu, ledger, config
        self.controller_kwargs = controller_kwargs  # e.g. clock=, eviction_timeout=
        self.controller: Controller | None = None
        self._api: Any = None

    async def start(self) -> Controller:
        self._api = api_client_for_url(self.emu.url, token=CONTROLLER_TOKEN)
        # in verify mode (queueing.verify): the cores' fast paths are checked against the general
        # computation, and a difference stops the controller's loop
        kwargs = {"verify": True, **self.controller_kwargs}
        self.controller = Controller(KubeClient(self._api, timeout=5.0), self.ledger, self.config, **kwargs)
        await self.controller.start()
        return self.controller

    async def stop(self) -> None:
        if self.controller is not None:
            await self.controller.stop()
            self.controller = None
        if self._api is not None:
            await self._api.close()
            self._api = None


@pytest.fixture
def config() -> Config:
    return Config()


@pytest.fixture
async def harness(emu: Emulator, ledger: Ledger, config: Config) -> AsyncIterator[Harness]:
    h = Harness(emu, ledger, config)
    try:
        yield h
    finally:
        await h.stop()


@pytest.fixture
async def cluster(emu: Emulator, config: Config) -> AsyncIterator[StandIns]:
    # kube-scheduler allocates the claims of pods it finds unallocated (NodeOnly, Auto); under Full it
    # must never need to: the stand-in then refuses, so a pod released too early is caught
    async with StandIns(emu, allocate_claims=config.plan_binding_mode != "Full") as s:
        yield s
