"""The dashboard `queueing dev` serves, in headless Chromium, while real kubectl drives the example
cluster (issue #23): a gang appears on the device map on exactly the GPUs its plan names, a MIG
instance is drawn at its placement start on its card's memory slices, and a preemption moves the
colours from the victim's GPUs to the preemptor's."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.controller.conftest import eventually
from tests.dashboard.test_live import VIEWPORT, plan_devices, wait_holders

ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "examples" / "jobs"


def long_running(kubectl: list[str], tmp_path: Path, example: str, name: str) -> None:
    """Apply ``examples/jobs/EXAMPLE`` with its Job renamed NAME and running long enough to look at."""
    docs = [d for d in yaml.safe_load_all((JOBS / example).read_text()) if d]
    for d in docs:
        if d["kind"] == "Job":
            d["metadata"]["name"] = name
            d["metadata"]["annotations"]["simulate.queueing.dra.io/duration"] = "10m"
    (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump_all(docs))
    subprocess.run([*kubectl, "apply", "-f", str(tmp_path / f"{name}.yaml")], check=True, capture_output=True)


def _admitted(kubectl: list[str], name: str, ns: str = "team-a") -> dict[str, Any] | None:
    r = subprocess.run([*kubectl, "-n", ns, "get", "workloads", "-o", "json"], capture_output=True, text=True)
    if r.returncode != 0:
        return None
    for wl in json.loads(r.stdout)["items"]:
        owners = [o["name"] for o in wl["metadata"].get("ownerReferences") or []]
        if name in owners and (wl.get("status") or {}).get("admission"):
            return dict(wl)
    return None


async def test_the_device_map_of_queueing_dev_follows_gangs_mig_and_a_preemption(
    tmp_path: Path, browser: Any
) -> None:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    log = open(tmp_path / "dev.log", "w")  # noqa: SIM115
    dev = subprocess.Popen(
        [sys.executable, "-m", "queueing", "dev", "--dir", str(tmp_path / "dev")],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=log, text=True,
    )  # fmt: skip
    try:
        assert dev.stdout is not None
        seen: list[str] = []
        while not (seen and seen[-1].startswith("Stop with Ctrl-C")):
            line = await asyncio.to_thread(dev.stdout.readline)
            assert line, (
                "queueing dev stopped:\n" + "".join(seen) + (tmp_path / "dev.log").read_text()[-3000:]
            )
            seen.append(line)
        url = next(s.split(": ", 1)[1].strip() for s in seen if s.startswith("dashboard (read-only): "))
        kubectl = ["kubectl", "--kubeconfig", str(tmp_path / "dev" / "kubeconfig")]

        long_running(kubectl, tmp_path, "gang-training.yaml", "long-gang")
        wl = await eventually(
            lambda: _admitted(kubectl, "long-gang"), "the gang admitted in queueing dev", 60
        )
        devices = plan_devices(wl)
        assert len(devices) == 2

        page = await browser.new_page(viewport=VIEWPORT)
        await page.goto(f"{url}devices")
        holder = f"team-a/{wl['metadata']['name']}"
        await wait_holders(page, devices, holder)
        drawn = await page.eval_on_selector_all(
            f'[data-holder="{holder}"]', "els => els.map(e => e.dataset.device).sort()"
        )
        assert drawn == sorted(devices)  # on the planned GPUs and nowhere else

        # a MIG instance: drawn at the placement start its slice publishes
        long_running(kubectl, tmp_path, "mig-job.yaml", "long-mig")
        mwl = await eventually(lambda: _admitted(kubectl, "long-mig", "team-b"), "the MIG Job admitted", 60)
        (mig,) = plan_devices(mwl)
        await wait_holders(page, [mig], f"team-b/{mwl['metadata']['name']}")
        slices = json.loads(subprocess.run([*kubectl, "get", "resourceslices", "-o", "json"], check=True,
                                           capture_output=True, text=True).stdout)["items"]  # fmt: skip
        driver, pool, name = mig.split("/", 2)[0], mig.split("/")[1], mig.split("/")[-1]
        (published,) = [
            d
            for sl in slices
            if sl["spec"]["driver"] == driver and sl["spec"]["pool"]["name"] == pool
            for d in sl["spec"]["devices"]
            if d["name"] == name
        ]
        drawn_at = await page.eval_on_selector(
            f'[data-device="{mig}"]', "e => [+e.dataset.start, +e.dataset.size, e.closest('.card') !== null]"
        )
        assert drawn_at == [
            published["attributes"]["placementStart"]["int"],
            published["attributes"]["placementSize"]["int"],
            True,
        ]

        # a preemption: team-a's research Job (3 GPUs) gives way to the production Job (4 GPUs)
        long_running(kubectl, tmp_path, "preemption-research.yaml", "long-research")
        rwl = await eventually(lambda: _admitted(kubectl, "long-research"), "the research Job admitted", 60)
        research = plan_devices(rwl)
        await wait_holders(page, research, f"team-a/{rwl['metadata']['name']}")
        long_running(kubectl, tmp_path, "preemption-production.yaml", "long-production")
        pwl = await eventually(
            lambda: _admitted(kubectl, "long-production"), "the production Job admitted", 90
        )
        production = plan_devices(pwl)
        await wait_holders(page, production, f"team-a/{pwl['metadata']['name']}")
        still = await page.eval_on_selector_all(
            f'[data-holder="team-a/{rwl["metadata"]["name"]}"]', "els => els.map(e => e.dataset.device)"
        )
        assert still == [], f"the victim's GPUs are still drawn as its own: {still}"
    finally:
        if dev.poll() is None:
            dev.send_signal(signal.SIGINT)
            try:
                dev.wait(60)
            except subprocess.TimeoutExpired:
                dev.kill()
                dev.wait(10)
        log.close()
