"""``bench/e2e.py`` runs as documented (docs/performance.md): Kueue's baseline shape, scaled down to
30 Jobs, through a real ``queueing run`` process with its ledger on PostgreSQL, in both modes; every
Job finishes and the report carries each figure the issue asks for."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

E2E = Path(__file__).resolve().parents[2] / "bench" / "e2e.py"


@pytest.mark.postgres
@pytest.mark.parametrize("mode", ["kueue", "full"])
def test_e2e_bench_small(mode: str) -> None:
    out = subprocess.run(
        [sys.executable, str(E2E), "--mode", mode, "--fraction", "0.004", "--timeout", "240"],
        capture_output=True,
        text=True,
        timeout=400,
    )
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert re.search(r"^wall [\d.]+s, 30/30 finished", text, re.M), text
    assert re.search(r"^device utilisation [\d.]+% of 600 GPUs", text, re.M), text
    quota = re.search(r"^quota usage as Kueue's runner measures it .*: ([\d.]+)%$", text, re.M)
    # sampled from the ClusterQueues' status writes (at most one a second each): a 2 s run may see none
    assert quota and 0 <= float(quota.group(1)) <= 100, text
    assert re.search(r"^  per admission: .*\bcreate workloads 1\.00\b", text, re.M), text  # one per Job
    assert re.search(r"^30 admissions \(30 workloads\)", text, re.M), text
    assert re.search(r"small +time to admission mean [\d.]+s, p90 [\d.]+s \(n=30\)", text), text
    m = re.search(
        r"API writes by the controller: (\d+) \(([\d.]+) per admission\); scheduling cycles (\d+)", text
    )
    assert m and int(m.group(1)) > 0 and int(m.group(3)) >= 1, text
    assert re.search(r"controller: [\d.]+s CPU during the run, peak RSS \d+ MiB", text), text
    m = re.search(
        r"^machine: ([\d.]+)s CPU busy over (\d+) cores .*per admission: controller ([\d.]+) ms, "
        r"bench process ([\d.]+) ms, whole machine ([\d.]+) ms: at most (\d+) admissions/s on \d+ cores, "
        r"(\d+)/s through the controller and (\d+)/s through the bench process",
        text,
        re.M,
    )
    # the machine's busy time holds at least the two processes' own
    assert m and float(m.group(5)) >= max(float(m.group(3)), float(m.group(4))), text


def test_controller_path_bench_small() -> None:
    """``bench/controller_path.py`` (in ``make bench``) runs and checks its old-path decisions."""
    bench = E2E.parent / "controller_path.py"
    out = subprocess.run(
        [sys.executable, str(bench), "--nodes", "20", "--decisions", "10", "--old", "2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"cycle +p50 +[\d.]+ ms", out.stdout), out.stdout
