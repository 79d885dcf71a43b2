"""Every object under examples/ (and the seed objects) parses into its model and serialises back equal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from queueing.api import v1beta1
from queueing.api.registry import model_for, parse_object

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SEED_TEXTS = ROOT.parent / "shared" / "seeds"  # shared/ lies beside the checkout, in CI too


def documents() -> list[tuple[str, Any]]:
    out = []
    for path in sorted(EXAMPLES.rglob("*.y*ml")):
        if path.suffix not in (".yaml", ".yml"):
            continue
        rel = path.relative_to(ROOT)
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if doc is not None:
                out.append((f"{rel}#{i}", doc))
    return out


DOCS = documents()


def objects(kind: str, folder: str = "examples/queues/") -> list[dict[str, Any]]:
    return [
        d
        for where, d in DOCS
        if where.startswith(folder)
        and isinstance(d, dict)
        and d.get("kind") == kind
        and d.get("apiVersion") == v1beta1.API_VERSION
    ]


@pytest.mark.parametrize(("where", "doc"), DOCS, ids=[w for w, _ in DOCS])
def test_example_round_trips(where: str, doc: Any) -> None:
    if not (
        isinstance(doc, dict) and isinstance(doc.get("apiVersion"), str) and isinstance(doc.get("kind"), str)
    ):
        pytest.skip(f"{where}: not a Kubernetes object (no apiVersion/kind), e.g. a scenario file")
    if model_for(doc["apiVersion"], doc["kind"]) is None:
        pytest.skip(f"{where}: {doc['apiVersion']} {doc['kind']} is not modelled in queueing.api")
    obj = parse_object(doc)
    assert obj.to_dict() == doc
    again = parse_object(obj.to_dict())
    assert again == obj
    assert doc["kind"] == type(obj).KIND


def test_the_seed_objects_are_in_examples() -> None:
    found = {(d.get("kind"), d.get("metadata", {}).get("name")) for _, d in DOCS if isinstance(d, dict)}
    assert ("DeviceClass", "high-memory-gpu") in found
    assert ("ResourceClaim", "vllm-gpu-claim") in found


@pytest.mark.skipif(not SEED_TEXTS.is_dir(), reason="the seed articles are not on this machine")
def test_seed_copies_match_the_articles() -> None:
    """The YAML in examples/seeds is the article's YAML, not a cleaned-up version."""
    article = "\n".join(p.read_text() for p in sorted(SEED_TEXTS.glob("*")))
    for path in sorted((EXAMPLES / "seeds").glob("*.yaml")):
        body = "\n".join(ln for ln in path.read_text().splitlines() if not ln.startswith("#"))
        assert body.strip() in article, path.name


def test_queue_examples_cover_the_issue() -> None:
    flavors = {f["metadata"]["name"]: f for f in objects("ResourceFlavor")}
    assert any(f.get("spec", {}).get("nodeLabels") for f in flavors.values())
    cohorts = {c["metadata"]["name"] for c in objects("Cohort")}
    assert cohorts
    cqs = objects("ClusterQueue")
    in_cohort = [q for q in cqs if q["spec"].get("cohortName") in cohorts]
    assert len(in_cohort) >= 2
    for q in in_cohort:
        covered = {r for g in q["spec"]["resourceGroups"] for r in g["coveredResources"]}
        assert {"gpu.nvidia.com", "gpu.nvidia.com/memory"} <= covered
    assert objects("LocalQueue") and objects("WorkloadPriorityClass") and objects("Workload")


def test_queue_examples_reference_each_other() -> None:
    flavors = {f["metadata"]["name"] for f in objects("ResourceFlavor")}
    cq_names = {q["metadata"]["name"] for q in objects("ClusterQueue")}
    for q in objects("ClusterQueue"):
        for g in q["spec"].get("resourceGroups", []):
            assert {f["name"] for f in g["flavors"]} <= flavors
    local = {(lq["metadata"]["namespace"], lq["metadata"]["name"]) for lq in objects("LocalQueue")}
    assert {lq["spec"]["clusterQueue"] for lq in objects("LocalQueue")} <= cq_names
    wpcs = {p["metadata"]["name"] for p in objects("WorkloadPriorityClass")}
    for wl in objects("Workload"):
        assert (wl["metadata"]["namespace"], wl["spec"]["queueName"]) in local
        ref = wl["spec"].get("priorityClassRef")
        if ref and ref["group"] == v1beta1.GROUP:
            assert ref["name"] in wpcs


def test_admitted_example_counts_its_devices() -> None:
    for doc in objects("Workload"):
        wl = parse_object(doc)
        assert isinstance(wl, v1beta1.Workload)
        adm = wl.status.admission
        if adm is None:
            continue
        assert adm.planned_devices == adm.count_planned_devices()
        for a in adm.pod_set_assignments:
            ps = wl.pod_set(a.name)
            assert ps is not None and a.count is not None and a.count <= ps.count
            assert [p.index for p in a.placements or []] == list(range(a.count))
