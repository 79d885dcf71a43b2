"""Scenario tests: YAML in, events out, through the real DRA placer on H200 nodes."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml
from scenario_builder import (
    GPU,
    cluster,
    cluster_queue,
    cohort,
    flavor,
    job,
    local_queue,
    priority,
    template,
    write,
)

from queueing.scheduling.config import SchedulingConfig
from queueing.scheduling.dra_placer import DraPlan
from queueing.simulate.engine import SimEvent, SimResult, Simulation
from queueing.simulate.scenario import load_scenario

NO_FAIR_SHARING = SchedulingConfig.from_dict({"fairSharing": {"enable": False}})


def simulate(tmp_path: Path, docs: list[dict[str, Any]], config: SchedulingConfig | None = None) -> SimResult:
    f = write(tmp_path / "scenario.yaml", docs)
    return Simulation(load_scenario([str(f)]), config).run()


def of(result: SimResult, event: str, job_key: str | None = None) -> list[SimEvent]:
    return [e for e in result.events if e.event == event and (job_key is None or e.job == job_key)]


def base(ns: str = "ml", gpus: int = 32, nodes: int = 4, **cq: Any) -> list[dict[str, Any]]:
    return [
        *cluster(nodes),
        flavor(),
        cluster_queue("cq", gpus, **cq),
        local_queue(ns, "lq", "cq"),
        *(template(ns, g) for g in (1, 2, 4, 8)),
    ]


def test_gang_that_fits_by_quota_waits_for_devices(tmp_path: Path) -> None:
    # 1 GPU busy on each of the 4 nodes: 28 GPUs free, quota 32 - but no node has 8 free GPUs
    blockers = [job("ml", f"blocker-{i}", node=f"h200-{i}", duration="10m") for i in range(4)]
    gang = job("ml", "gang", pods=3, gpus=8, arrival="1s", duration="5m")
    r = simulate(tmp_path, [*base(), *blockers, gang])
    assert [e.time for e in of(r, "Admitted") if e.job.startswith("ml/blocker")] == [0, 0, 0, 0]
    waits = of(r, "Inadmissible", "ml/gang")
    assert waits and waits[0].time == 1
    assert "couldn't place the gang" in waits[0].reason
    # which claim, best node, how short
    assert "claim gpus: 8 x gpu.nvidia.com" in waits[0].reason
    assert "best node h200-0 has 7 free (1 short)" in waits[0].reason
    (adm,) = of(r, "Admitted", "ml/gang")
    assert adm.time == 600  # when the blockers finish, not before
    assert adm.nodes is not None and len(adm.nodes) == 3 and len(set(adm.nodes)) == 3
    assert of(r, "Finished", "ml/gang")[0].time == 900


def test_gang_is_never_partially_admitted(tmp_path: Path) -> None:
    # 2 nodes; a 3 x 8 gang cannot fit at all, even with enough quota: never an admission
    docs = [*base(nodes=2), job("ml", "small", gpus=8, duration="1m"), job("ml", "gang", pods=3, gpus=8)]
    r = simulate(tmp_path, docs)
    assert of(r, "Admitted", "ml/gang") == []
    assert "couldn't place the gang" in of(r, "Inadmissible", "ml/gang")[-1].reason
    # every admission places every pod of its gang
    for e in of(r, "Admitted"):
        assert e.admission is not None
        assert e.nodes is not None and len(e.nodes) == sum(p.count for p in e.admission.workload.pod_sets)
    summary = r.summary.cluster_queues["cq"]
    assert summary.pending == 1 and summary.finished == 1


def test_reclaim_evicts_a_borrower(tmp_path: Path) -> None:
    docs = [
        *cluster(4),
        flavor(),
        cohort("research"),
        cluster_queue("team-a", 16, cohort="research", reclaim="Any"),
        cluster_queue("team-b", 16, cohort="research", reclaim="Any"),
        local_queue("a", "lq", "team-a"),
        local_queue("b", "lq", "team-b"),
        template("a", 8),
        template("b", 8),
        job("b", "big", pods=4, gpus=8, duration="1h"),  # borrows 16 of team-a's GPUs
        job("a", "mine", pods=2, gpus=8, arrival="60s", duration="10m"),
    ]
    r = simulate(tmp_path, docs, NO_FAIR_SHARING)
    assert of(r, "Admitted", "b/big")[0].reason == "admitted by borrowing"
    (ev,) = of(r, "Evicted")
    assert (ev.time, ev.job, ev.reason, ev.preemptor) == (60, "b/big", "InCohortReclamation", "a/mine")
    assert of(r, "Admitted", "a/mine")[0].time == 60
    # the evicted job is requeued at once, admitted again once team-a's job is done (no borrowing
    # room before) and reruns its full hour
    again = of(r, "Admitted", "b/big")
    assert len(again) == 2 and again[1].time >= 60 + 60
    assert of(r, "Finished", "b/big")[0].time == again[1].time + 3600


def test_priority_preemption_evicts_one_8_gpu_victim(tmp_path: Path) -> None:
    docs = [
        *base(within="LowerPriority"),
        priority("low", 10),
        priority("high", 1000),
        job("ml", "big", gpus=8, priority_class="low", duration="1h"),
        *(job("ml", f"small-{i:02d}", gpus=1, priority_class="low", duration="1h") for i in range(24)),
        job("ml", "urgent", gpus=8, priority_class="high", arrival="5m", duration="10m"),
    ]
    r = simulate(tmp_path, docs)
    big_node = of(r, "Admitted", "ml/big")[0].nodes
    small_nodes = {e.nodes[0] for e in of(r, "Admitted") if e.job.startswith("ml/small") and e.nodes}
    assert big_node is not None and big_node[0] not in small_nodes  # the small ones fill the other nodes
    evicted = of(r, "Evicted")
    assert [(e.job, e.reason, e.preemptor) for e in evicted] == [("ml/big", "InClusterQueue", "ml/urgent")]
    (adm,) = of(r, "Admitted", "ml/urgent")
    assert adm.time == 300 and adm.nodes == big_node


def test_fair_sharing_weights_1_to_3_give_1_to_3_device_seconds(tmp_path: Path) -> None:
    jobs = []
    for ns in ("a", "b"):
        jobs += [job(ns, f"j{i:03d}", gpus=1, duration="60s") for i in range(120)]
    docs = [
        *cluster(4),
        flavor(),
        cohort("root", gpus=32),
        cluster_queue("team-a", 0, cohort="root", weight="1"),
        cluster_queue("team-b", 0, cohort="root", weight="3"),
        local_queue("a", "lq", "team-a"),
        local_queue("b", "lq", "team-b"),
        template("a", 1),
        template("b", 1),
        *jobs,
    ]
    r = simulate(tmp_path, docs)
    # device-seconds while both queues still have a backlog (until the first queue runs dry)
    last_start = {
        cq: max(e.time for e in of(r, "Admitted") if e.cluster_queue == cq) for cq in ("team-a", "team-b")
    }
    horizon = min(last_start.values())
    assert horizon > 0
    starts = {e.job: e.time for e in of(r, "Admitted")}
    ends = {e.job: e.time for e in of(r, "Finished")}
    secs = {"team-a": 0.0, "team-b": 0.0}
    for e in of(r, "Admitted"):
        assert e.cluster_queue is not None
        secs[e.cluster_queue] += max(0.0, min(ends[e.job], horizon) - starts[e.job])
    ratio = secs["team-b"] / secs["team-a"]
    assert 2.5 <= ratio <= 3.5, (secs, ratio)
    assert r.summary.device_utilisation > 0.9


def test_extended_resource_job_is_charged_to_its_device_class(tmp_path: Path) -> None:
    docs = [
        *cluster(1, extended=True),
        flavor(),
        cluster_queue("cq", 16),  # quota is not what blocks: devices are
        local_queue("ml", "lq", "cq"),
        template("ml", 7),
        job("ml", "seven", gpus=7, duration="10m"),  # leaves 1 GPU free
        job("ml", "ext", gpus=0, extended=2, arrival="1s", duration="5m"),
    ]
    r = simulate(tmp_path, docs)
    (adm,) = of(r, "Admitted", "ml/ext")
    assert adm.time == 600  # two matching devices are free only once "seven" finished
    reason = of(r, "Inadmissible", "ml/ext")[0].reason
    assert (
        "extended resource nvidia.com/gpu: 2 x gpu.nvidia.com" in reason and "has 1 free (1 short)" in reason
    )
    assert adm.admission is not None
    a = adm.admission.assignment
    assert a.usage == {("h200", GPU): Fraction(2)}
    assert a.placement.device_charges[GPU] == 2
    plan = a.placement.detail
    assert isinstance(plan, DraPlan)
    (pod,) = plan.pods
    assert len(pod.devices) == 2 and pod.claims[0].extended
    assert {m.resource_name for m in pod.extended_mappings} == {"nvidia.com/gpu"}


def test_extended_resource_without_mapping_is_a_node_resource(tmp_path: Path) -> None:
    docs = [
        *cluster(1),  # no DeviceClass maps nvidia.com/gpu, the node does not publish it
        flavor(),
        cluster_queue("cq", 8),
        local_queue("ml", "lq", "cq"),
        job("ml", "ext", gpus=0, extended=2),
    ]
    r = simulate(tmp_path, docs)
    assert of(r, "Admitted") == []
    assert (
        "resource nvidia.com/gpu unavailable in ClusterQueue cq" in of(r, "Inadmissible", "ml/ext")[0].reason
    )


def test_partial_admission_with_min_parallelism(tmp_path: Path) -> None:
    docs = [*base(gpus=16, nodes=2), job("ml", "elastic", pods=4, gpus=8, min_parallelism=2)]
    r = simulate(tmp_path, docs)
    (adm,) = of(r, "Admitted", "ml/elastic")
    assert adm.reason == "partial admission: 2 of 4 pods" and adm.nodes is not None and len(adm.nodes) == 2


def test_evicted_job_is_requeued_at_once_and_reruns_its_full_duration(tmp_path: Path) -> None:
    # as in Kueue (and the controller), a preempted workload is pending again at once: only a
    # waitForPodsReady timeout backs off, and the simulator has none (a configured backoff is ignored)
    cfg = SchedulingConfig.from_dict({"waitForPodsReady": {"requeuingStrategy": {"backoffBaseSeconds": 30}}})
    docs = [
        *base(gpus=8, nodes=1, within="LowerPriority"),
        priority("low", 1),
        priority("high", 2),
        job("ml", "victim", gpus=8, priority_class="low", duration="10m"),
        job("ml", "boss", gpus=8, priority_class="high", arrival="2m", duration="10s"),
    ]
    for config in (None, cfg):
        r = simulate(tmp_path, docs, config)
        assert [
            (e.time, e.event) for e in r.events if e.job == "ml/victim" and e.event != "Inadmissible"
        ] == [
            (0, "Admitted"),
            (120, "Evicted"),
            (130, "Admitted"),  # when boss finishes, no backoff
            (730, "Finished"),  # the full 10 minutes again
        ]
        assert not any("Backoff" in e.reason for e in r.events if e.event == "Inadmissible")
        assert r.summary.cluster_queues["cq"].evicted == 1


def test_events_are_in_time_order_and_json_shaped(tmp_path: Path) -> None:
    r = simulate(
        tmp_path, [*base(), job("ml", "a", gpus=8, pods=3), job("ml", "b", gpus=8, pods=2, arrival="1m")]
    )
    times = [e.time for e in r.events]
    assert times == sorted(times)
    for e in r.events:
        d = e.to_json()
        assert list(d)[:6] == ["time", "event", "job", "kind", "clusterQueue", "reason"]
        assert d["kind"] == "Job"
        assert ("nodes" in d) == (e.event == "Admitted") and ("preemptor" in d) == (e.event == "Evicted")
    s = r.summary.to_json()
    assert s["event"] == "Summary"
    cq = s["clusterQueues"]["cq"]  # type: ignore[index]
    # a (3 x 8 GPUs) runs at once on 3 of the 4 nodes for 10 minutes; b (2 x 8) arrives at 1m and
    # needs two free nodes: it waits until a finishes at 10m (540 s). Mean (0 + 540) / 2, p90 = 540.
    assert cq["admitted"] == 2 and cq["meanWait"] == 270 and cq["p90Wait"] == 540
    yaml.safe_dump(s)  # plain data


def test_pod_group_is_one_gang(tmp_path: Path) -> None:
    pods = []
    for i in range(2):
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"worker-{i}",
                    "namespace": "ml",
                    "labels": {"queueing.dra.io/pod-group": "g", "queueing.dra.io/queue-name": "lq"},
                    "annotations": {
                        "queueing.dra.io/pod-group-total-count": "2",
                        "simulate.queueing.dra.io/duration": "5m",
                    },
                },
                "spec": {
                    "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "gpus-8"}],
                    "containers": [{"name": "m", "image": "x", "resources": {"claims": [{"name": "gpus"}]}}],
                },
            }
        )
    r = simulate(tmp_path, [*base(nodes=2), *pods])
    (adm,) = of(r, "Admitted", "ml/g")
    assert adm.nodes == ("h200-0", "h200-1")
    assert of(r, "Finished", "ml/g")[0].time == 300


def test_a_run_leaves_the_garbage_collector_as_it_found_it(tmp_path: Path, monkeypatch: Any) -> None:
    import gc

    import queueing.simulate.engine as engine

    docs = [*base(nodes=1), job("ml", "a", gpus=8, duration="1m"), job("ml", "b", gpus=8, duration="1m")]
    assert gc.isenabled()
    seen: list[bool] = []
    monkeypatch.setattr(engine, "_COLLECT_AFTER", -1)  # collect after every cycle
    monkeypatch.setattr(engine.gc, "collect", lambda *a: seen.append(gc.isenabled()) or 0)
    r = simulate(tmp_path, docs)
    assert len(of(r, "Admitted")) == 2
    assert seen and not any(seen)  # explicit collections only, automatic collection off meanwhile
    assert gc.isenabled()
    gc.disable()
    try:
        simulate(tmp_path, docs)
        assert not gc.isenabled()
    finally:
        gc.enable()
