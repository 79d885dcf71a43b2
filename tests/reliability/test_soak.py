"""A short soak (bench/soak.py, 80 Jobs with preemption and TTL deletion): the ledger is consistent at
the end, no asyncio task is leaked, memory does not balloon. The same with the controller alone in its
own process (``queueing run``, 30 Jobs): its RSS, threads and open files are read from /proc.
``python bench/soak.py --jobs 2000`` and ``python bench/soak.py --separate --jobs 2000`` for the long
runs (figures in docs/reliability.md)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SOAK = Path(__file__).resolve().parents[2] / "bench" / "soak.py"


@pytest.fixture(scope="module")
def bench_soak() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_soak", SOAK)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # (dataclasses look their module up)
    spec.loader.exec_module(mod)
    return mod


async def test_short_soak(bench_soak: ModuleType) -> None:
    r = await bench_soak.soak(jobs=80, warmup=30)
    print("\n" + r.summary())
    assert not r.problems
    assert r.admissions >= 80
    # the same controller tasks run after warm-up and at the last Job (informers, loop): no leak
    assert r.tasks_running <= r.tasks_warm + 2, (r.tasks_warm, r.tasks_running)
    assert r.rss_running_mb < r.rss_warm_mb + 60


async def test_short_soak_with_the_controller_in_its_own_process(bench_soak: ModuleType) -> None:
    r = await bench_soak.soak(jobs=30, warmup=10, separate=True)
    print("\n" + r.summary())
    assert not r.problems  # includes a clean exit (0) of `queueing run` on SIGTERM
    assert r.admissions >= 30
    c = r.child
    assert set(c) == {"start", "warm", "middle", "end"}
    assert 20 < c["start"]["VmRSS"] <= c["end"]["VmHWM"]  # a Python process with its imports, measured
    assert c["end"]["VmRSS"] < c["warm"]["VmRSS"] + 40
    # no thread or connection piling up (a few may come and go with the HTTP client's pool)
    assert c["end"]["Threads"] <= c["warm"]["Threads"] + 2
    assert c["end"]["fds"] <= c["warm"]["fds"] + 8
