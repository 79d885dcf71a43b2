"""The dashboard `queueing dev` serves, in headless Chromium: a gang applied with real kubectl to the
example cluster appears on the device map on exactly the GPUs its plan names (issue #23)."""

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
GANG = ROOT / "examples" / "jobs" / "gang-training.yaml"


def _admitted(kubectl: list[str], name: str) -> dict[str, Any] | None:
    r = subprocess.run(
        [*kubectl, "-n", "team-a", "get", "workloads", "-o", "json"], capture_output=True, text=True
    )
    if r.returncode != 0:
        return None
    for wl in json.loads(r.stdout)["items"]:
        owners = [o["name"] for o in wl["metadata"].get("ownerReferences") or []]
        if name in owners and (wl.get("status") or {}).get("admission"):
            return dict(wl)
    return None


async def test_a_gang_applied_in_queueing_dev_is_drawn_on_its_planned_gpus(
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

        # the example gang, running long enough to be looked at
        docs = [d for d in yaml.safe_load_all(GANG.read_text()) if d]
        for d in docs:
            if d["kind"] == "Job":
                d["metadata"]["name"] = "long-gang"
                d["metadata"]["annotations"]["simulate.queueing.dra.io/duration"] = "10m"
        (tmp_path / "gang.yaml").write_text(yaml.safe_dump_all(docs))
        subprocess.run(
            [*kubectl, "apply", "-f", str(tmp_path / "gang.yaml")], check=True, capture_output=True
        )
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
    finally:
        if dev.poll() is None:
            dev.send_signal(signal.SIGINT)
            try:
                dev.wait(60)
            except subprocess.TimeoutExpired:
                dev.kill()
                dev.wait(10)
        log.close()
