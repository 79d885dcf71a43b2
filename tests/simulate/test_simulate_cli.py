"""The `queueing simulate` contract: flags, JSON lines, table, exit codes, --ledger, --plot."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from scenario_builder import cluster, cluster_queue, flavor, job, local_queue, template, write

from queueing.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "simulate"


def scenario(tmp_path: Path, *jobs: dict[str, Any]) -> Path:
    d = tmp_path / "scenario"
    d.mkdir()
    write(d / "a-cluster.yaml", cluster(2))
    write(
        d / "b-queues.yaml",
        [flavor(), cluster_queue("cq", 16), local_queue("ml", "lq", "cq"), template("ml", 8)],
    )
    write(
        d / "c-jobs.yaml",
        list(jobs) or [job("ml", "one", gpus=8, pods=2), job("ml", "two", gpus=8, arrival="30s")],
    )
    return d


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(["simulate", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_json_lines_contract(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, "-f", str(scenario(tmp_path)), "-o", "json")
    assert rc == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert [(x["time"], x["event"], x["job"]) for x in lines[:-1]] == [
        (0, "Admitted", "ml/one"),
        (30, "Inadmissible", "ml/two"),
        (600, "Finished", "ml/one"),
        (600, "Admitted", "ml/two"),
        (1200, "Finished", "ml/two"),
    ]
    assert lines[0] == {
        "time": 0,
        "event": "Admitted",
        "job": "ml/one",
        "kind": "Job",
        "clusterQueue": "cq",
        "reason": "admitted",
        "nodes": ["h200-0", "h200-1"],
    }
    assert lines[1]["reason"].startswith("Pending: insufficient unused quota for gpu.nvidia.com")
    summary = lines[-1]
    assert summary["event"] == "Summary"
    cq = summary["clusterQueues"]["cq"]
    assert (cq["admitted"], cq["meanWait"], cq["p90Wait"]) == (2, 285, 570)
    # 16 GPUs busy for 600 s, then 8 for 600 s, of 16 devices over 1200 s
    assert summary["deviceUtilisation"] == 0.75 and summary["devices"] == 16


def test_files_and_directories_give_the_same_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = scenario(tmp_path)
    _, by_dir, _ = run(capsys, "-f", str(d))
    files = [a for f in sorted(d.iterdir()) for a in ("-f", str(f))]
    _, by_files, _ = run(capsys, *files)
    assert by_dir == by_files and by_dir


def test_table_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "-f", str(scenario(tmp_path)), "-o", "table")
    assert rc == 0
    assert out.splitlines()[0].split() == ["TIME", "EVENT", "JOB", "CLUSTERQUEUE", "DETAIL"]
    assert "ml/two" in out and "CLUSTERQUEUE  ADMITTED" in out and "device utilisation 75.0%" in out


def test_example_scenario_runs(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "-f", str(EXAMPLES), "-o", "json")
    assert rc == 0
    lines = [json.loads(line) for line in out.splitlines()]
    summary = lines[-1]
    assert summary["jobs"] == summary["finished"] == 15
    assert {"team-a", "team-b"} == set(summary["clusterQueues"])
    assert any(x["event"] == "Evicted" for x in lines)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (
            job("ml", "bad", arrival="soon"),
            "error: Job ml/bad: metadata.annotations[simulate.queueing.dra.io/arrival]: not a duration: 'soon'",
        ),
        (
            job("ml", "bad", duration=None),
            "error: Job ml/bad: metadata.annotations[simulate.queueing.dra.io/duration]: missing",
        ),
        (
            {**job("ml", "bad"), "metadata": {"name": "bad", "namespace": "ml"}},
            "error: Job ml/bad: metadata.labels[queueing.dra.io/queue-name]: missing",
        ),
        (
            job("ml", "bad", priority_class="nope"),
            "error: Job ml/bad: metadata.labels[queueing.dra.io/priority-class]: no WorkloadPriorityClass",
        ),
        (
            {
                "apiVersion": "queueing.dra.io/v1beta1",
                "kind": "LocalQueue",
                "metadata": {"name": "x", "namespace": "ml"},
                "spec": {},
            },
            "error: LocalQueue ml/x: spec.clusterQueue",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], doc: dict[str, Any], message: str
) -> None:
    d = scenario(tmp_path)
    write(d / "d-bad.yaml", [doc])
    rc, out, err = run(capsys, "-f", str(d))
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith(message), err


def test_missing_file_and_bad_config_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(capsys, "-f", str(tmp_path / "nope.yaml"))
    assert rc == 2 and "nope.yaml: no such file or directory" in err
    cfg = tmp_path / "config.yaml"
    cfg.write_text("fairSharing:\n  enable: maybe\n")
    rc, _, err = run(capsys, "-f", str(scenario(tmp_path)), "--config", str(cfg))
    assert rc == 2 and "fairSharing.enable" in err and len(err.strip().splitlines()) == 1


def test_config_file_switches_fair_sharing_off(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        "fairSharing:\n  enable: false\nwaitForPodsReady:\n  requeuingStrategy:\n    backoffBaseSeconds: 5\n"
    )
    rc, out, err = run(capsys, "-f", str(scenario(tmp_path)), "--config", str(cfg))
    assert rc == 0, err
    assert json.loads(out.splitlines()[-1])["event"] == "Summary"


def test_plot_writes_a_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "out.png"
    rc, _, err = run(capsys, "-f", str(scenario(tmp_path)), "--plot", str(png))
    assert rc == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails
    rc, out, err = run(capsys, "-f", str(scenario(tmp_path)), "--plot", str(tmp_path / "x.png"))
    assert rc == 2 and out == ""
    assert "--plot needs matplotlib" in err and "pip install" in err


def test_ledger_then_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}"
    rc, out, err = run(capsys, "-f", str(scenario(tmp_path)), "--ledger", url)
    assert rc == 0, err
    assert "recorded run" in err
    seconds = json.loads(out.splitlines()[-1])["clusterQueues"]["cq"]["deviceSeconds"]
    assert seconds == 16 * 600 + 8 * 600
    assert main(["report", "device-hours", "--url", url, "-o", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert sum(float(r["device_hours"]) for r in rows) == pytest.approx(seconds / 3600)
    assert main(["report", "wait-times", "--url", url, "-o", "json"]) == 0
    waits = [r for r in json.loads(capsys.readouterr().out) if r["queue"] == "cq"]
    assert waits and waits[0]["admissions"] == 2 and float(waits[0]["max_s"]) == 570


def test_ledger_url_error_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(capsys, "-f", str(scenario(tmp_path)), "--ledger", "mysql://nope")
    assert rc == 2 and "--ledger" in err and len(err.strip().splitlines()) == 1
