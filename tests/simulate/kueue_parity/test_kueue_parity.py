"""Kueue parity: cases of Kueue's own preemption, hierarchical-cohort and fair-sharing test tables,
translated into ``queueing simulate`` scenarios (``NN-*.yaml`` here, written by ``make_cases.py``;
the list with sources is in docs/migrating-from-kueue.md). Each scenario's header names its source
and what Kueue's test asserts: the workloads the incoming one preempts, with their reasons, and
whether it is then admitted.

The scenario runs through the simulator (the real scheduling cycle and DRA placer) with the header's
configuration; the check is on what happens when the incoming workload arrives."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import make_cases
import pytest
import yaml

from queueing.scheduling.config import SchedulingConfig
from queueing.simulate.engine import Simulation
from queueing.simulate.scenario import load_scenario

HERE = Path(__file__).resolve().parent
CASES = sorted(HERE.glob("[0-9][0-9]-*.yaml"))
HEADER = re.compile(r"^# (source|config|expect|divergence): (.*)$", re.M)


def header(path: Path) -> dict[str, Any]:
    got = {k: v for k, v in HEADER.findall(path.read_text())}
    assert {"source", "config", "expect"} <= set(got), f"{path.name}: header lines missing"
    return {
        "source": got["source"],
        "config": yaml.safe_load(got["config"]),
        "expect": yaml.safe_load(got["expect"]),
        "divergence": got.get("divergence", ""),
    }


def test_there_are_at_least_40_cases_each_citing_its_kueue_test() -> None:
    assert len(CASES) >= 40
    for path in CASES:
        src = header(path)["source"]
        assert re.match(r'pkg/scheduler/\S+_test\.go Test\w+ ".+"$', src), (path.name, src)


def test_the_scenarios_are_what_make_cases_writes() -> None:
    assert {p.name: p.read_text() for p in CASES} == make_cases.rendered(), (
        "rerun python tests/simulate/kueue_parity/make_cases.py"
    )


def test_docs_list_every_case_with_its_source() -> None:
    doc = (HERE.parents[2] / "docs" / "migrating-from-kueue.md").read_text()
    assert make_cases.doc_table() in doc, (
        "copy the table make_cases.py prints into docs/migrating-from-kueue.md"
    )


def _param(path: Path) -> Any:
    why = header(path)["divergence"]
    # a documented difference: Kueue's expectation must keep failing (strict), so the case and the
    # docs are revisited when it changes
    marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
    return pytest.param(path, id=path.stem, marks=marks)


@pytest.mark.parametrize("path", [_param(p) for p in CASES])
def test_kueue_parity(path: Path) -> None:
    h = header(path)
    want = h["expect"]
    result = Simulation(load_scenario([str(path)]), SchedulingConfig.from_dict(h["config"])).run()
    at = want["at"]
    preempted = {
        e.job: e.reason
        for e in result.events
        if e.event == "Evicted" and e.time == at and e.preemptor == want["preemptor"]
    }
    admitted = any(
        e.event == "Admitted" and e.job == want["preemptor"] and e.time == at for e in result.events
    )
    assert (preempted, admitted) == (want["preempted"], want["admitted"]), h["source"]
    # TestSchedule: the flavor of cpu of every workload admitted then, and the ones left pending
    got = {e.job: e for e in result.events if e.event == "Admitted" and e.time == at}
    for key, flavor in want.get("admittedWith", {}).items():
        assert key in got, (h["source"], key, "not admitted")
        adm = got[key].admission
        assert adm is not None
        assert {f["cpu"] for f in adm.assignment.flavors.values()} == {flavor}, (h["source"], key)
    for key in want.get("pending", []):
        assert key not in got, (h["source"], key, "admitted")
