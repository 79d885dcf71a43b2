"""A short soak (bench/soak.py, 80 Jobs with preemption and TTL deletion): the ledger is consistent at
the end, no asyncio task is leaked, memory does not balloon. ``python bench/soak.py --jobs 2000``
for the long run (figures in docs/reliability.md)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SOAK = Path(__file__).resolve().parents[2] / "bench" / "soak.py"


async def test_short_soak() -> None:
    spec = importlib.util.spec_from_file_location("bench_soak", SOAK)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # (dataclasses look their module up)
    spec.loader.exec_module(mod)
    r = await mod.soak(jobs=80, warmup=30)
    print("\n" + r.summary())
    assert not r.problems
    assert r.admissions >= 80
    # the same controller tasks run after warm-up and at the last Job (informers, loop): no leak
    assert r.tasks_running <= r.tasks_warm + 2
    assert r.rss_running_mb < r.rss_warm_mb + 60
