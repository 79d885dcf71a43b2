"""examples/deviceclasses and examples/jobs, and the YAML snippets of the docs written with deploy/,
parse and validate; the DeviceClasses select the right H200 devices."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from queueing.api.registry import parse_object
from queueing.config import load_config
from queueing.dra.cel import CELCompileError, DeviceInput, Version, compile_selector, split_qualified_name

from .k8s import ROOT, load_yaml_docs, validation_errors

EXAMPLES = sorted(
    [*(ROOT / "examples/deviceclasses").glob("*.yaml"), *(ROOT / "examples/jobs").glob("*.yaml")]
)
# every page with a yaml snippet (a new page with one is picked up without editing this list)
DOCS = sorted(p.name for p in (ROOT / "docs").rglob("*.md") if "```yaml" in p.read_text())


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(ROOT)))
def test_example_validates(path: Path) -> None:
    docs = load_yaml_docs(path)
    assert docs
    problems = [p for d in docs for p in validation_errors(d)]
    assert problems == []
    for d in docs:
        if d["kind"] in ("DeviceClass", "ResourceClaimTemplate", "ResourceClaim"):
            parse_object(d)  # our models accept it too
        for sel in _selectors(d):
            compile_selector(sel)  # every CEL selector compiles in the DRA environment


def _selectors(obj: dict[str, Any]) -> list[str]:
    found: list[str] = []

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            if isinstance(v.get("cel"), dict) and "expression" in v["cel"]:
                found.append(v["cel"]["expression"])
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(obj)
    return found


def _queues() -> dict[tuple[str, str], dict[str, Any]]:
    docs = [d for p in (ROOT / "examples/queues").glob("*.yaml") for d in load_yaml_docs(p)]
    return {
        (d["kind"], d["metadata"].get("namespace", "") + "/" + d["metadata"]["name"]): d for d in docs
    } | {(d["kind"], d["metadata"]["name"]): d for d in docs}


def _jobs() -> list[dict[str, Any]]:
    return [
        d for p in (ROOT / "examples/jobs").glob("*.yaml") for d in load_yaml_docs(p) if d["kind"] == "Job"
    ]


def test_jobs_name_existing_local_queues_and_priority_classes() -> None:
    queues = _queues()
    jobs = _jobs()
    # whole-GPU gangs, MIG, an extended resource, vLLM inference and a preemption pair (issue #20)
    assert {j["metadata"]["name"] for j in jobs} == {
        "finetune-llama-8b",
        "notebook-eval",
        "cuda-sample",
        "vllm-inference",
        "hyperparameter-sweep",
        "release-eval",
    }
    for job in jobs:
        labels = job["metadata"]["labels"]
        ns = job["metadata"]["namespace"]
        assert ("LocalQueue", f"{ns}/{labels['queueing.dra.io/queue-name']}") in queues, job["metadata"][
            "name"
        ]
        assert ("WorkloadPriorityClass", labels["queueing.dra.io/priority-class"]) in queues
        assert job["spec"]["suspend"] is True


def test_gang_is_two_pods_of_one_gpu() -> None:
    docs = load_yaml_docs(ROOT / "examples/jobs/gang-training.yaml")
    job = next(d for d in docs if d["kind"] == "Job")
    tmpl = next(d for d in docs if d["kind"] == "ResourceClaimTemplate")
    assert job["spec"]["parallelism"] == job["spec"]["completions"] == 2
    (req,) = tmpl["spec"]["spec"]["devices"]["requests"]
    assert req["exactly"] == {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 1}


def test_extended_resource_job_is_backed_by_a_covered_device_class() -> None:
    """examples/jobs/extended-resource-gpu.yaml asks for nvidia.com/gpu; a DeviceClass of
    examples/deviceclasses backs it, and team-b's ClusterQueue covers that class."""
    (job,) = load_yaml_docs(ROOT / "examples/jobs/extended-resource-gpu.yaml")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert "nvidia.com/gpu" in container["resources"]["limits"]
    classes = [d for p in (ROOT / "examples/deviceclasses").glob("*.yaml") for d in load_yaml_docs(p)]
    (backing,) = [c for c in classes if c["spec"].get("extendedResourceName") == "nvidia.com/gpu"]
    queues = _queues()
    lq = queues[("LocalQueue", f"{job['metadata']['namespace']}/main")]
    cq = queues[("ClusterQueue", lq["spec"]["clusterQueue"])]
    covered = {r for g in cq["spec"]["resourceGroups"] for r in g["coveredResources"]}
    assert backing["metadata"]["name"] in covered


def test_example_queues_cover_the_device_classes_the_jobs_use() -> None:
    queues = _queues()
    for path in sorted((ROOT / "examples/jobs").glob("*.yaml")):
        docs = load_yaml_docs(path)
        job = next(d for d in docs if "queueing.dra.io/queue-name" in d["metadata"].get("labels", {}))
        ns = job["metadata"]["namespace"]
        lq = queues[("LocalQueue", f"{ns}/{job['metadata']['labels']['queueing.dra.io/queue-name']}")]
        cq = queues[("ClusterQueue", lq["spec"]["clusterQueue"])]
        covered = {r for g in cq["spec"]["resourceGroups"] for r in g["coveredResources"]}
        for t in (d for d in docs if d["kind"] == "ResourceClaimTemplate"):
            for req in t["spec"]["spec"]["devices"]["requests"]:
                assert req["exactly"]["deviceClassName"] in covered, (path.name, cq["metadata"]["name"])


# --- the DeviceClasses against real H200 devices (examples/allocate/h200-node.yaml, from NVML data)


def _devices() -> dict[str, DeviceInput]:
    out = {}
    for d in load_yaml_docs(ROOT / "examples/allocate/h200-node.yaml"):
        if d["kind"] != "ResourceSlice":
            continue
        rs = parse_object(d)
        driver = rs.spec.driver
        for dev in rs.spec.devices or []:
            attrs: dict[str, dict[str, Any]] = {}
            for name, a in (dev.attributes or {}).items():
                kv = a.kind_and_value()
                assert kv is not None
                dom, ident = split_qualified_name(name, driver)
                attrs.setdefault(dom, {})[ident] = Version(str(kv[1])) if kv[0] == "version" else kv[1]
            caps: dict[str, dict[str, Any]] = {}
            for name, c in (dev.capacity or {}).items():
                dom, ident = split_qualified_name(name, driver)
                caps.setdefault(dom, {})[ident] = c.value
            out[dev.name] = DeviceInput(driver=driver, attributes=attrs, capacity=caps)
    return out


def _class_matches(path: str, device: DeviceInput) -> bool:
    (dc,) = load_yaml_docs(ROOT / path)
    return all(compile_selector(s["cel"]["expression"]).matches(device) for s in dc["spec"]["selectors"])


def _profile(dev: DeviceInput) -> str:
    return str(dev.attributes["gpu.nvidia.com"].get("profile", "gpu"))


def test_device_classes_select_the_right_h200_devices() -> None:
    devices = _devices()
    gpus = {n for n, d in devices.items() if d.attributes["gpu.nvidia.com"]["type"] == "gpu"}
    migs = set(devices) - gpus
    assert len(gpus) == 8 and migs
    gpu_class = {
        n for n, d in devices.items() if _class_matches("examples/deviceclasses/gpu.nvidia.com.yaml", d)
    }
    mig_class = {
        n for n, d in devices.items() if _class_matches("examples/deviceclasses/mig.nvidia.com.yaml", d)
    }
    assert (gpu_class, mig_class) == (gpus, migs)
    high = {n for n, d in devices.items() if _class_matches("examples/deviceclasses/high-memory-gpu.yaml", d)}
    # more than 40Gi of memory: whole H200s and the 3g.71gb, 4g.71gb and 7g.141gb slices; not 1g/2g
    assert gpus <= high
    assert {_profile(devices[n]) for n in high - gpus} == {"3g.71gb", "4g.71gb", "7g.141gb"}


def test_seed_high_memory_gpu_is_invalid_and_the_example_is_its_correction() -> None:
    (seed,) = load_yaml_docs(ROOT / "examples/seeds/high-memory-gpu.yaml")
    (fixed,) = load_yaml_docs(ROOT / "examples/deviceclasses/high-memory-gpu.yaml")
    assert seed["metadata"]["name"] == fixed["metadata"]["name"]
    with pytest.raises(CELCompileError):
        compile_selector(seed["spec"]["selectors"][0]["cel"]["expression"])
    exprs = [s["cel"]["expression"] for s in fixed["spec"]["selectors"]]
    assert 'device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("40Gi"))' in exprs


# --- docs


def _yaml_blocks(name: str) -> list[tuple[int, str]]:
    text = (ROOT / "docs" / name).read_text()
    return [
        (text[: m.start()].count("\n") + 1, m.group(1)) for m in re.finditer(r"```yaml\n(.*?)```", text, re.S)
    ]


@pytest.mark.parametrize("name", DOCS)
def test_doc_yaml_snippets_parse_and_validate(name: str, tmp_path: Path) -> None:
    blocks = _yaml_blocks(name)
    assert blocks, f"docs/{name} has no yaml snippet"
    for line, block in blocks:
        docs = [d for d in yaml.safe_load_all(block) if d is not None]
        assert docs, f"docs/{name}:{line}: empty yaml block"
        for d in docs:
            if isinstance(d, dict) and "apiVersion" in d and "kind" in d:
                if d["apiVersion"].startswith("monitoring.coreos.com/"):
                    assert d["kind"] in ("ServiceMonitor", "PrometheusRule"), f"docs/{name}:{line}"
                    continue
                assert validation_errors(d) == [], f"docs/{name}:{line}"
            elif isinstance(d, dict):  # a configuration fragment: the controller must accept it
                cfg = tmp_path / "config.yaml"
                cfg.write_text(yaml.safe_dump(d))
                load_config(str(cfg), {"QUEUEING_DATABASE_URL": "sqlite+aiosqlite:///doc.db"})
