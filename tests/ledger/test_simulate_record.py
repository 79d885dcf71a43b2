"""``queueing simulate --ledger``: the Cohorts' own quotas and parents reach the ledger, so every
admission of a hierarchical scenario is recorded; a write the ledger refuses is an error (exit 2, one
line naming the event), not a warning."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import func, select

from queueing.cli import main
from queueing.ledger import models as m
from queueing.ledger.migrate import upgrade_async
from queueing.ledger.repository import Ledger
from queueing.ledger.state import (
    AdmissionRequest,
    Charge,
    ClusterQueueSpec,
    CohortSpec,
    LocalQueueSpec,
    QuotaSpec,
    WorkloadSpec,
)
from tests.simulate.scenario_builder import (
    GPU,
    cluster,
    cluster_queue,
    cohort,
    flavor,
    job,
    local_queue,
    template,
    write,
)

from .scenario import Q


def hierarchical(tmp_path: Path) -> Path:
    """root (own 8 GPUs) <- team (no quota) <- cq (0 GPUs): every GPU is the root cohort's own."""
    d = tmp_path / "scenario"
    d.mkdir()
    team = cohort("team")
    team["spec"]["parentName"] = "root"
    write(d / "a-cluster.yaml", cluster(1))
    queues = [flavor(), cohort("root", 8), team, cluster_queue("cq", 0, cohort="team")]
    write(d / "b-queues.yaml", [*queues, local_queue("ml", "lq", "cq"), template("ml", 4)])
    write(d / "c-jobs.yaml", [job("ml", "one", gpus=4), job("ml", "two", gpus=4, arrival="30s")])
    return d


def simulate(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(["simulate", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


async def admissions_and_cohorts(url: str) -> tuple[int, dict[str, CohortSpec]]:
    led = Ledger.from_url(url)
    try:
        async with led.engine.connect() as c:
            n = (await c.execute(select(func.count()).select_from(m.Admission))).scalar_one()
        return int(n), await led.cohorts()
    finally:
        await led.close()


def test_a_cohort_tree_with_its_own_quota_is_recorded_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}"
    rc, out, err = simulate(capsys, "-f", str(hierarchical(tmp_path)), "--ledger", url)
    assert rc == 0, err
    assert "warning" not in err and "recorded run" in err
    assert sum('"event": "Admitted"' in line for line in out.splitlines()) == 2
    n, cohorts = asyncio.run(admissions_and_cohorts(url))
    assert n == 2  # both admissions, though the ClusterQueue itself has no quota
    assert cohorts["team"] == CohortSpec("team", "root")
    assert cohorts["root"] == CohortSpec("root", None, (QuotaSpec("h200", GPU, Q("8")),))


async def seed_a_full_tree(url: str) -> None:
    """The same tree, its 8 GPUs all taken by a workload the simulation does not know."""
    led = Ledger.from_url(url)
    try:
        await upgrade_async(led.engine)
        await led.upsert_cohort(CohortSpec("team", "root"), at=0)
        await led.upsert_cohort(CohortSpec("root", None, (QuotaSpec("h200", GPU, Q("8")),)), at=0)
        await led.upsert_cluster_queue(
            ClusterQueueSpec("cq", (QuotaSpec("h200", GPU, Q("0")),), "team"), at=0
        )
        await led.upsert_local_queue(LocalQueueSpec("other", "lq", "cq"), at=0)
        await led.add_workload(WorkloadSpec("before", "other", "before", "lq"), at=0)
        await led.admit(AdmissionRequest("before", "cq", (Charge("h200", GPU, Q("8")),)), at=0)
    finally:
        await led.close()


def test_a_refused_write_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}"
    asyncio.run(seed_a_full_tree(url))
    rc, _, err = simulate(capsys, "-f", str(hierarchical(tmp_path)), "--ledger", url)
    assert rc == 2
    assert "warning" not in err and "recorded run" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith(
        f"error: --ledger {url}: ledger refused Admitted of ml/one at 0s: "
        "ClusterQueue cq (cohort team): insufficient unused quota for gpu.nvidia.com in flavor h200"
    ), err


def test_two_runs_of_one_scenario_go_into_one_ledger(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each run's workloads get their own UIDs (from the run id): the second run is recorded too."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}"
    d = hierarchical(tmp_path)
    for _ in range(2):
        rc, _, err = simulate(capsys, "-f", str(d), "--ledger", url)
        assert rc == 0, err
    n, _ = asyncio.run(admissions_and_cohorts(url))
    assert n == 4
