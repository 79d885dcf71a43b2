"""The dashboard's data without a browser: the Queues page against the ledger's ``usage`` report on
the same state (PostgreSQL and SQLite), the device layout of a real H200 with dynamic MIG, the
Workloads page's order and positions, and the server's contract (read-only, versions, the
once-a-second rebuild)."""

from __future__ import annotations

import dataclasses
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession

from queueing.api.quantity import format_amount
from queueing.api.resource import ResourceSlice
from queueing.dashboard import DashboardServer, ReplaySource
from queueing.dashboard.model import (
    DashboardInput,
    DeviceLayout,
    PlannedPod,
    device_detail,
    devices_view,
    lent_amounts,
    queues_view,
    workloads_view,
)
from queueing.ledger.engine import create_engine
from queueing.ledger.reports import run_report
from queueing.scheduling.ordering import priority_key
from queueing.scheduling.snapshot import AdmittedWorkload, WorkloadInfo
from queueing.simulate.engine import SimResult, Simulation
from queueing.simulate.record import record
from queueing.simulate.scenario import load_scenario
from tests.dashboard.conftest import REPO
from tests.ledger.conftest import PgServer, pg_server  # noqa: F401  (fixture)

sys.path.insert(0, str(REPO / "tests" / "fixtures" / "dra"))
import h200

EXAMPLE = [str(REPO / "examples" / "simulate")]


@pytest.fixture(scope="module")
def demo_run() -> tuple[Any, SimResult, Any]:
    sc = load_scenario(EXAMPLE)
    sim = Simulation(sc)
    return sc, sim.run(), sim.placer


@pytest.fixture
def demo(demo_run: tuple[Any, SimResult, Any]) -> tuple[Any, SimResult]:
    return demo_run[0], demo_run[1]


def until(result: SimResult, t: float) -> SimResult:
    """The run as if it had stopped at ``t``: its ledger then holds the state at ``t``."""
    events = [e for e in result.events if e.time <= t]
    return SimResult(
        events, dataclasses.replace(result.summary, time=t), [s for s in result.samples if s.time <= t]
    )


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
async def test_queues_page_is_the_usage_report_on_the_same_state(
    backend: str, demo_run: tuple[Any, SimResult, Any], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    sc, result, placer = demo_run
    replay = ReplaySource(sc, result)
    borrowing = 0
    # PostgreSQL: one state with borrowing (the report's SQL is the same on both, tests/ledger checks)
    for i, t in enumerate([60.0, 1500.0] if backend == "sqlite" else [60.0]):
        if backend == "sqlite":
            url = f"sqlite+aiosqlite:///{tmp_path / f'ledger-{i}.db'}"
        else:
            server: PgServer = request.getfixturevalue("pg_server")
            url = server.create(f"dashboard_{i}")
        run = until(result, t)
        await record(run, sc, placer, url, start_epoch=1_800_000_000.0)
        engine = create_engine(url)
        try:
            report = (await run_report(engine, "usage")).as_dicts()
        finally:
            await engine.dispose()
        inp = replay.snapshot(t)
        view = {
            (q["name"], r["flavor"], r["resource"]): r
            for q in queues_view(inp)["clusterQueues"]
            for r in q["resources"]
        }
        usage: dict[tuple[str, str, str], Fraction] = {}
        for a in inp.admitted:
            for (f, res), v in a.usage.items():
                usage[(a.cluster_queue, f, res)] = usage.get((a.cluster_queue, f, res), Fraction(0)) + v
        lent = lent_amounts(inp.cluster_queues, usage)
        assert {(r["cluster_queue"], r["flavor"], r["resource"]) for r in report} == set(view)
        for row in report:
            k = (row["cluster_queue"], row["flavor"], row["resource"])
            res = row["resource"]
            for col in ("nominal", "usage", "borrowed"):
                assert view[k][col] == format_amount(Fraction(str(row[col])), res), (t, k, col)
            assert abs(float(lent.get(k, 0)) - float(row["lent"])) < 1e-6, (t, k)
            assert view[k]["lent"] == format_amount(lent.get(k, Fraction(0)), res)
            borrowing += row["borrowed"] != 0
    assert borrowing  # the states compared include borrowing (and so lending)


def test_h200_mig_devices_are_laid_out_at_their_placement_starts() -> None:
    hw = h200.hardware()
    slices = [ResourceSlice.model_validate(s) for s in h200.node_slices("h200-0", hw, gpus=8, mig=True)]
    layout = DeviceLayout(slices)
    assert [len(cards) for _, cards in layout.nodes] == [8]  # one card per GPU: its counter set
    for c in layout.cards:
        assert c.slices == h200.SLICES and c.key is not None and c.label == c.key[2]
    seen = 0
    for d in (d for s in slices for d in s.spec.devices):  # one slice per GPU (at most 128 devices a slice)
        card, start, size = layout.where[("gpu.nvidia.com", "h200-0", d.name)]
        attrs = d.attributes or {}
        gpu = attrs["parentIndex"].int_ if "parentIndex" in attrs else attrs["index"].int_
        assert layout.cards[card].label == f"gpu-{gpu}"
        if "placementStart" in attrs:
            assert (start, size) == (attrs["placementStart"].int_, attrs["placementSize"].int_), d.name
            seen += 1
        else:
            assert (start, size) == (0, h200.SLICES)  # the whole GPU
    assert seen == 8 * sum(len(p["placementStarts"]) for p in hw["profiles"])


def test_workloads_page_orders_pending_as_the_queue_does(demo: tuple[Any, SimResult]) -> None:
    sc, result = demo
    replay = ReplaySource(sc, result)
    busiest = max((len(replay.snapshot(t).pending), t) for t in replay.times())[1]
    inp = replay.snapshot(busiest)
    view = workloads_view(inp)
    assert view["pendingTotal"] == len(inp.pending) > 1
    cq_of = {lq.key: lq.cluster_queue for lq in inp.local_queues}
    for cq in {cq_of[w.queue_key] for w in inp.pending}:
        want = [w.key for w in sorted(inp.pending, key=priority_key) if cq_of[w.queue_key] == cq]
        rows = [p for p in view["pending"] if p["clusterQueue"] == cq]
        assert [p["key"] for p in rows] == want
        assert [p["position"] for p in rows] == list(range(1, len(want) + 1))
        assert all(p["of"] == len(want) for p in rows)
    # admitted: the plan of each, and on the device map every planned device is drawn with its holder
    dv = devices_view(inp)
    holder = {h["key"]: i for i, h in enumerate(dv["holders"])}
    drawn = {(it[3], it[4]) for it in dv["held"]}
    for a in view["admitted"]:
        for p in a["pods"]:
            for d in p["devices"]:
                assert (holder[a["key"]], d["device"].split("/")[-1]) in drawn


class CountingSource(ReplaySource):
    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.snapshots = 0
        self.rev = 0

    def revision(self) -> int:
        return self.rev

    def snapshot(self, at: float | None = None) -> Any:
        self.snapshots += 1
        return super().snapshot(at)


async def test_server_is_read_only_versioned_and_rebuilds_at_most_once_a_second(
    demo: tuple[Any, SimResult],
) -> None:
    src = CountingSource(*demo)
    server = DashboardServer(src, min_interval=3600.0)  # nothing is rebuilt within the test
    port = await server.start("127.0.0.1:0")
    base = f"http://127.0.0.1:{port}"
    try:
        async with ClientSession() as s:
            for page in ("queues", "workloads", "devices", "history"):
                async with s.get(f"{base}/{page}") as r:
                    assert r.status == 200 and f'data-page="{page}"' in await r.text()
                    assert "default-src 'self'" in r.headers["Content-Security-Policy"]
            async with s.post(f"{base}/api/queues") as r:
                assert r.status == 405  # no write actions
            async with s.get(f"{base}/api/queues?t=100") as r:
                first = await r.json()
            async with s.get(f"{base}/api/queues?t=100&since={first['version']}") as r:
                assert await r.json() == {"version": first["version"], "unchanged": True}
            n = src.snapshots
            src.rev += 1  # the source changed, but the last build is younger than min_interval
            async with s.get(f"{base}/api/devices?t=100") as r:
                dev = (await r.json())["data"]
            async with s.get(f"{base}/api/workloads?t=100") as r:
                assert r.status == 200
            assert src.snapshots == n  # one snapshot serves every view of the same time
            name = dev["layout"]["pools"][0] + "/" + dev["layout"]["nodes"][0][1][0][1]
            async with s.get(f"{base}/api/device", params={"id": name, "t": "100"}) as r:
                detail = await r.json()
                assert detail["device"] == name and detail["attributes"]
            async with s.get(f"{base}/api/device", params={"id": "x/y/none"}) as r:
                assert r.status == 404 and "x/y/none" in await r.text()
            async with s.get(f"{base}/api/queues?t=soon") as r:
                assert r.status == 400 and "t='soon'" in await r.text()
        server.min_interval = 0.0  # now a changed revision is rebuilt at once
        src.rev += 1
        async with ClientSession() as s, s.get(f"{base}/api/queues?t=60") as r:
            assert (await r.json())["version"] != first["version"]
    finally:
        await server.stop()


async def test_a_standby_says_so_on_every_page() -> None:
    from queueing.controller.controller import Controller
    from queueing.dashboard.source import STANDBY, STARTING, ControllerSource
    from queueing.kube.client import KubeClient, api_client_for_url

    api = api_client_for_url("http://127.0.0.1:9", token="unused")  # nothing is requested
    try:
        ctl = Controller(KubeClient(api), ledger=None)  # type: ignore[arg-type]
        assert ControllerSource(ctl).snapshot().note == STARTING  # nothing listed yet
        for informer in ctl.informers:  # as after the first LIST of each (a standby's are kept warm)
            informer.has_synced = True
        inp = ControllerSource(ctl).snapshot()
        assert not ctl.leading
        for view in (queues_view, workloads_view, devices_view):
            assert view(inp)["note"] == STANDBY
    finally:
        await api.close()


def test_device_states_on_the_map_evicting_claimed_and_tainted() -> None:
    hw = h200.hardware()
    raw = h200.node_slices("h200-0", hw, gpus=2, mig=True)
    taint = {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}
    for d in (d for s in raw for d in s["spec"]["devices"]):  # one slice per GPU
        if d["name"] == "gpu-1":
            d["taints"] = [taint]
    slices = [ResourceSlice.model_validate(s) for s in raw]
    info = WorkloadInfo("team", "victim", "lq", ())
    victim = AdmittedWorkload(info, "cq", {}, 0.0)
    drv = "gpu.nvidia.com"
    inp = DashboardInput(
        now=0.0,
        admitted=[victim],
        plans={
            "team/victim": (
                PlannedPod("main", 0, "h200-0", (("gpu", (drv, "h200-0", "gpu-0-mig-3g-71gb-4")),)),
            )
        },
        evicting={"team/victim": "Preempted"},
        slices=slices,
        claims={(drv, "h200-0", "gpu-0-mig-1g-18gb-0"): "ops/debug-claim"},
    )
    view = devices_view(inp)
    states = {view["holders"][h]["key"]: view["holders"][h]["state"] for *_, h, _, _ in view["held"]}
    assert states == {"team/victim": "evicting", "ops/debug-claim": "claim"}
    starts = {name: (start, size) for _, start, size, _, name, _ in view["held"]}
    assert starts == {"gpu-0-mig-3g-71gb-4": (4, 4), "gpu-0-mig-1g-18gb-0": (0, 1)}
    cards = {c[1]: c for _, cs in view["layout"]["nodes"] for c in cs}
    assert cards["gpu-1"][3] == 1 and cards["gpu-0"][3] == 0  # tainted card marked
    detail = device_detail(inp, (drv, "h200-0", "gpu-1"))
    assert detail is not None and detail["taints"] == [taint] and detail["holder"] is None
    held = device_detail(inp, (drv, "h200-0", "gpu-0-mig-3g-71gb-4"))
    assert (
        held is not None
        and held["holder"]["state"] == "evicting"
        and held["holder"]["pod"] == "victim-main-0"
    )
    assert held["sameCard"] == [
        {"start": 0, "device": f"{drv}/h200-0/gpu-0-mig-1g-18gb-0", "holder": "ops/debug-claim"}
    ]
    # the whole GPU's card lists every device of it: held, blocked by a held memory slice, or free
    whole = device_detail(inp, (drv, "h200-0", "gpu-0"))
    assert whole is not None
    on = {o["name"]: (o["state"], o["holder"]) for o in whole["onCard"]}
    assert on["gpu-0"] == ("blocked", None)
    assert on["gpu-0-mig-3g-71gb-4"] == ("held", "team/victim")
    assert on["gpu-0-mig-3g-71gb-0"] == ("blocked", None)  # slices 0-3: the 1g at 0 holds slice 0
    assert on["gpu-0-mig-1g-18gb-1"] == ("free", None)
    assert len(on) == 1 + sum(len(p["placementStarts"]) for p in hw["profiles"])
