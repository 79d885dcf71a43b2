"""``bench/placement.py`` and ``bench/mig_layout.py`` run as documented (docs/performance/placement.md,
docs/scheduling.md), scaled down: both policies replay the same jobs, the report carries each figure,
the MILP solves, required-rack gangs never span two racks, and the pictures are written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def run_placement(*args: str) -> str:
    """``bench/placement.py --quick ARGS``: its output (stdout and stderr); it must exit 0."""
    out = subprocess.run(
        [sys.executable, str(BENCH / "placement.py"), "--quick", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    return text


def test_placement_bench_small(tmp_path: Path) -> None:
    text = run_placement("--trace", "all", "--plots", str(tmp_path))
    assert re.search(r"^machine: reference loop [\d.]+s", text, re.M), text
    for trace in ("mixed", "alibaba", "rack", "mig"):
        for policy in ("FirstFit", "LeastFragmentation"):
            assert re.search(
                rf"^\[{trace}\] {policy} +stranded +[\d.]+ GPUs +admitted \d+ \(MIG \d+\) +utilisation +[\d.]+% "
                r"+placement CPU [\d.]+ ms/decision",
                text,
                re.M,
            ), text
        assert (tmp_path / f"placement-{trace}.png").stat().st_size > 0
    # the heavy-load MIG trace says how much MIG jobs waited (that the load saturates them)
    assert re.search(r"^\[mig\] FirstFit +MIG jobs waiting in \d+% of the samples", text, re.M), text
    assert re.search(r"^    g1 +n= *\d+ +mean wait +[\d.]+ min +p90 +[\d.]+ min", text, re.M), text
    for m in re.finditer(r"required-rack gangs (\d+), over two racks (\d+)", text):
        assert int(m.group(2)) == 0, text
    m = re.search(r"\[milp 2 nodes, \d+ jobs\] optimum ([\d.]+)% \(Optimal", text)
    assert m and float(m.group(1)) > 0, text


def test_placement_bench_seeds() -> None:
    """``--seeds``: every seed replayed under both policies, then each figure's mean and spread per
    policy and the paired change, and the 8-GPU waits pooled over the seeds."""
    text = run_placement("--trace", "mixed", "--seeds", "2", "--milp-nodes", "")
    for seed in (1, 2):
        assert re.search(
            rf"^\[mixed\] \d+ jobs over [\d.]+ h on 3 H200 nodes, load 1.3, seed {seed}$", text, re.M
        ), text
    assert re.search(r"^\[mixed\] summary over 2 seeds \(1 \.\. 2\)", text, re.M), text
    num = r"-?[\d.]+ ± +[\d.]+ \[-?[\d.]+ \.\. -?[\d.]+\]"
    for label in ("stranded GPUs", "admitted jobs", "utilisation %", "placement CPU \\(ms/decision\\)"):
        assert re.search(rf"^\[mixed\]   {label} +FirstFit +{num} +LeastFragmentation +{num}", text, re.M), (
            label,
            text,
        )
    assert re.search(
        r"g8 mean wait pooled over the seeds, with the unplaced: FirstFit [\d.]+ min \(n=\d+\)", text
    ), text


def test_placement_bench_reserve() -> None:
    """``--reserve``: both policies also replayed with whole-node reservation (the replay itself
    checks that no later job lands on a reserved node), each paired against FirstFit."""
    text = run_placement("--trace", "mixed", "--reserve", "--milp-nodes", "")
    for policy in ("FirstFit+reserve", "LeastFragmentation+reserve"):
        assert re.search(rf"^\[mixed\] {re.escape(policy)} +stranded +[\d.]+ GPUs", text, re.M), text
        assert re.search(rf"^\[mixed\] {re.escape(policy)} vs FirstFit: stranded", text, re.M), text


def test_mig_layout_picture(tmp_path: Path) -> None:
    png = tmp_path / "layout.png"
    out = subprocess.run(
        [sys.executable, str(BENCH / "mig_layout.py"), "--out", str(png)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "LeastFragmentation: 1g.18gb -> gpu-1-mig-1g-18gb-6" in out.stdout
    assert "LeastFragmentation: 4g.71gb -> gpu-1-mig-4g-71gb-0" in out.stdout
    assert "FirstFit: 4g.71gb -> gpu-2-mig-4g-71gb-0" in out.stdout
    assert png.stat().st_size > 0
