"""The metrics facade and the HTTP endpoints, scraped over real HTTP."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from queueing.api.quantity import Quantity
from queueing.controller.http import ControllerHTTP, parse_bind_address
from queueing.controller.metrics import METRICS, PREFIX, ControllerMetrics

DOCS = Path(__file__).resolve().parents[2] / "docs"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@pytest.fixture
async def served() -> AsyncIterator[tuple[ControllerMetrics, ControllerHTTP, aiohttp.ClientSession]]:
    metrics = ControllerMetrics()
    server = ControllerHTTP(metrics)
    await server.start("127.0.0.1:0", "127.0.0.1:0")
    async with aiohttp.ClientSession() as session:
        yield metrics, server, session
    await server.stop()


async def scrape(server: ControllerHTTP, session: aiohttp.ClientSession) -> str:
    async with session.get(f"http://127.0.0.1:{server.metrics_port}/metrics") as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=")
        return await r.text()


async def test_scraped_counters_move(
    served: tuple[ControllerMetrics, ControllerHTTP, aiohttp.ClientSession],
) -> None:
    metrics, server, session = served
    assert server.metrics_port != server.health_port  # two listeners, as deployed (8080 / 8081)
    before = samples(await scrape(server, session))
    # every metric is declared (HELP/TYPE) even before anything happened
    text = await scrape(server, session)
    for spec in METRICS:
        assert f"# TYPE {PREFIX}{spec.name} {spec.type}" in text
    assert ("queueing_admitted_workloads_total", (("cluster_queue", "team-a"),)) not in before

    metrics.admission_attempt("success", seconds=0.004)
    metrics.admission_attempt("success", seconds=0.3)
    metrics.admission_attempt("inadmissible", seconds=0.002)
    metrics.quota_reserved("team-a", wait_seconds=12)
    metrics.admitted("team-a", wait_seconds=12)
    metrics.admitted("team-a", wait_seconds=700)
    metrics.evicted("team-a", "Preempted")
    metrics.preempted("team-b", "InCohortReclamation")
    metrics.set_pending("team-a", active=3, inadmissible=1)
    metrics.set_usage("team-a", "h200", "gpu.nvidia.com", 8)
    metrics.set_usage("team-a", "h200", "memory", Quantity.parse("64Gi"))
    metrics.set_nominal_quota("team-a", "h200", "gpu.nvidia.com", 16)
    metrics.set_weighted_share("team-a", 0.25)
    with metrics.time_allocator() as t:
        t.allocated = False
    metrics.set_leader("queueing-controller", True)

    after = samples(await scrape(server, session))
    cq = (("cluster_queue", "team-a"),)
    assert after[("queueing_admission_attempts_total", (("result", "success"),))] == 2
    assert after[("queueing_admission_attempts_total", (("result", "inadmissible"),))] == 1
    assert after[("queueing_admission_attempt_duration_seconds_count", (("result", "success"),))] == 2
    assert after[("queueing_admission_attempt_duration_seconds_sum", (("result", "success"),))] == 0.304
    # 0.004 s falls in the 4 ms bucket (le is inclusive), 0.3 s only from 512 ms up
    assert (
        after[
            ("queueing_admission_attempt_duration_seconds_bucket", (("le", "0.004"), ("result", "success")))
        ]
        == 1
    )
    assert (
        after[
            ("queueing_admission_attempt_duration_seconds_bucket", (("le", "0.512"), ("result", "success")))
        ]
        == 2
    )
    assert after[("queueing_admitted_workloads_total", cq)] == 2
    assert after[("queueing_quota_reserved_workloads_total", cq)] == 1
    assert after[("queueing_admission_wait_time_seconds_count", cq)] == 2
    assert after[("queueing_admission_wait_time_seconds_sum", cq)] == 712
    assert after[("queueing_admission_wait_time_seconds_bucket", (*cq, ("le", "16.0")))] == 1
    assert after[("queueing_evicted_workloads_total", (*cq, ("reason", "Preempted")))] == 1
    assert (
        after[
            (
                "queueing_preempted_workloads_total",
                (("preempting_cluster_queue", "team-b"), ("reason", "InCohortReclamation")),
            )
        ]
        == 1
    )
    assert after[("queueing_pending_workloads", (*cq, ("status", "active")))] == 3
    assert after[("queueing_pending_workloads", (*cq, ("status", "inadmissible")))] == 1
    usage = "queueing_cluster_queue_resource_usage"
    assert after[(usage, (*cq, ("flavor", "h200"), ("resource", "gpu.nvidia.com")))] == 8
    assert after[(usage, (*cq, ("flavor", "h200"), ("resource", "memory")))] == 64 * 2**30
    assert after[("queueing_cluster_queue_weighted_share", cq)] == 0.25
    assert after[("queueing_allocator_duration_seconds_count", (("result", "unsatisfiable"),))] == 1
    assert after[("queueing_leader_election_master_status", (("name", "queueing-controller"),))] == 1

    # counters only go up between scrapes
    metrics.admitted("team-a")
    again = samples(await scrape(server, session))
    assert again[("queueing_admitted_workloads_total", cq)] == 3
    assert again[("queueing_admission_wait_time_seconds_count", cq)] == 2  # no wait time given


async def test_own_registry_not_the_global_one() -> None:
    a, b = ControllerMetrics(), ControllerMetrics()  # no "Duplicated timeseries" error
    a.admitted("q")
    assert a.value("queueing_admitted_workloads_total", {"cluster_queue": "q"}) == 1
    assert b.value("queueing_admitted_workloads_total", {"cluster_queue": "q"}) is None
    assert REGISTRY.get_sample_value("queueing_admitted_workloads_total", {"cluster_queue": "q"}) is None


async def test_clear_cluster_queue_removes_its_series() -> None:
    m = ControllerMetrics()
    m.admitted("gone", wait_seconds=1)
    m.evicted("gone", "PodsReadyTimeout")
    m.set_usage("gone", "f", "gpu", 1)
    m.set_pending("gone", active=1, inadmissible=0)
    m.admitted("kept")
    m.clear_cluster_queue("gone")
    text = m.exposition().decode()
    assert 'cluster_queue="gone"' not in text
    assert 'cluster_queue="kept"' in text
    m.clear_cluster_queue("never-seen")  # no error


async def test_readyz_flips_with_the_ready_callable(
    served: tuple[ControllerMetrics, ControllerHTTP, aiohttp.ClientSession],
) -> None:
    _, server, session = served
    state = {"synced": False}
    server.add_ready_check("informers", lambda: None if state["synced"] else "caches not synced")
    base = f"http://127.0.0.1:{server.health_port}"
    async with session.get(base + "/healthz") as r:
        assert (r.status, await r.text()) == (200, "ok\n")
    async with session.get(base + "/readyz") as r:
        assert (r.status, await r.text()) == (503, "informers: caches not synced\n")
    state["synced"] = True
    async with session.get(base + "/readyz") as r:
        assert (r.status, await r.text()) == (200, "ok\n")

    async def ledger() -> str | None:
        raise ConnectionError("database unreachable")

    server.add_ready_check("ledger", ledger)  # async checks; an exception fails the check
    async with session.get(base + "/readyz") as r:
        assert r.status == 503
        assert await r.text() == "ledger: check failed (ConnectionError)\n"  # no exception text
    # the probes are not on the metrics port and /metrics is not on the probe port
    async with session.get(f"http://127.0.0.1:{server.metrics_port}/readyz") as r:
        assert r.status == 404
    async with session.get(base + "/metrics") as r:
        assert r.status == 404


async def test_one_listener_when_the_addresses_are_equal() -> None:
    m = ControllerMetrics()
    server = ControllerHTTP(m)
    # pick a free port first, then ask for the same address twice
    probe = ControllerHTTP(m)
    await probe.start("127.0.0.1:0", "127.0.0.1:0")
    port = probe.metrics_port
    await probe.stop()
    await server.start(f"127.0.0.1:{port}", f"127.0.0.1:{port}")
    try:
        assert server.metrics_port == server.health_port == port
        async with aiohttp.ClientSession() as s:
            for path in ("/metrics", "/healthz", "/readyz"):
                async with s.get(f"http://127.0.0.1:{port}{path}") as r:
                    assert r.status == 200, path
    finally:
        await server.stop()


def test_parse_bind_address() -> None:
    assert parse_bind_address(":8080") == (None, 8080)
    assert parse_bind_address("0.0.0.0:8081") == ("0.0.0.0", 8081)
    assert parse_bind_address("[::1]:9000") == ("::1", 9000)
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_bind_address("8080x")


def test_reference_lists_every_metric() -> None:
    """docs/operations-metrics.md names every metric with its type and labels."""
    text = (DOCS / "operations-metrics.md").read_text()
    rows = {
        m.group(1): m for m in re.finditer(r"^\| `(queueing_[a-z_]+)` \| (\w+) \| ([^|]*) \|", text, re.M)
    }
    assert set(rows) == {PREFIX + s.name for s in METRICS}
    for spec in METRICS:
        row = rows[PREFIX + spec.name]
        assert row.group(2) == spec.type
        assert re.findall(r"`(\w+)`", row.group(3)) == list(spec.labels)
    # the alert examples in docs/operations.md use only metrics that exist, with their labels
    ops = (DOCS / "operations.md").read_text()
    used = set(re.findall(r"\b(queueing_[a-z_]+)", ops))
    known = {PREFIX + s.name for s in METRICS} | {
        PREFIX + s.name + suffix
        for s in METRICS
        if s.type == "histogram"
        for suffix in ("_bucket", "_sum", "_count")
    }
    assert used and used <= known
