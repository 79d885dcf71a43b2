"""``queueing allocate`` with Pods and Jobs: extended resources become implicit claims, shown in the
``claims`` array as ``<pod>-extended-resources`` and per pod in ``pods``. Input: the real H200 node
(tests/fixtures/dra/h200-mig-node.yaml) and tests/fixtures/dra/extended-resources.yaml."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from dra_helpers import FIXTURES

from queueing.cli import main

BASE = ["h200-mig-node.yaml", "extended-resources.yaml"]


def run(
    tmp_path: Path,
    capsys: Any,
    extra: list[dict[str, Any]] | None = None,
    base: list[str] = BASE,
    args: list[str] | None = None,
) -> tuple[int, dict[str, Any] | None, str]:
    files = [str(FIXTURES / b) for b in base]
    if extra is not None:
        f = tmp_path / "extra.yaml"
        f.write_text(yaml.safe_dump_all(extra))
        files.append(str(f))
    argv = ["allocate"]
    for f in files:
        argv += ["-f", f]
    rc = main(argv + (args or []))
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if out else None), err


def test_job_with_extended_resource_limits_gets_implicit_claims(tmp_path: Path, capsys: Any) -> None:
    rc, out, err = run(tmp_path, capsys)
    assert rc == 0, err
    assert out is not None and out["allocated"] is True and out["node"] == "h200-0"
    names = [c["name"] for c in out["claims"]]
    assert names == ["train-0-extended-resources", "train-1-extended-resources"]
    devices = []
    for c in out["claims"]:
        results = c["allocation"]["devices"]["results"]
        # trainer's requests sorted: cpu, memory, nvidia.com/gpu -> request index 2
        assert [r["request"] for r in results] == ["container-0-request-2"] * 4
        devices += [r["device"] for r in results]
    assert sorted(devices) == [f"gpu-{i}" for i in range(8)]  # whole GPUs, none twice
    assert [(p["name"], p["node"]) for p in out["pods"]] == [("train-0", "h200-0"), ("train-1", "h200-0")]
    status = out["pods"][0]["extendedResourceClaimStatus"]
    assert status == {
        "resourceClaimName": "train-0-extended-resources",
        "requestMappings": [
            {
                "containerName": "trainer",
                "resourceName": "nvidia.com/gpu",
                "requestName": "container-0-request-2",
            }
        ],
    }


def test_a_third_pod_does_not_fit_and_the_reason_names_its_implicit_claim(
    tmp_path: Path, capsys: Any
) -> None:
    job = yaml.safe_load((FIXTURES / "extended-resources.yaml").read_text().split("---")[1])
    job["spec"]["parallelism"] = job["spec"]["completions"] = 3
    dc = yaml.safe_load((FIXTURES / "extended-resources.yaml").read_text().split("---")[0])
    rc, out, _ = run(tmp_path, capsys, [dc, job], base=["h200-mig-node.yaml"])
    assert rc == 1 and out is not None
    assert out["claims"] == [] and out["node"] is None
    assert "train-2" in out["reason"] and "default/train-2-extended-resources" in out["reason"]


def test_explicit_claim_and_extended_resource_share_no_device(tmp_path: Path, capsys: Any) -> None:
    tmpl = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu", "namespace": "default"},
        "spec": {
            "spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "nvidia-gpu"}}]}}
        },
    }

    def pod(n_ext: int) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "mix", "namespace": "default"},
            "spec": {
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
                "containers": [
                    {
                        "name": "c",
                        "resources": {"limits": {"nvidia.com/gpu": n_ext}, "claims": [{"name": "gpu"}]},
                    }
                ],
            },
        }

    dc = yaml.safe_load((FIXTURES / "extended-resources.yaml").read_text().split("---")[0])
    rc, out, err = run(tmp_path, capsys, [dc, tmpl, pod(7)], base=["h200-mig-node.yaml"])
    assert rc == 0, err
    assert out is not None and [c["name"] for c in out["claims"]] == ["mix-gpu", "mix-extended-resources"]
    devs = [r["device"] for c in out["claims"] for r in c["allocation"]["devices"]["results"]]
    assert sorted(devs) == [f"gpu-{i}" for i in range(8)]
    assert out["pods"][0]["claims"] == ["mix-gpu", "mix-extended-resources"]
    rc, out, _ = run(tmp_path, capsys, [dc, tmpl, pod(8)], base=["h200-mig-node.yaml"])
    assert rc == 1  # 1 + 8 whole GPUs on an 8-GPU node


def test_pods_without_devices_keep_the_claim_only_contract(tmp_path: Path, capsys: Any) -> None:
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
    }
    plain = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c"}]},
    }
    rc, out, err = run(tmp_path, capsys, [claim, plain], base=["h200-mig-node.yaml"])
    assert rc == 0 and out is not None
    assert set(out) == {"allocated", "node", "claims"}  # no "pods" key: the old output exactly
    assert "ignoring Pod default/p" in err


def test_unmapped_extended_resource_uses_node_allocatable(tmp_path: Path, capsys: Any) -> None:
    # without a DeviceClass naming nvidia.com/gpu the H200 node (which publishes no nvidia.com/gpu
    # allocatable) cannot run the Job; the GPUs in its ResourceSlice are not used
    job = yaml.safe_load((FIXTURES / "extended-resources.yaml").read_text().split("---")[1])
    rc, out, _ = run(tmp_path, capsys, [job], base=["h200-mig-node.yaml"])
    assert rc == 1 and out is not None
    assert "nvidia.com/gpu: needs 4, 0 free" in out["reason"]
