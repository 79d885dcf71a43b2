"""Every command of docs/kubectl.md and docs/migrating-from-kueue.md runs, in order, as written.

The `kubectl ...` and `queueing import-kueue ...` lines of their ``sh`` blocks run with real kubectl
(the plugin on PATH) against the emulator, with the controller running (its visibility API proxied by
the emulator's aggregation layer) and the stand-in cluster; `> FILE` writes the output there, as the
shell would; `# exits N` says the exit code the page promises (else 0). `kubectl apply -k DIR` is run
as `kubectl kustomize DIR` (it deploys the controller into a real cluster: the build is what can be
checked here). Before each command the test waits until the controller looked at every queued Job
(its Workload exists and has its QuotaReserved condition), as a reader would before the next step: a
condition, not a sleep.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

from queueing.controller.visibility import VisibilityServer
from queueing.kube.client import KubeClient
from queueing.testing import Emulator
from queueing.testing.cluster import StandIns
from tests.controller.conftest import eventually
from tests.controller.test_admission import cond, is_true, items, workload
from tests.kubectl.conftest import Kubectl, table

ROOT = Path(__file__).resolve().parents[2]
EXITS = re.compile(r"#\s*exits\s+(\d+)")


def commands(page: str) -> list[tuple[int, str]]:
    out, lang = [], None
    for n, line in enumerate((ROOT / "docs" / page).read_text().splitlines(), start=1):
        if line.startswith("```"):
            lang = line[3:].strip() if lang is None else None
            continue
        if lang == "sh" and line.split(" ")[0] in ("kubectl", "queueing"):
            out.append((n, line))
    return out


def looked_at(emu: Emulator) -> bool:
    """Every queued Job has its Workload, and the controller decided about each (QuotaReserved)."""
    jobs = items(emu, "jobs", "batch", labels="queueing.dra.io/queue-name")
    wls = {w["metadata"]["name"]: w for w in items(emu, "workloads", "queueing.dra.io")}
    return all(
        (w := wls.get(f"job-{j['metadata']['name']}")) is not None and cond(w, "QuotaReserved") is not None
        for j in jobs
    )


async def run_page(page: str, kubectl: Kubectl, emu: Emulator, tmp: Path) -> dict[str, str]:
    outputs: dict[str, str] = {}
    for n, line in commands(page):
        command, _, comment = line.partition("#")
        m = EXITS.search("#" + comment)
        want = int(m.group(1)) if m else 0
        command, _, target = command.partition(" > ")
        words = shlex.split(command)
        if words[:2] == ["kubectl", "apply"] and "-k" in words:
            words = ["kubectl", "kustomize", words[words.index("-k") + 1]]
        if any(w in words for w in ("list", "explain", "--raw")) and items(
            emu, "workloads", "queueing.dra.io"
        ):
            await eventually(lambda: looked_at(emu), "the controller looked at every Workload")
        if words[0] == "queueing":
            rc, out, err = await kubectl.python("-m", "queueing", *words[1:])
        else:
            rc, out, err = await kubectl.run(*words[1:], check=False)
        assert rc == want, f"docs/{page}:{n}: {line}\nexit {rc}, not {want}\n{out[-2000:]}\n{err[-2000:]}"
        if target:
            (kubectl.cwd / target.strip()).write_text(out)
        outputs[line] = out
    return outputs


async def test_kubectl_md(
    emu: Emulator, admin: KubeClient, cluster: StandIns, visibility: VisibilityServer, kubectl: Kubectl,
    tmp_path: Path,
) -> None:  # fmt: skip
    kubectl.env["QUEUEING_DATABASE_URL"] = f"sqlite+aiosqlite:///{tmp_path}/ledger.db"  # the harness's
    kubectl.cwd = ROOT  # the page's paths are the checkout's
    out = await run_page("kubectl.md", kubectl, emu, tmp_path)
    rows = table(out["kubectl queueing list clusterqueues"])
    assert {r["NAME"] for r in rows} == {"team", "team-a"} and "COHORT" in rows[0], rows
    rows = table(out["kubectl queueing list localqueues -A"])
    assert {(r["NAMESPACE"], r["NAME"]) for r in rows} == {("default", "lq"), ("default", "qa")}, rows
    rows = table(out["kubectl queueing list workloads --clusterqueue team-a -o wide"])
    # as the page shows: train admitted, then sweep (higher priority) and eval, in that order
    assert [(r["NAME"], r["POSITION"]) for r in rows] == [
        ("job-train", ""),
        ("job-sweep", "0"),
        ("job-eval", "1"),
    ]
    assert all("insufficient unused quota" in r["REASON"] for r in rows[1:]), rows  # -o wide only
    raw = next(v for k, v in out.items() if "localqueues/qa/pendingworkloads?limit=1&offset=1" in k)
    (item,) = yaml.safe_load(raw)["items"]
    assert (item["metadata"]["name"], item["positionInClusterQueue"], item["positionInLocalQueue"]) == (
        "job-eval", 1, 1,
    )  # fmt: skip
    assert "Pending" in out["kubectl queueing explain sweep"]
    await eventually(lambda: is_true(workload(emu, "job-train"), "Admitted"), "train is admitted")


async def test_migrating_from_kueue_md(emu: Emulator, kubectl: Kubectl, tmp_path: Path) -> None:
    for ns in ("team-a", "team-b"):  # the namespaces the Kueue cluster has
        emu.load_objects([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}])
    kubectl.cwd = tmp_path
    (tmp_path / "docs").symlink_to(ROOT / "docs")
    (tmp_path / "deploy").symlink_to(ROOT / "deploy")
    (tmp_path / "crds").symlink_to(ROOT / "crds")
    out = await run_page("migrating-from-kueue.md", kubectl, emu, tmp_path)
    assert "clusterqueue.queueing.dra.io/team-a created" in out["kubectl apply -f queueing-objects.yaml"]
    cq = emu.store.get(emu.store.resource("clusterqueues", "queueing.dra.io"), None, "team-a")
    assert cq["spec"]["resourceGroups"][1]["flavors"][0]["resources"][0]["name"] == "gpu.example.com"
