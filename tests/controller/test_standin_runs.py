"""The stand-in cluster of ``queueing/testing/cluster.py`` runs work for its
``simulate.queueing.dra.io/duration``: pods run and succeed (full), or, with ``pods=False`` (Kueue's
performance-test method), an unsuspended Job completes without pods. Through the controller, the
Workload finishes and its quota is released in the ledger, without the test finishing anything."""

from __future__ import annotations

from typing import Any

from queueing.kube.client import JOBS, KubeClient
from queueing.ledger.repository import Ledger
from queueing.testing import Emulator
from queueing.testing.cluster import DURATION_ANNOTATION, StandIns, duration_of
from tests.controller.conftest import Harness, eventually, job
from tests.controller.test_admission import is_true, job_pods, workload


def timed_job(name: str, duration: str, *, on_template: bool = False, parallelism: int = 1) -> dict[str, Any]:
    j = job(name, parallelism=parallelism)
    target = j["spec"]["template"] if on_template else j
    target.setdefault("metadata", {}).setdefault("annotations", {})[DURATION_ANNOTATION] = duration
    return j


def test_duration_annotation() -> None:
    assert duration_of(timed_job("a", "1.5s")) == 1.5
    assert duration_of(timed_job("a", "2m")) == 120.0
    assert duration_of(timed_job("a", "soon")) is None  # unreadable: runs until told otherwise
    assert duration_of(job("a")) is None


async def test_pods_run_for_their_duration_and_the_job_finishes(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns, ledger: Ledger
) -> None:
    await harness.start()
    await admin.create(JOBS, timed_job("short", "0.2s", on_template=True, parallelism=2))
    await admin.create(JOBS, job("forever"))  # no duration: runs until finish_pods
    await eventually(lambda: is_true(workload(emu, "job-short"), "Finished"), "the Workload finishes", 60)
    pods = job_pods(emu, "short")
    assert len(pods) == 2 and {p["status"]["phase"] for p in pods} == {"Succeeded"}
    state = await ledger.load_state()
    assert workload(emu, "job-short")["metadata"]["uid"] not in state.admissions  # quota released
    await eventually(lambda: is_true(workload(emu, "job-forever"), "Admitted"), "the other one runs")
    assert {p["status"]["phase"] for p in job_pods(emu, "forever")} == {"Running"}
    assert not cluster.errors


async def test_without_pods_an_admitted_job_completes_after_its_duration(
    emu: Emulator, admin: KubeClient, harness: Harness, ledger: Ledger
) -> None:
    finished: list[str] = []
    async with StandIns(
        emu, pods=False, on_job_finished=lambda j: finished.append(j["metadata"]["name"])
    ) as s:
        await harness.start()
        await admin.create(JOBS, timed_job("quick", "0.1s", parallelism=2))
        await eventually(lambda: is_true(workload(emu, "job-quick"), "Finished"), "the Workload finishes", 60)
        assert finished == ["quick"]
        assert job_pods(emu, "quick") == []  # Kueue's method: no pods at all
        assert s.pods_created == 0 and not s.errors
