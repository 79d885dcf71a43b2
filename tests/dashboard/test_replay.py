"""``queueing simulate --serve``: the demo scenario replayed in headless Chromium. At every time the
slider picks, the device map holds exactly the jobs the run's own event stream (``-o json`` on stdout)
says are running then, each on the nodes its ``Admitted`` event names."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.dashboard.conftest import REPO

VIEWPORT = {"width": 1280, "height": 820}


def running_at(events: list[dict[str, Any]], t: float) -> dict[str, set[str]]:
    """job -> nodes of the jobs running at ``t`` according to the event stream."""
    out: dict[str, set[str]] = {}
    for e in events:
        if e.get("event") == "Summary" or e["time"] > t:
            continue
        if e["event"] == "Admitted":
            out[e["job"]] = set(e["nodes"])
        elif e["event"] in ("Evicted", "Finished"):
            out.pop(e["job"], None)
    return out


async def test_simulate_serve_replays_the_run_with_a_time_slider(browser: Any, shots: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "queueing", "simulate", "-f", str(REPO / "examples" / "simulate"),
        "--serve", "127.0.0.1:0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=REPO,
    )  # fmt: skip
    try:
        assert proc.stderr is not None and proc.stdout is not None
        line = b""
        while b"dashboard:" not in line:
            line = await asyncio.wait_for(proc.stderr.readline(), 120)
            assert line, "queueing simulate --serve ended before serving"
        m = re.search(rb"http://[^ ]+:(\d+)/", line)
        assert m, line
        url = f"http://127.0.0.1:{int(m.group(1))}"
        # stdout is complete before the server starts (the run is finished)
        events: list[dict[str, Any]] = []
        while not events or events[-1].get("event") != "Summary":  # the last line
            out = await asyncio.wait_for(proc.stdout.readline(), 30)
            assert out, "no Summary line on stdout"
            events.append(json.loads(out))
        times = sorted({e["time"] for e in events if e.get("event") != "Summary"})
        assert len(times) > 5

        page = await browser.new_page(viewport=VIEWPORT)
        await page.goto(f"{url}/devices?t=0")
        await page.wait_for_selector(".card")
        checked = 0
        for t in [times[0], times[len(times) // 2], times[-1]]:
            # move the slider as a user does: the page fetches the state at that virtual time
            await page.evaluate(
                "(t) => { const s = document.getElementById('slider'); s.value = t; s.dispatchEvent(new Event('input')); }",
                t,
            )
            expect = running_at(events, t)
            await page.wait_for_function(
                """([t, want]) => document.getElementById('t').textContent == String(t) &&
                     JSON.stringify([...new Set([...document.querySelectorAll('[data-holder]')].map(e => e.dataset.holder))].sort())
                       === JSON.stringify(want)""",
                arg=[t, sorted(expect)],
                timeout=60000,
            )
            drawn = await page.evaluate(
                """() => { const o = {}; for (const e of document.querySelectorAll('[data-holder]')) {
                       (o[e.dataset.holder] = o[e.dataset.holder] || new Set()).add(e.closest('.node').dataset.node); }
                     return Object.fromEntries(Object.entries(o).map(([k, v]) => [k, [...v].sort()])); }"""
            )
            assert drawn == {k: sorted(v) for k, v in expect.items()}, t
            checked += bool(expect)
            if t == times[len(times) // 2]:
                await page.screenshot(path=str(shots / "dashboard-replay.png"))
        assert checked >= 2  # the checks saw running jobs
        # the step buttons walk the run's event times
        await page.click("#next")
        await page.wait_for_function("() => document.getElementById('t').textContent !== ''")
        await page.close()
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        rc = await asyncio.wait_for(proc.wait(), 30)
    assert rc == 0


def test_simulate_serve_rejects_a_bad_address_before_the_run(capsys: pytest.CaptureFixture[str]) -> None:
    from queueing.cli import main

    assert main(["simulate", "-f", str(REPO / "examples" / "simulate"), "--serve", "8082"]) == 2
    out, err = capsys.readouterr()
    assert err.strip() == "error: --serve 8082: bind address '8082' is not HOST:PORT or :PORT"
    assert out == ""  # nothing simulated
