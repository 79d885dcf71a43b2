"""The dashboard of a running controller in real headless Chromium: a gang admitted in the cluster
appears on the device map on its planned GPUs, a MIG instance is drawn at its start position on its
card's memory slices, a click shows the device and its claim, a preemption moves the colours; the
screenshots in docs/dashboard.md are taken here."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from queueing.kube.client import JOBS, KubeClient
from queueing.testing import Emulator
from queueing.testing.cluster import StandIns
from tests.controller.conftest import eventually
from tests.controller.test_admission import cond, workload
from tests.dashboard.conftest import MIG_NODE, Live, gpu_job

VIEWPORT = {"width": 1280, "height": 820}


def plan_devices(wl: dict[str, Any]) -> list[str]:
    return [
        f"{d['driver']}/{d['pool']}/{d['device']}"
        for psa in wl["status"]["admission"]["podSetAssignments"]
        for p in psa["placements"]
        for c in p["claims"]
        for d in c["devices"]
    ]


def admitted(emu: Emulator, name: str) -> dict[str, Any] | None:
    wl = workload(emu, name)
    c = cond(wl, "QuotaReserved")
    return wl if c is not None and c["status"] == "True" and wl and wl["status"].get("admission") else None


async def holders_of(page: Any, devices: list[str]) -> dict[str, str | None]:
    return await page.evaluate(
        """(devs) => Object.fromEntries(devs.map((d) => {
             const e = document.querySelector(`[data-device="${d}"]`);
             return [d, e ? e.dataset.holder : null];
           }))""",
        devices,
    )


async def wait_holders(page: Any, devices: list[str], holder: str, timeout_ms: float = 60000) -> float:
    """Seconds until every device is drawn with ``holder`` (a generous deadline, never a fixed sleep)."""
    t0 = time.monotonic()
    await page.wait_for_function(
        """([devs, who]) => devs.every((d) => {
             const e = document.querySelector(`[data-device="${d}"]`);
             return e && e.dataset.holder === who;
           })""",
        arg=[devices, holder],
        timeout=timeout_ms,
        polling=50,
    )
    return time.monotonic() - t0


async def device_map(live: Live, browser: Any) -> Any:
    """The controller started, its device map open in a new page."""
    await live.start()
    page = await browser.new_page(viewport=VIEWPORT)
    await page.goto(f"{live.url}/devices")
    await page.wait_for_selector(f'.node[data-node="{MIG_NODE}"] .card')
    return page


async def test_device_map_follows_the_cluster(
    emu: Emulator, admin: KubeClient, live: Live, cluster: StandIns, browser: Any, shots: Path
) -> None:
    page = await device_map(live, browser)

    # a gang of two pods x 4 whole GPUs: on the map on exactly its planned GPUs
    await admin.create(JOBS, gpu_job("train", "gpus-4", "training", parallelism=2))
    wl = await eventually(lambda: admitted(emu, "job-train"), "train admitted", timeout=60)
    devices = plan_devices(wl)
    assert len(devices) == 8
    seen_after = await wait_holders(page, devices, "default/job-train")
    print(f"gang on the device map {seen_after:.2f}s after its admission was seen in the cluster")
    drawn = await page.eval_on_selector_all(
        '[data-holder="default/job-train"]', "els => els.map(e => e.dataset.device).sort()"
    )
    assert drawn == sorted(devices)  # on the planned GPUs and nowhere else

    # a MIG instance: drawn at its placement start, spanning its memory slices of the parent GPU
    await admin.create(JOBS, gpu_job("mig-3g", "mig-3g", "inference"))
    mwl = await eventually(lambda: admitted(emu, "job-mig-3g"), "mig job admitted", timeout=60)
    (mig,) = plan_devices(mwl)
    await wait_holders(page, [mig], "default/job-mig-3g")
    slice_obj = next(s for s in emu_slices(emu) if s["spec"]["nodeName"] == MIG_NODE)
    dev = next(d for d in slice_obj["spec"]["devices"] if d["name"] == mig.split("/")[-1])
    start = dev["attributes"]["placementStart"]["int"]
    size = dev["attributes"]["placementSize"]["int"]
    geo = await page.evaluate(
        """(d) => { const e = document.querySelector(`[data-device="${d}"]`);
                    const c = e.closest('.card'); const a = e.getBoundingClientRect(), b = c.getBoundingClientRect();
                    const cs = getComputedStyle(c);
                    const inner = b.width - parseFloat(cs.borderLeftWidth) - parseFloat(cs.borderRightWidth);
                    return {start: +e.dataset.start, size: +e.dataset.size, n: +c.style.getPropertyValue('--n'),
                            left: a.left - b.left - parseFloat(cs.borderLeftWidth), width: a.width, inner}; }""",
        mig,
    )
    assert (geo["start"], geo["size"], geo["n"]) == (start, size, 8)
    cell = geo["inner"] / 8
    assert abs(geo["left"] - start * cell) <= 1.0 and abs(geo["width"] - size * cell) <= 1.0, geo

    # a click shows the device: attributes, capacity and the claim that holds it
    await page.click(f'[data-device="{mig}"]')
    await page.wait_for_selector(f'#detail h3[data-detail="{mig}"]')
    text = await page.inner_text("#detail")
    assert "default/job-mig-3g" in text and "3g.71gb" in text and "placementStart" in text
    assert "memory slices" in text
    # for the screenshots: a second MIG instance on the card, and a gang that waits for quota
    await admin.create(JOBS, gpu_job("mig-1g", "mig-1g", "inference"))
    (mig1,) = plan_devices(await eventually(lambda: admitted(emu, "job-mig-1g"), "1g admitted", timeout=60))
    await wait_holders(page, [mig1], "default/job-mig-1g")
    await admin.create(JOBS, gpu_job("big", "gpus-8", "training", parallelism=2))
    await eventually(
        lambda: (c := cond(workload(emu, "job-big"), "QuotaReserved")) and c["status"] == "False",
        "big waits",
        timeout=60,
    )
    await page.screenshot(path=str(shots / "dashboard-devices.png"))

    # the other pages, with the same state
    for name in ("queues", "workloads", "history"):
        await page.goto(f"{live.url}/{name}")
        await page.wait_for_selector("main h1")
        if name == "queues":
            await page.wait_for_selector('.cq[data-cq="training"] [data-admitted]')
            assert await page.inner_text('.cq[data-cq="training"] [data-admitted]') == "1"
            await page.wait_for_function(  # the page follows within a poll or two: big waits there
                """() => document.querySelector('.cq[data-cq="training"] [data-pending]').textContent === "1" """,
                timeout=60000,
            )
        if name == "workloads":
            await page.wait_for_selector('#admitted tr[data-workload="default/job-train"]')
            row = await page.wait_for_selector('#pending tr[data-workload="default/job-big"]')
            assert row is not None and "1 / 1" in await row.inner_text()  # its position, with its reason
        if name == "history":
            await page.wait_for_selector('#events tr[data-event="Admitted"]')
        await page.screenshot(path=str(shots / f"dashboard-{name}.png"), full_page=name != "history")
    await page.close()


def emu_slices(emu: Emulator) -> list[dict[str, Any]]:
    return emu.store.list(emu.store.resource("resourceslices", "resource.k8s.io"), None, None)[0]


async def test_a_preemption_moves_the_colours(
    emu: Emulator, admin: KubeClient, live: Live, cluster: StandIns, browser: Any
) -> None:
    page = await device_map(live, browser)
    # the low-priority gang takes all 16 whole GPUs (training borrows 8 from its cohort)
    await admin.create(JOBS, gpu_job("low", "gpus-8", "training", parallelism=2, priority="low"))
    low = plan_devices(await eventually(lambda: admitted(emu, "job-low"), "low admitted", timeout=60))
    await wait_holders(page, low, "default/job-low")
    before = await colours(page, low)
    # a high-priority gang of the same queue needs them: low is evicted, high lands on its GPUs
    await admin.create(JOBS, gpu_job("high", "gpus-8", "training", parallelism=2, priority="high"))
    high = plan_devices(await eventually(lambda: admitted(emu, "job-high"), "high admitted", timeout=60))
    assert sorted(high) == sorted(low)
    await wait_holders(page, high, "default/job-high")
    after = await colours(page, high)
    assert all(before[d] != after[d] for d in high)  # every GPU changed colour
    legend = await page.evaluate(
        """() => Object.fromEntries([...document.querySelectorAll('.leg[data-legend]')].map(
             (e) => [e.dataset.legend, getComputedStyle(e.querySelector('.swatch')).backgroundColor]))"""
    )
    assert set(after.values()) == {legend["default/job-high"]}  # the holder's colour in the legend
    assert "default/job-low" not in legend
    # the Workloads page shows low pending again, with its reason
    await page.goto(f"{live.url}/workloads")
    row = await page.wait_for_selector('#pending tr[data-workload="default/job-low"]')
    assert row is not None and "1 / 1" in await row.inner_text()
    await page.close()


async def colours(page: Any, devices: list[str]) -> dict[str, str]:
    return await page.evaluate(
        """(devs) => Object.fromEntries(devs.map((d) => [d,
             getComputedStyle(document.querySelector(`[data-device="${d}"]`)).backgroundColor]))""",
        devices,
    )
