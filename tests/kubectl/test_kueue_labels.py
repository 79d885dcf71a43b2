"""`acceptKueueLabels`: with it the controller queues Jobs labelled the Kueue way
(`kueue.x-k8s.io/queue-name`, priority from `kueue.x-k8s.io/priority-class`); without it (the default)
it leaves them alone. deploy/overlays/kueue-labels' admission policy creates them suspended."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from queueing.api.core import Job
from queueing.config import Config
from queueing.kube.client import JOBS, KubeClient
from queueing.scheduling.jobs import WorkloadError, workload_for_job
from queueing.testing import Emulator
from queueing.testing.cluster import StandIns
from tests.controller.conftest import Harness, eventually, job
from tests.controller.test_admission import get, is_true, job_pods, running, workload
from tests.kubectl.conftest import priority_classes

REPO = Path(__file__).resolve().parents[2]


def kueue_job(name: str, priority: str | None = None, ours: str | None = None) -> dict[str, Any]:
    j = job(name, template="gpu-1")
    labels = {"kueue.x-k8s.io/queue-name": "lq"}
    if priority:
        labels["kueue.x-k8s.io/priority-class"] = priority
    if ours:
        labels["queueing.dra.io/queue-name"] = ours
    j["metadata"]["labels"] = labels
    return j


def test_the_label_lookup() -> None:
    plain = Job.model_validate(
        {**kueue_job("a", "high"), "metadata": {**kueue_job("a", "high")["metadata"], "uid": "u"}}
    )
    assert workload_for_job(plain, {"high": 7}) is None  # off: not ours
    wl = workload_for_job(plain, {"high": 7}, accept_kueue_labels=True)
    assert wl is not None and wl.spec.queue_name == "lq" and wl.spec.priority == 7
    assert wl.metadata.labels == {"queueing.dra.io/queue-name": "lq"}
    both = Job.model_validate(kueue_job("b", ours="other"))
    got = workload_for_job(both, accept_kueue_labels=True)
    assert got is not None and got.spec.queue_name == "other"  # ours wins
    with pytest.raises(
        WorkloadError, match=r"metadata.labels\[kueue.x-k8s.io/priority-class\]: no WorkloadPriorityClass"
    ):
        workload_for_job(Job.model_validate(kueue_job("c", "nope")), accept_kueue_labels=True)


class TestOn:
    @pytest.fixture
    def config(self) -> Config:
        return Config(accept_kueue_labels=True)

    async def test_kueue_labelled_jobs_are_queued(
        self, emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns
    ) -> None:
        emu.load_objects(REPO / "deploy" / "overlays" / "kueue-labels" / "mutating-admission-policy.yaml")
        emu.load_objects(priority_classes(("high", 1000)))
        await harness.start()
        created = await admin.create(JOBS, kueue_job("moved", "high"))
        assert created["spec"]["suspend"] is True  # the overlay's policy
        await eventually(
            lambda: is_true(workload(emu, "job-moved"), "Admitted"), "the Kueue-labelled Job is admitted"
        )
        wl = workload(emu, "job-moved")
        assert wl is not None and wl["spec"]["queueName"] == "lq" and wl["spec"]["priority"] == 1000
        assert wl["spec"]["priorityClassRef"]["name"] == "high"
        await eventually(lambda: running(emu, "moved", 1), "it runs")
        cluster.finish_pods("default", "moved")
        await eventually(lambda: is_true(workload(emu, "job-moved"), "Finished"), "it finishes")


async def test_off_by_default_kueue_labelled_jobs_are_left_alone(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns
) -> None:
    await harness.start()
    await admin.create(JOBS, kueue_job("theirs"))
    await admin.create(JOBS, job("ours"))
    # the controller handled the Job it owns (created after the other); the Kueue-labelled one got no
    # Workload and was not suspended: its pods exist, as the Job controller made them
    await eventually(lambda: running(emu, "ours", 1), "our Job runs")
    await eventually(lambda: job_pods(emu, "theirs"), "the other Job has its pods, unmanaged")
    assert workload(emu, "job-theirs") is None
    theirs = get(emu, "jobs", "theirs", "batch")
    assert theirs is not None and theirs["spec"].get("suspend") in (None, False)
